// Package filestore provides the file backend of objstore: a bucket that is
// a local directory (dev mode, single host; docs/objstore.md#backends).
//
// It keeps the same guarantees as the s3 backend, on one machine:
//
//   - Create never overwrites and is durable when it returns: the body is
//     written to an unnamed file in the key's folder (Linux, O_TMPFILE) or
//     else to a temporary file opened with O_EXCL, fsynced, then
//     hard-linked to its final name with linkat(2)/link(2) — which fails
//     atomically with EEXIST when the key exists (rename(2) would silently
//     replace it) — and the directory is fsynced.
//   - Put replaces atomically (temporary file, fsync, rename, fsync of the
//     directory); with IfMatch the compare-and-swap runs under an flock(2)
//     lock shared by every process using the directory.
//   - Readers see either the old or the new object, never a partial one;
//     temporary and lock files live below the reserved ".objstore" folder
//     and are never listed or read as objects.
//   - A key can never reach outside the root: keys are checked with
//     objstore.ValidateKey and every file access goes through an os.Root.
//
// ETags are the hex MD5 of the body, as S3 computes them for single-part
// uploads; they are cached per (device, inode, size, mtime) once a file is
// a few seconds old, so Stat and List do not re-hash settled files; the
// If-Match check of Put always hashes afresh.
//
// A key cannot be both an object and the folder of longer keys ("a" and
// "a/b"); such a write fails with objstore.ErrInvalidKey. sluice's layout
// (segments/, checkpoints/, _sluice/) never does that.
package filestore
