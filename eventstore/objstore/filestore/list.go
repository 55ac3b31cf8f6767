package filestore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/eventstore/objstore"
)

// List walks the folders below the root in key order: the entries of a
// folder are sorted with each subfolder compared as "name/", which is
// exactly the byte-wise order of the keys below it, and folders that
// cannot hold a key after startAfter with the prefix are skipped.
func (b *Bucket) List(ctx context.Context, prefix, startAfter string, limit int) ([]objstore.ObjectInfo, error) {
	w := lister{b: b, ctx: ctx, prefix: prefix, startAfter: startAfter, limit: limit}
	if err := w.walk(""); err != nil && !errors.Is(err, errLimit) {
		return nil, fmt.Errorf("filestore: list %q after %q: %w", prefix, startAfter, err)
	}
	return w.out, nil
}

var errLimit = errors.New("limit reached")

type lister struct {
	b                  *Bucket
	ctx                context.Context
	prefix, startAfter string
	limit              int
	out                []objstore.ObjectInfo
}

type entry struct {
	key string // for a folder: its key prefix, ending in '/'
	dir bool
}

// walk lists the folder whose keys start with dirKey ("" or "a/b/").
func (w *lister) walk(dirKey string) error {
	if err := w.ctx.Err(); err != nil {
		return err
	}
	dirName := "."
	if dirKey != "" {
		dirName = filepath.FromSlash(strings.TrimSuffix(dirKey, "/"))
	}
	dir, d, err := w.b.openFolder(dirName)
	if err != nil {
		if isNotFound(err) {
			return nil // deleted meanwhile
		}
		return mapErr(err)
	}
	// Names only, a chunk at a time: ReadDir on a folder opened in an
	// os.Root lstats every entry to learn its type, and a folder of
	// segments holds every segment of the store, where a listing after the
	// relay's checkpoint wants the few at its end. A name is typed (one
	// lstat) only when it can be listed as a key or as a folder of keys;
	// the others are passed over without a system call or building their
	// keys, and only a chunk of them is held at once.
	entries, err := w.candidates(dir, d, dirKey)
	_ = d.Close()
	_ = dir.Close()
	if err != nil {
		return err
	}
	w.b.sorted.Add(int64(len(entries)))
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.key, b.key) })
	for _, e := range entries {
		if e.dir {
			if err := w.walk(e.key); err != nil {
				return err
			}
			continue
		}
		if objstore.ValidateKey(e.key) != nil {
			continue
		}
		oi, err := w.b.stat(filepath.FromSlash(e.key), false)
		if err != nil {
			if errors.Is(err, objstore.ErrNotFound) {
				continue // deleted meanwhile
			}
			return err
		}
		w.out = append(w.out, oi)
		if w.limit > 0 && len(w.out) >= w.limit {
			return errLimit
		}
	}
	return nil
}

// openFolder opens the folder dirName as a Root of its own, so that
// typing one of its names is one lstat relative to it (b.root.Lstat of
// dirName/name opens and closes each folder on the way first), and the
// folder itself to read its names.
func (b *Bucket) openFolder(dirName string) (*os.Root, *os.File, error) {
	dir, err := b.root.OpenRoot(dirName)
	if err != nil {
		return nil, nil, err
	}
	d, err := dir.Open(".")
	if err != nil {
		_ = dir.Close()
		return nil, nil, err
	}
	return dir, d, nil
}

// namesChunk is how many names of a folder a listing reads at once.
const namesChunk = 1024

// candidates reads the folder d (opened in dir, its keys start with
// dirKey) and returns its entries that can be listed: keys after
// startAfter with the prefix, and folders that may hold such keys.
func (w *lister) candidates(dir *os.Root, d *os.File, dirKey string) ([]entry, error) {
	var entries []entry
	for {
		names, err := d.Readdirnames(namesChunk)
		for _, name := range names {
			if strings.HasPrefix(name, objstore.ReservedSegmentPrefix) {
				continue // temporary and lock files
			}
			asKey, asDir := w.matches(dirKey, name), w.mayHoldKeys(dirKey, name)
			if !asKey && !asDir {
				continue
			}
			isDir, regular, err := w.b.typeOf(dir, name)
			switch {
			case isNotFound(err):
				continue // deleted meanwhile
			case err != nil:
				return nil, mapErr(err)
			case isDir && asDir:
				entries = append(entries, entry{key: dirKey + name + "/", dir: true})
			case regular && asKey:
				entries = append(entries, entry{key: dirKey + name})
			}
		}
		switch {
		case errors.Is(err, io.EOF):
			return entries, nil
		case err != nil:
			return nil, mapErr(err)
		}
	}
}

// typeOf looks up whether the entry name of the folder dir is a folder or
// a regular file, with one lstat, and counts the lookup.
func (b *Bucket) typeOf(dir *os.Root, name string) (isDir, regular bool, err error) {
	b.typed.Add(1)
	fi, err := dir.Lstat(name)
	if err != nil {
		return false, false, err
	}
	return fi.IsDir(), fi.Mode().IsRegular(), nil
}

// mayHoldKeys reports whether keys below the folder dirKey+name+"/" can
// match the prefix and sort after startAfter, without building its key.
func (w *lister) mayHoldKeys(dirKey, name string) bool {
	if !hasPrefixJoined(w.prefix, dirKey, name, "/") && !isPrefixOfJoined(w.prefix, dirKey, name, "/") {
		return false
	}
	// Every key below the folder is < startAfter when the folder's key is
	// < startAfter and startAfter does not itself continue it.
	if compareJoined(w.startAfter, dirKey, name, "/") < 0 && !isPrefixOfJoined(w.startAfter, dirKey, name, "/") {
		return false
	}
	return true
}

// matches reports whether the key dirKey+name has the prefix and sorts
// after startAfter, without building it.
func (w *lister) matches(dirKey, name string) bool {
	return hasPrefixJoined(w.prefix, dirKey, name) && compareJoined(w.startAfter, dirKey, name) > 0
}

// hasPrefixJoined reports whether the concatenation of parts starts with p.
func hasPrefixJoined(p string, parts ...string) bool {
	for _, x := range parts {
		if len(p) <= len(x) {
			return strings.HasPrefix(x, p)
		}
		if !strings.HasPrefix(p, x) {
			return false
		}
		p = p[len(x):]
	}
	return p == ""
}

// isPrefixOfJoined reports whether the concatenation of parts is a prefix
// of s.
func isPrefixOfJoined(s string, parts ...string) bool {
	for _, x := range parts {
		if !strings.HasPrefix(s, x) {
			return false
		}
		s = s[len(x):]
	}
	return true
}

// compareJoined compares the concatenation of parts with s
// (strings.Compare).
func compareJoined(s string, parts ...string) int {
	for _, x := range parts {
		if len(s) < len(x) {
			if c := strings.Compare(x[:len(s)], s); c != 0 {
				return c
			}
			return 1 // s is a proper prefix of the concatenation
		}
		if c := strings.Compare(x, s[:len(x)]); c != 0 {
			return c
		}
		s = s[len(x):]
	}
	if s != "" {
		return -1
	}
	return 0
}
