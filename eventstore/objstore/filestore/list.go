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
	entries := make([]entry, 0, len(des))
	for _, de := range des {
		name := de.Name()
		switch {
		case strings.HasPrefix(name, objstore.ReservedSegmentPrefix):
			continue // temporary and lock files
		case de.IsDir():
			entries = append(entries, entry{key: dirKey + name + "/", name: name, dir: true})
		case de.Type().IsRegular():
			entries = append(entries, entry{key: dirKey + name, name: name})
		}
	}
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.key, b.key) })
	for _, e := range entries {
		if e.dir {
			if !w.mayHoldKeys(e.key) {
				continue
			}
			if err := w.walk(e.key); err != nil {
				return err
			}
			continue
		}
		if !strings.HasPrefix(e.key, w.prefix) || e.key <= w.startAfter || objstore.ValidateKey(e.key) != nil {
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
