package filestore_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/eventstore/objstore/filestore"
	"github.com/sluicehq/sluice/eventstore/objstore/objstoretest"
)

func newBucket(t testing.TB) *filestore.Bucket {
	t.Helper()
	b, err := filestore.New(filepath.Join(t.TempDir(), "data", "sluice-events"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// The acceptance suite on both ways Create writes: unnamed files linked
// to their name (Linux) and temporary files (elsewhere, or a file system
// without O_TMPFILE).
func TestAcceptance(t *testing.T) {
	t.Run("unnamed files", func(t *testing.T) {
		objstoretest.Run(t, func(t *testing.T) objstore.Bucket { return newBucket(t) })
	})
	t.Run("temporary files", func(t *testing.T) {
		objstoretest.Run(t, func(t *testing.T) objstore.Bucket {
			b := newBucket(t)
			filestore.UseTemporaryFiles(b)
			return b
		})
	})
}

// On Linux Create writes an unnamed file and links it (no temporary file
// named and removed); the object is whole, a second Create of the key is
// refused and leaves it unchanged, and the temporary folder stays empty.
func TestCreateUnnamed(t *testing.T) {
	for _, temp := range []bool{false, true} {
		t.Run(fmt.Sprintf("temporary files %v", temp), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "b")
			b, err := filestore.New(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if temp {
				filestore.UseTemporaryFiles(b)
			}
			ctx := t.Context()
			if _, err := b.Create(ctx, "segments/1.jsonl", []byte("first\n")); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Create(ctx, "segments/1.jsonl", []byte("second\n")); !errors.Is(err, objstore.ErrPreconditionFailed) {
				t.Fatalf("second Create = %v, want ErrPreconditionFailed", err)
			}
			if _, err := b.Create(ctx, "segments", []byte("x")); !errors.Is(err, objstore.ErrInvalidKey) {
				t.Fatalf("Create over a folder = %v, want ErrInvalidKey", err)
			}
			got, err := os.ReadFile(filepath.Join(dir, "segments", "1.jsonl"))
			if err != nil || string(got) != "first\n" {
				t.Fatalf("object holds %q, %v; want the first body", got, err)
			}
			fi, err := os.Stat(filepath.Join(dir, "segments", "1.jsonl"))
			if err != nil || fi.Mode().Perm()&^0o640 != 0 {
				t.Fatalf("object mode %v, %v; want at most 0640", fi.Mode(), err)
			}
			entries, _ := os.ReadDir(filepath.Join(dir, ".objstore", "tmp"))
			if len(entries) != 0 {
				t.Fatalf("tmp holds %d files after Create; want 0", len(entries))
			}
			want := int64(0)
			if runtime.GOOS == "linux" && !temp {
				want = 1
			}
			if n := filestore.UnnamedCreates(b); n != want {
				t.Fatalf("%d objects created as unnamed files, want %d", n, want)
			}
		})
	}
}

// Nothing a key can say reaches outside the root, even with a symlink
// planted inside it.
func TestKeysStayBelowRoot(t *testing.T) {
	parent := t.TempDir()
	root := filepath.Join(parent, "bucket")
	b, err := filestore.New(root)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	secret := filepath.Join(parent, "secret")
	if err := os.WriteFile(secret, []byte("outside"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for _, key := range []string{"../secret", "a/../../secret", "/" + secret, `..\secret`} {
		if _, _, err := b.Get(ctx, key); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Fatalf("Get(%q) = %v, want ErrInvalidKey", key, err)
		}
		if _, err := b.Put(ctx, key, []byte("pwned"), objstore.PutOptions{}); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Fatalf("Put(%q) = %v, want ErrInvalidKey", key, err)
		}
	}
	// A symlink inside the root that points out of it is not followed.
	if err := os.Symlink(parent, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Get(ctx, "link/secret"); err == nil {
		t.Fatal("Get through a symlink escaping the root succeeded")
	}
	if _, err := b.Create(ctx, "link/new", []byte("x")); err == nil {
		t.Fatal("Create through a symlink escaping the root succeeded")
	}
	if _, err := os.Stat(filepath.Join(parent, "new")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a file was created outside the root: %v", err)
	}
	if got, _ := os.ReadFile(secret); string(got) != "outside" {
		t.Fatalf("file outside the root changed: %q", got)
	}
	list, err := b.List(ctx, "", "", 0)
	if err != nil || len(list) != 0 {
		t.Fatalf("List = %v, %v; symlinks must not be listed", list, err)
	}
}

// Temporary files (a crashed writer's leftovers) are never listed or read,
// and New removes stale ones.
func TestTempFilesInvisible(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "b")
	b, err := filestore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := b.Create(ctx, "segments/1.jsonl", []byte("ok")); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, ".objstore", "tmp", "deadbeef.tmp")
	if err := os.WriteFile(tmp, []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	list, err := b.List(ctx, "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Key != "segments/1.jsonl" {
		t.Fatalf("List = %+v, want only segments/1.jsonl", list)
	}
	_ = b.Close()
	old := tmp + ".old"
	if err := os.Rename(tmp, old); err != nil {
		t.Fatal(err)
	}
	past := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := os.Chtimes(old, past, past); err != nil {
		t.Fatal(err)
	}
	b2, err := filestore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	if _, err := os.Stat(old); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale temporary file not removed: %v", err)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, ".objstore", "tmp"))
	if len(entries) != 0 {
		t.Fatalf("tmp holds %d files after Create; want 0", len(entries))
	}
}

// A key cannot be an object and a folder at once on the file backend.
func TestObjectFolderConflict(t *testing.T) {
	b := newBucket(t)
	ctx := t.Context()
	if _, err := b.Create(ctx, "a/b", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Create(ctx, "a", []byte("x")); !errors.Is(err, objstore.ErrInvalidKey) {
		t.Fatalf("Create(a) over folder a/ = %v, want ErrInvalidKey", err)
	}
	if _, err := b.Put(ctx, "a", []byte("x"), objstore.PutOptions{}); !errors.Is(err, objstore.ErrInvalidKey) {
		t.Fatalf("Put(a) over folder a/ = %v, want ErrInvalidKey", err)
	}
	if _, err := b.Create(ctx, "a/b/c", []byte("x")); !errors.Is(err, objstore.ErrInvalidKey) {
		t.Fatalf("Create(a/b/c) below object a/b = %v, want ErrInvalidKey", err)
	}
	if err := b.Delete(ctx, "a"); err != nil {
		t.Fatalf("Delete of a folder name: %v", err)
	}
	if _, err := b.Stat(ctx, "a/b"); err != nil {
		t.Fatalf("a/b after Delete(a): %v", err)
	}
}

// Objects written by Create and Put are plain files: data-lake tools and
// humans can read the directory directly.
func TestPlainFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "b")
	b, err := filestore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.Create(t.Context(), "segments/x.jsonl", []byte("{}\n")); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "segments", "x.jsonl"))
	if err != nil || string(got) != "{}\n" {
		t.Fatalf("file = %q, %v", got, err)
	}
}

// Two Buckets on one directory (as two processes would open it) still
// serialise conditional Puts through the flock(2) lock files.
func TestConditionalPutAcrossInstances(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "b")
	var bs [4]*filestore.Bucket
	for i := range bs {
		b, err := filestore.New(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		bs[i] = b
	}
	ctx := t.Context()
	for round := range 20 {
		key := fmt.Sprintf("checkpoints/r%d.json", round)
		base, err := bs[0].Create(ctx, key, []byte(`{"position":0}`))
		if err != nil {
			t.Fatal(err)
		}
		var wins atomic.Int32
		var wg sync.WaitGroup
		for i, b := range bs {
			wg.Go(func() {
				_, err := b.Put(ctx, key, fmt.Appendf(nil, `{"position":%d}`, i+1), objstore.PutOptions{IfMatch: base.ETag})
				switch {
				case err == nil:
					wins.Add(1)
				case !errors.Is(err, objstore.ErrPreconditionFailed):
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if n := wins.Load(); n != 1 {
			t.Fatalf("round %d: %d conditional Puts won, want 1", round, n)
		}
	}
}

// A listing after a key near the end of a large folder keeps and sorts
// only the entries it can return, not the whole folder: the relay lists
// after its checkpoint, at the end of a folder holding every segment of
// the store, at least once per poll interval (docs/relay.md). The result
// itself is the acceptance suite's to check; this counts the work.
func TestListAfterSortsOnlyWhatFollows(t *testing.T) {
	b := newBucket(t)
	ctx := t.Context()
	const n = 1100 // more than one chunk of names (namesChunk)
	key := func(i int) string { return fmt.Sprintf("segments/%020d-%020d.jsonl", i, i) }
	for i := 1; i <= n; i++ {
		if _, err := b.Create(ctx, key(i), []byte("x\n")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Create(ctx, "checkpoints/relay.json", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name          string
		prefix, after string
		want, maxKept int
		// maxTyped: the entries whose type the listing may look up (an
		// lstat each, counted in typeOf): what maxKept counts, and the
		// name of startAfter itself (a folder of that name would hold
		// keys after it). The count does not see lstats made inside the
		// os package: ReadDir on a folder opened in an os.Root lstats
		// every entry, a walk of the whole store on each relay LIST, and
		// TestListReadsNamesOnly keeps it out of list.go.
		maxTyped int
	}{
		// the root's "segments/" folder, then the 5 keys after the n-5th
		{"after a key near the end", "segments/", key(n - 5), 5, 1 + 5, 1 + 5 + 1},
		{"after the last key", "segments/", key(n), 0, 1, 1 + 1},
		{"everything", "", "", n + 1, 2 + n + 1, 2 + n + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, typedBefore := filestore.SortedEntries(b), filestore.TypedEntries(b)
			got, err := b.List(ctx, tc.prefix, tc.after, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.want {
				t.Fatalf("listed %d objects, want %d", len(got), tc.want)
			}
			if kept := filestore.SortedEntries(b) - before; kept > int64(tc.maxKept) {
				t.Fatalf("the listing kept and sorted %d folder entries, want at most %d (what it can return, and the folders on its way)", kept, tc.maxKept)
			}
			if typed := filestore.TypedEntries(b) - typedBefore; typed > int64(tc.maxTyped) {
				t.Fatalf("the listing looked up the type of %d folder entries, want at most %d (what it can return, and the folders on its way)", typed, tc.maxTyped)
			}
		})
	}
}
