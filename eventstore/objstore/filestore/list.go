package filestore

import (
	"context"
	"errors"
	"fmt"
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
	key  string // for a folder: its key prefix, ending in '/'
	name string
	dir  bool
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
	d, err := w.b.root.Open(dirName)
	if err != nil {
		if isNotFound(err) {
			return nil // deleted meanwhile
		}
		return mapErr(err)
	}
	des, err := d.ReadDir(-1)
	_ = d.Close()
	if err != nil {
		return mapErr(err)
	}
	// Only the entries that can be listed are kept and sorted: a folder of
	// segments holds every segment of the store, and a listing after the
	// relay's checkpoint wants the few at its end (the others are passed
	// over without building their keys).
	var entries []entry
	for _, de := range des {
		name := de.Name()
		switch {
		case strings.HasPrefix(name, objstore.ReservedSegmentPrefix):
			continue // temporary and lock files
		case de.IsDir():
			if key := dirKey + name + "/"; w.mayHoldKeys(key) {
				entries = append(entries, entry{key: key, name: name, dir: true})
			}
		case de.Type().IsRegular():
			if w.matches(dirKey, name) {
				entries = append(entries, entry{key: dirKey + name, name: name})
			}
		}
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

// mayHoldKeys reports whether keys starting with dirKey can match the
// prefix and sort after startAfter.
func (w *lister) mayHoldKeys(dirKey string) bool {
	if !strings.HasPrefix(dirKey, w.prefix) && !strings.HasPrefix(w.prefix, dirKey) {
		return false
	}
	// Every key below dirKey is < startAfter when dirKey < startAfter and
	// startAfter does not itself continue dirKey.
	if dirKey < w.startAfter && !strings.HasPrefix(w.startAfter, dirKey) {
		return false
	}
	return true
}

// matches reports whether the key dirKey+name has the prefix and sorts
// after startAfter, without building it.
func (w *lister) matches(dirKey, name string) bool {
	return hasPrefixOf(dirKey, name, w.prefix) && compareJoined(dirKey, name, w.startAfter) > 0
}

// hasPrefixOf reports whether a+b starts with p.
func hasPrefixOf(a, b, p string) bool {
	if len(p) <= len(a) {
		return strings.HasPrefix(a, p)
	}
	return strings.HasPrefix(p, a) && strings.HasPrefix(b, p[len(a):])
}

// compareJoined compares a+b with s (strings.Compare).
func compareJoined(a, b, s string) int {
	if len(s) < len(a) {
		if c := strings.Compare(a[:len(s)], s); c != 0 {
			return c
		}
		return 1 // s is a proper prefix of a+b
	}
	if c := strings.Compare(a, s[:len(a)]); c != 0 {
		return c
	}
	return strings.Compare(b, s[len(a):])
}
