//go:build linux

package filestore

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// createUnnamed is Create's fast path on Linux: the body goes into an
// unnamed file of key's folder (open(2) O_TMPFILE), is fsynced, and the
// file is linked to its name (linkat(2) through /proc/self/fd, which fails
// with EEXIST when the name exists: never an overwrite), then the folder is
// fsynced — one handle of the folder for all of it. The guarantees are
// those of the temporary-file path (a crash leaves either no object or the
// whole body under its name: the body is durable before it has a name);
// it saves the temporary file's name being created in and removed from
// the temporary folder, and the path walks of reopening folders.
//
// handled is false when the kernel or the file system cannot do it
// (O_TMPFILE unsupported, /proc not mounted): nothing was created and the
// caller takes the temporary-file path, as every later Create does.
func (b *Bucket) createUnnamed(dir, base string, body []byte) (handled bool, err error) {
	if b.noUnnamed.Load() {
		return false, nil
	}
	d, err := b.root.Open(dir)
	if err != nil {
		return true, fmt.Errorf("open folder %s: %w", dir, mapErr(err))
	}
	defer d.Close()
	dfd := int(d.Fd())
	fd, err := unix.Openat(dfd, ".", unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, filePerm)
	if err != nil {
		if unsupportedUnnamed(err) {
			b.noUnnamed.Store(true)
			return false, nil
		}
		return true, fmt.Errorf("unnamed file in %s: %w", dir, mapErr(err))
	}
	f := os.NewFile(uintptr(fd), base)
	defer f.Close()
	if _, err := f.Write(body); err != nil {
		return true, fmt.Errorf("write unnamed file in %s: %w", dir, mapErr(err))
	}
	if err := f.Sync(); err != nil {
		return true, fmt.Errorf("sync unnamed file in %s: %w", dir, mapErr(err))
	}
	err = unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), dfd, base, unix.AT_SYMLINK_FOLLOW)
	switch {
	case errors.Is(err, unix.EEXIST):
		return true, errKeyExists
	case err != nil && b.unnamed.Load() == 0 && errors.Is(err, unix.ENOENT):
		// no /proc (the folder itself was opened above): never linked, so
		// nothing was created
		b.noUnnamed.Store(true)
		return false, nil
	case err != nil:
		return true, fmt.Errorf("link %s: %w", base, mapErr(err))
	}
	if err := d.Sync(); err != nil {
		return true, fmt.Errorf("sync dir %s: %w", dir, mapErr(err))
	}
	b.unnamed.Add(1)
	return true, nil
}

// unsupportedUnnamed: O_TMPFILE is not available here (an old kernel
// answers EISDIR, a file system without it EOPNOTSUPP).
func unsupportedUnnamed(err error) bool {
	return errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EINVAL)
}
