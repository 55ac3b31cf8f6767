//go:build unix

package filestore_test

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/eventstore/objstore/filestore"
)

// listSegments are the path segments the model test builds keys from:
// names that are prefixes of each other, with bytes below '/' ('-', '.')
// and above it ('0', '_', 'b') after the common part, so that a folder
// "a" (compared as "a/") sorts between the keys "a-b"/"a.b" and "a0".
var listSegments = []string{"a", "a-", "a-b", "a.", "a.b", "a0", "a_", "ab", "b", "-", ".x", "0"}

// List agrees with a brute-force model (every key, sorted, filtered by
// prefix and startAfter, cut at limit) on random trees of nested keys,
// with symlinks, a FIFO, empty folders and reserved names mixed in (none
// of which is a key), for prefixes and startAfters drawn from the keys,
// their prefixes, folder names and the segments themselves.
func TestListMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	trees, queries := 12, 250
	if testing.Short() {
		trees = 4
	}
	for range trees {
		b, keys := randomTree(t, rng)
		// Candidate prefixes and startAfters: every prefix of every key
		// (which includes the folders' keys with and without '/'), the
		// keys themselves, and some strings that are no key's prefix.
		cands := []string{"", "/", "a/", "a/a", "a/a/", "b-", "z", "a0/a", ".x/", "\x7e"}
		for _, k := range keys {
			for i := 1; i <= len(k); i++ {
				cands = append(cands, k[:i])
			}
			cands = append(cands, k+"-", k+"/", k+"0")
		}
		for range queries {
			prefix := cands[rng.IntN(len(cands))]
			if rng.IntN(3) == 0 {
				prefix = "" // the relay's and the suite's common case
			}
			after := cands[rng.IntN(len(cands))]
			if rng.IntN(4) == 0 && len(prefix) > 0 {
				after = prefix + after // after inside the prefix
			}
			limit := []int{0, 0, 1, 2, 3, 7}[rng.IntN(6)]
			want := modelList(keys, prefix, after, limit)
			infos, err := b.List(t.Context(), prefix, after, limit)
			if err != nil {
				t.Fatalf("List(%q, %q, %d): %v", prefix, after, limit, err)
			}
			got := make([]string, len(infos))
			for i, oi := range infos {
				got[i] = oi.Key
			}
			if !slices.Equal(got, want) {
				t.Fatalf("List(%q, %q, %d) on %q\n got %q\nwant %q", prefix, after, limit, keys, got, want)
			}
		}
	}
}

// modelList is S3's ListObjectsV2 with start-after on the keys.
func modelList(keys []string, prefix, after string, limit int) []string {
	var out []string
	for _, k := range slices.Sorted(slices.Values(keys)) {
		if strings.HasPrefix(k, prefix) && k > after {
			out = append(out, k)
		}
	}
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

// randomTree writes up to 40 keys of one to three segments as plain
// files (as a data-lake tool or a human would), then entries that are
// not keys: symlinks to a file and to a folder, a FIFO, empty folders and
// names with the reserved prefix, with and without files below them.
func randomTree(t *testing.T, rng *rand.Rand) (*filestore.Bucket, []string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "b")
	b, err := filestore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	seg := func() string { return listSegments[rng.IntN(len(listSegments))] }
	path := func() string {
		p := seg()
		for range rng.IntN(3) {
			p += "/" + seg()
		}
		return p
	}
	var keys []string
	taken := map[string]bool{}   // keys, extras and the folders holding them
	blocked := map[string]bool{} // keys and extras: nothing goes below them
	// claim marks p, a key or an extra, as taken and blocked, and the
	// folders holding it as taken.
	claim := func(p string) {
		taken[p], blocked[p] = true, true
		for i := range len(p) {
			if p[i] == '/' {
				taken[p[:i]] = true
			}
		}
	}
	// free reports whether p can be a new file or folder: not a key, not
	// a folder of keys, and not below a key.
	free := func(p string) bool {
		if taken[p] {
			return false
		}
		for i := range len(p) {
			if p[i] == '/' && blocked[p[:i]] {
				return false
			}
		}
		return true
	}
	for range 5 + rng.IntN(36) {
		k := path()
		if !free(k) || objstore.ValidateKey(k) != nil {
			continue
		}
		name := filepath.Join(dir, filepath.FromSlash(k))
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, []byte(k), 0o644); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
		claim(k)
	}
	if len(keys) == 0 {
		return randomTree(t, rng)
	}
	// Entries that are not keys, each at a free path (possibly in a
	// folder of keys, possibly sorting between them).
	extras := []func(name string) error{
		func(name string) error { return os.Symlink(filepath.Join(dir, filepath.FromSlash(keys[0])), name) },
		func(name string) error { return os.Symlink(dir, name) },
		func(name string) error { return syscall.Mkfifo(name, 0o644) },
		func(name string) error { return os.Mkdir(name, 0o755) },
		func(name string) error {
			return os.WriteFile(filepath.Join(filepath.Dir(name), objstore.ReservedSegmentPrefix+filepath.Base(name)), nil, 0o644)
		},
		func(name string) error {
			d := filepath.Join(filepath.Dir(name), objstore.ReservedSegmentPrefix+"-"+filepath.Base(name))
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(d, "x"), nil, 0o644)
		},
	}
	for range 2 + rng.IntN(6) {
		p := path()
		if !free(p) {
			continue
		}
		name := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := extras[rng.IntN(len(extras))](name); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
		claim(p)
	}
	return b, keys
}
