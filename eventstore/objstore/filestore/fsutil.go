package filestore

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/eventstore/objstore"
)

// writeTemp writes body to a new file below tmpDir (O_EXCL, so two writers
// can never share one), fsyncs it and returns its name relative to the root.
func (b *Bucket) writeTemp(body []byte) (string, error) {
	var rnd [16]byte
	_, _ = rand.Read(rnd[:])
	name := filepath.FromSlash(tmpDir + "/" + hex.EncodeToString(rnd[:]) + ".tmp")
	f, err := b.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, filePerm)
	if err != nil {
		return "", fmt.Errorf("temporary file: %w", mapErr(err))
	}
	_, werr := f.Write(body)
	if werr == nil {
		werr = f.Sync()
	}
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = b.root.Remove(name)
		return "", fmt.Errorf("temporary file: %w", mapErr(err))
	}
	return name, nil
}

// syncDir fsyncs a directory so that entries added or removed in it survive
// a crash.
func (b *Bucket) syncDir(dir string) error {
	f, err := b.root.Open(dir)
	if err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, mapErr(err))
	}
	err = f.Sync()
	cerr := f.Close()
	if err := errors.Join(err, cerr); err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, mapErr(err))
	}
	return nil
}

// mkdirParents creates the folders above name one by one, fsyncing the
// parent of each one it creates, so a new object's path is durable too.
func (b *Bucket) mkdirParents(name string) error {
	parent := filepath.Dir(name)
	if parent == "." {
		return nil
	}
	if fi, err := b.root.Stat(parent); err == nil && fi.IsDir() {
		return nil
	}
	segs := strings.Split(parent, string(filepath.Separator))
	for i := range segs {
		dir := filepath.Join(segs[:i+1]...)
		err := b.root.Mkdir(dir, dirPerm)
		switch {
		case err == nil:
			if err := b.syncDir(filepath.Dir(dir)); err != nil {
				return err
			}
		case errors.Is(err, fs.ErrExist):
			if fi, serr := b.root.Stat(dir); serr == nil && !fi.IsDir() {
				return fmt.Errorf("%w: %s is an object, it cannot also be a folder", objstore.ErrInvalidKey, filepath.ToSlash(dir))
			}
		default:
			if errors.Is(err, syscall.ENOTDIR) {
				return fmt.Errorf("%w: a parent of %s is an object, it cannot also be a folder", objstore.ErrInvalidKey, filepath.ToSlash(dir))
			}
			return fmt.Errorf("mkdir %s: %w", dir, mapErr(err))
		}
	}
	return nil
}

// removeStaleTemps deletes temporary files older than before (best effort).
func (b *Bucket) removeStaleTemps(before time.Time) {
	d, err := b.root.Open(filepath.FromSlash(tmpDir))
	if err != nil {
		return
	}
	defer d.Close()
	entries, err := d.ReadDir(-1)
	if err != nil {
		return
	}
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && fi.ModTime().Before(before) {
			_ = b.root.Remove(filepath.Join(filepath.FromSlash(tmpDir), e.Name()))
		}
	}
}

func isNotFound(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

// mapErr wraps file-system errors with the objstore error callers branch
// on: a missing file is ErrNotFound, a full or failing disk ErrUnavailable.
func mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case isNotFound(err):
		return fmt.Errorf("%w: %w", objstore.ErrNotFound, err)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EIO), errors.Is(err, syscall.EDQUOT),
		errors.Is(err, syscall.EROFS), errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
		return fmt.Errorf("%w: %w", objstore.ErrUnavailable, err)
	}
	return err
}
