package filestore

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/sluicehq/sluice/eventstore/objstore"
)

// Get reads a whole object.
func (b *Bucket) Get(ctx context.Context, key string) ([]byte, objstore.ObjectInfo, error) {
	if err := check(ctx, key); err != nil {
		return nil, objstore.ObjectInfo{}, err
	}
	f, fi, err := b.openObject(filepath.FromSlash(key))
	if err != nil {
		return nil, objstore.ObjectInfo{}, fmt.Errorf("filestore: get %s: %w", key, err)
	}
	defer f.Close()
	body := make([]byte, fi.Size())
	if _, err := io.ReadFull(f, body); err != nil {
		return nil, objstore.ObjectInfo{}, fmt.Errorf("filestore: get %s: %w", key, mapErr(err))
	}
	etag := etagOf(body)
	b.etags.put(fi, etag)
	return body, info(key, fi, etag), nil
}

// GetRange reads length bytes at offset; the range must lie inside the
// object.
func (b *Bucket) GetRange(ctx context.Context, key string, offset, length int64) ([]byte, error) {
	if err := check(ctx, key); err != nil {
		return nil, err
	}
	if offset < 0 || length < 1 {
		return nil, fmt.Errorf("filestore: get %s [%d+%d]: %w", key, offset, length, objstore.ErrInvalidRange)
	}
	f, fi, err := b.openObject(filepath.FromSlash(key))
	if err != nil {
		return nil, fmt.Errorf("filestore: get %s: %w", key, err)
	}
	defer f.Close()
	if offset > fi.Size() || length > fi.Size()-offset {
		return nil, fmt.Errorf("filestore: get %s [%d+%d] of %d bytes: %w", key, offset, length, fi.Size(), objstore.ErrInvalidRange)
	}
	buf := make([]byte, length)
	if _, err := f.ReadAt(buf, offset); err != nil {
		return nil, fmt.Errorf("filestore: get %s: %w", key, mapErr(err))
	}
	return buf, nil
}

// Stat returns an object's info without its body.
func (b *Bucket) Stat(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	if err := check(ctx, key); err != nil {
		return objstore.ObjectInfo{}, err
	}
	oi, err := b.stat(filepath.FromSlash(key), false)
	if err != nil {
		return objstore.ObjectInfo{}, fmt.Errorf("filestore: stat %s: %w", key, err)
	}
	return oi, nil
}

// stat returns the info of the object at name, its ETag from the cache
// or, when fresh is set or the cache has none, by hashing the file.
func (b *Bucket) stat(name string, fresh bool) (objstore.ObjectInfo, error) {
	f, fi, err := b.openObject(name)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	defer f.Close()
	etag, ok := "", false
	if !fresh {
		etag, ok = b.etags.get(fi)
	}
	if !ok {
		h := md5.New()
		if _, err := io.Copy(h, f); err != nil {
			return objstore.ObjectInfo{}, mapErr(err)
		}
		etag = hex.EncodeToString(h.Sum(nil))
		b.etags.put(fi, etag)
	}
	return info(filepath.ToSlash(name), fi, etag), nil
}

// openObject opens a regular file; folders and other non-files are
// ErrNotFound. The FileInfo comes from the open file, so it describes the
// same inode the caller reads (objects are replaced, never modified).
func (b *Bucket) openObject(name string) (*os.File, fs.FileInfo, error) {
	f, err := b.root.Open(name)
	if err != nil {
		return nil, nil, mapErr(err)
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, nil, mapErr(err)
	}
	if !fi.Mode().IsRegular() {
		_ = f.Close()
		return nil, nil, fmt.Errorf("%w: not an object", objstore.ErrNotFound)
	}
	return f, fi, nil
}

func info(key string, fi fs.FileInfo, etag string) objstore.ObjectInfo {
	return objstore.ObjectInfo{Key: key, Size: fi.Size(), ETag: etag, LastModified: fi.ModTime().UTC()}
}

func etagOf(body []byte) string {
	sum := md5.Sum(body)
	return hex.EncodeToString(sum[:])
}

// etagCache remembers the MD5 of files by identity (device, inode, size,
// mtime). Writes always create a new inode, but a freed inode is soon
// reused, and mtimes are only as fine as the kernel's coarse clock; so a
// file is cached only once its mtime is cacheSettle old. A file that later
// reuses the inode was created after the cached one was last open, hence
// gets a later mtime and a different identity. The compare-and-swap of Put
// never trusts the cache anyway.
type etagCache struct {
	mu sync.Mutex
	m  map[fileIdentity]string
}

type fileIdentity struct {
	dev, ino uint64
	size     int64
	mtime    int64
}

const (
	etagCacheMax = 100_000
	cacheSettle  = 2 * time.Second
)

func newETagCache() *etagCache { return &etagCache{m: make(map[fileIdentity]string)} }

func identity(fi fs.FileInfo) (fileIdentity, bool) {
	dev, ino, ok := devIno(fi)
	return fileIdentity{dev: dev, ino: ino, size: fi.Size(), mtime: fi.ModTime().UnixNano()}, ok
}

func (c *etagCache) get(fi fs.FileInfo) (string, bool) {
	id, ok := identity(fi)
	if !ok {
		return "", false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[id]
	return e, ok
}

func (c *etagCache) put(fi fs.FileInfo, etag string) {
	id, ok := identity(fi)
	if !ok || time.Since(fi.ModTime()) < cacheSettle {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= etagCacheMax {
		clear(c.m)
	}
	c.m[id] = etag
}
