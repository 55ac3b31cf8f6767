package filestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/eventstore/objstore"
)

const (
	internalDir = objstore.ReservedSegmentPrefix // below the root
	tmpDir      = internalDir + "/tmp"
	lockDir     = internalDir + "/locks"
	filePerm    = 0o640
	dirPerm     = 0o750
	// staleTemp is the age after which New removes temporary files left
	// behind by a crash.
	staleTemp = time.Hour
)

// errKeyExists: Create's link found the name taken (an object, or a
// folder of other keys).
var errKeyExists = errors.New("key exists")

// Bucket is a directory holding objects as files, one per key.
type Bucket struct {
	root  *os.Root
	dir   string
	etags *etagCache
	// noUnnamed: unnamed files (createUnnamed) are not available here;
	// unnamed counts the objects created that way.
	noUnnamed atomic.Bool
	unnamed   atomic.Int64
	// sorted counts the folder entries listings kept and sorted (list.go):
	// the work of a listing beyond reading its folders' names; typed
	// counts the entries whose type a listing looked up (one lstat each).
	sorted, typed atomic.Int64
}

var _ objstore.Bucket = (*Bucket)(nil)

// New opens the bucket rooted at dir, creating dir (and its parents) if it
// does not exist, and removes temporary files older than an hour that a
// crashed writer left behind. Close releases the directory handle.
func New(dir string) (*Bucket, error) {
	if dir == "" {
		return nil, errors.New("filestore: empty directory")
	}
	if err := os.MkdirAll(dir, dirPerm); err != nil {
		return nil, fmt.Errorf("filestore: create root %s: %w", dir, mapErr(err))
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("filestore: open root %s: %w", dir, mapErr(err))
	}
	b := &Bucket{root: root, dir: dir, etags: newETagCache()}
	for _, d := range []string{tmpDir, lockDir} {
		if err := root.MkdirAll(filepath.FromSlash(d), dirPerm); err != nil {
			_ = root.Close()
			return nil, fmt.Errorf("filestore: create %s in %s: %w", d, dir, mapErr(err))
		}
	}
	b.removeStaleTemps(time.Now().Add(-staleTemp))
	return b, nil
}

// Dir returns the root directory.
func (b *Bucket) Dir() string { return b.dir }

// Close releases the root directory handle.
func (b *Bucket) Close() error { return b.root.Close() }

// Create writes key only if it does not exist: on Linux an unnamed file
// in key's folder (O_TMPFILE), fsync, linkat(2), fsync of the folder
// (createUnnamed); elsewhere, or when the file system cannot, a temporary
// file, fsync, link(2), fsync of the folder.
func (b *Bucket) Create(ctx context.Context, key string, body []byte) (objstore.ObjectInfo, error) {
	if err := check(ctx, key); err != nil {
		return objstore.ObjectInfo{}, err
	}
	name := filepath.FromSlash(key)
	if err := b.mkdirParents(name); err != nil {
		return objstore.ObjectInfo{}, fmt.Errorf("filestore: create %s: %w", key, err)
	}
	handled, err := b.createUnnamed(filepath.Dir(name), filepath.Base(name), body)
	if !handled {
		err = b.createTemp(name, body)
	}
	if err != nil {
		if errors.Is(err, errKeyExists) {
			if fi, serr := b.root.Lstat(name); serr == nil && fi.IsDir() {
				return objstore.ObjectInfo{}, fmt.Errorf("filestore: create %s: %w: it is a folder of other keys", key, objstore.ErrInvalidKey)
			}
			return objstore.ObjectInfo{}, fmt.Errorf("filestore: create %s: %w", key, objstore.ErrPreconditionFailed)
		}
		return objstore.ObjectInfo{}, fmt.Errorf("filestore: create %s: %w", key, err)
	}
	return objstore.ObjectInfo{Key: key, Size: int64(len(body)), ETag: etagOf(body)}, nil
}

// createTemp is Create's portable path: a temporary file, fsynced, linked
// to name (link(2) fails with EEXIST when name exists) and the folder
// fsynced. An existing name is returned as errKeyExists.
func (b *Bucket) createTemp(name string, body []byte) error {
	tmp, err := b.writeTemp(body)
	if err != nil {
		return err
	}
	defer func() { _ = b.root.Remove(tmp) }()
	if err := b.root.Link(tmp, name); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return errKeyExists
		}
		return mapErr(err)
	}
	return b.syncDir(filepath.Dir(name))
}

// Put replaces key atomically; with opts.IfMatch only over the object whose
// ETag equals it, checked and swapped under the key's lock.
func (b *Bucket) Put(ctx context.Context, key string, body []byte, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	if err := check(ctx, key); err != nil {
		return objstore.ObjectInfo{}, err
	}
	tmp, err := b.writeTemp(body)
	if err != nil {
		return objstore.ObjectInfo{}, fmt.Errorf("filestore: put %s: %w", key, err)
	}
	defer func() { _ = b.root.Remove(tmp) }()
	unlock, err := b.lock(key)
	if err != nil {
		return objstore.ObjectInfo{}, fmt.Errorf("filestore: put %s: %w", key, err)
	}
	defer unlock()
	name := filepath.FromSlash(key)
	if want := strings.Trim(opts.IfMatch, `"`); want != "" {
		cur, err := b.stat(name, true)
		if err != nil {
			return objstore.ObjectInfo{}, fmt.Errorf("filestore: put %s (if-match): %w", key, err)
		}
		if cur.ETag != want {
			return objstore.ObjectInfo{}, fmt.Errorf("filestore: put %s: if-match %s, current %s: %w", key, want, cur.ETag, objstore.ErrPreconditionFailed)
		}
	}
	if err := b.mkdirParents(name); err != nil {
		return objstore.ObjectInfo{}, fmt.Errorf("filestore: put %s: %w", key, err)
	}
	if err := b.root.Rename(tmp, name); err != nil {
		if fi, serr := b.root.Lstat(name); serr == nil && fi.IsDir() {
			return objstore.ObjectInfo{}, fmt.Errorf("filestore: put %s: %w: it is a folder of other keys", key, objstore.ErrInvalidKey)
		}
		return objstore.ObjectInfo{}, fmt.Errorf("filestore: put %s: %w", key, mapErr(err))
	}
	if err := b.syncDir(filepath.Dir(name)); err != nil {
		return objstore.ObjectInfo{}, fmt.Errorf("filestore: put %s: %w", key, err)
	}
	return objstore.ObjectInfo{Key: key, Size: int64(len(body)), ETag: etagOf(body)}, nil
}

// Delete removes key (under its lock, so it orders with conditional Puts);
// a missing key is not an error.
func (b *Bucket) Delete(ctx context.Context, key string) error {
	if err := check(ctx, key); err != nil {
		return err
	}
	unlock, err := b.lock(key)
	if err != nil {
		return fmt.Errorf("filestore: delete %s: %w", key, err)
	}
	defer unlock()
	name := filepath.FromSlash(key)
	fi, err := b.root.Lstat(name)
	if err != nil {
		if isNotFound(err) {
			return nil
		}
		return fmt.Errorf("filestore: delete %s: %w", key, mapErr(err))
	}
	if !fi.Mode().IsRegular() {
		return nil // a folder of other keys, not an object
	}
	if err := b.root.Remove(name); err != nil && !isNotFound(err) {
		return fmt.Errorf("filestore: delete %s: %w", key, mapErr(err))
	}
	if err := b.syncDir(filepath.Dir(name)); err != nil {
		return fmt.Errorf("filestore: delete %s: %w", key, err)
	}
	return nil
}

// check validates the key and the context before any file is touched.
func check(ctx context.Context, key string) error {
	if err := objstore.ValidateKey(key); err != nil {
		return fmt.Errorf("filestore: %w", err)
	}
	return ctx.Err()
}
