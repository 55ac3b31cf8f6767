package objstoretest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/eventstore/objstore"
)

// listKeys covers nesting and the characters that sort around '/'
// ('-' and '.' sort before it, '0'-'9' and '_' after).
var listKeys = []string{
	"checkpoints/relay-a.json",
	"checkpoints/relay-b.json",
	"segments/00000000000000000001-00000000000000000010.jsonl",
	"segments/00000000000000000011-00000000000000000011.jsonl",
	"segments/00000000000000000012-00000000000000000400.jsonl",
	"segments/nested/deeper/x.jsonl",
	"segments/nested/y.jsonl",
	"segments-archive/z",
	"segments.old",
	"segments_x/a",
	"top",
	"z/last",
}

// expect is the model List must agree with.
func expect(keys []string, prefix, startAfter string, limit int) []string {
	var out []string
	for _, k := range keys { // keys sorted
		if strings.HasPrefix(k, prefix) && k > startAfter {
			out = append(out, k)
		}
	}
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

func keysOf(infos []objstore.ObjectInfo) []string {
	out := make([]string, len(infos))
	for i, oi := range infos {
		out[i] = oi.Key
	}
	return out
}

func testList(t *testing.T, b objstore.Bucket) {
	ctx := ctxT(t)
	sorted := slices.Sorted(slices.Values(listKeys))
	etags := map[string]string{}
	for i, k := range listKeys {
		etags[k] = mustCreate(t, b, k, fmt.Appendf(nil, "body %d", i)).ETag
	}
	empty, err := b.List(ctx, "nothing-here/", "", 10)
	if err != nil || len(empty) != 0 {
		t.Fatalf("List of an empty prefix = %v, %v", empty, err)
	}
	for _, tc := range []struct {
		prefix, after string
		limit         int
	}{
		{"", "", 0},
		{"", "", 3},
		{"segments/", "", 0},
		{"segments/", "", 2},
		{"segments/", "segments/00000000000000000001-00000000000000000010.jsonl", 0},
		{"segments/", "segments/00000000000000000011", 0},
		{"segments/", "segments/00000000000000000011-00000000000000000011.jsonl", 1},
		{"segments/0000", "", 0},
		{"segments", "", 0},
		{"segments", "segments/", 0},
		{"segments/", "segments/nested/", 0},
		{"segments/nested/", "segments/nested/deeper/x.jsonl", 0},
		{"", "segments-", 0},
		{"", "segments/zzz", 0},
		{"", "top", 0},
		{"", "z/last", 0},
		{"", "a", 4},
		{"checkpoints/relay-", "", 0},
		{"top", "", 0},
		{"segments/nested/deeper/x.jsonl", "", 0},
	} {
		got, err := b.List(ctx, tc.prefix, tc.after, tc.limit)
		if err != nil {
			t.Fatalf("List(%q, %q, %d): %v", tc.prefix, tc.after, tc.limit, err)
		}
		want := expect(sorted, tc.prefix, tc.after, tc.limit)
		if !slices.Equal(keysOf(got), want) {
			t.Fatalf("List(%q, %q, %d)\n got %q\nwant %q", tc.prefix, tc.after, tc.limit, keysOf(got), want)
		}
		for _, oi := range got {
			if oi.ETag != etags[oi.Key] || oi.Size == 0 || oi.LastModified.IsZero() {
				t.Fatalf("List info %+v: want etag %s, a size and a time", oi, etags[oi.Key])
			}
		}
	}
}

func testListPagination(t *testing.T, b objstore.Bucket) {
	ctx := ctxT(t)
	const n = 1100 // more than one S3 ListObjectsV2 page (1000)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("p/%05d", i)
	}
	// Create in parallel, bounded, in shuffled order.
	work := make(chan string)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for k := range work {
				if _, err := b.Create(ctx, k, []byte(k)); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range keys {
		work <- keys[(i*7919)%n]
	}
	close(work)
	wg.Wait()
	close(errs)
	var failed []error
	for err := range errs {
		failed = append(failed, err)
	}
	if err := errors.Join(failed...); err != nil {
		t.Fatalf("Create: %v", err)
	}
	mustCreate(t, b, "q/outside", []byte("x"))

	all, err := b.List(ctx, "p/", "", 0)
	if err != nil || !slices.Equal(keysOf(all), keys) {
		t.Fatalf("List(p/, no limit) = %d keys, %v; want all %d in order", len(all), err, n)
	}
	some, err := b.List(ctx, "p/", "", 1050)
	if err != nil || !slices.Equal(keysOf(some), keys[:1050]) {
		t.Fatalf("List(p/, limit 1050) = %d keys, %v", len(some), err)
	}
	tail, err := b.List(ctx, "p/", keys[999], 0)
	if err != nil || !slices.Equal(keysOf(tail), keys[1000:]) {
		t.Fatalf("List(p/ after %s) = %d keys, %v; want 100", keys[999], len(tail), err)
	}
	// Page through with a small limit, as the relay does.
	var paged []string
	after := ""
	for {
		page, err := b.List(ctx, "p/", after, 333)
		if err != nil {
			t.Fatalf("List page after %q: %v", after, err)
		}
		paged = append(paged, keysOf(page)...)
		if len(page) < 333 {
			break
		}
		after = page[len(page)-1].Key
	}
	if !slices.Equal(paged, keys) {
		t.Fatalf("paged listing = %d keys, want %d in order", len(paged), n)
	}
}

func testInvalidKeys(t *testing.T, b objstore.Bucket) {
	ctx := ctxT(t)
	for _, key := range []string{
		"", "/abs", "a//b", "trailing/", "../escape", "a/../../b", "a/./b", ".", "..",
		`back\slash`, "nul\x00byte", "new\nline", "\xff\xfe", strings.Repeat("k", objstore.MaxKeyLen+1),
		strings.Repeat("s", objstore.MaxSegmentLen+1), "a/" + strings.Repeat("s", objstore.MaxSegmentLen+1) + "/b",
		".objstore/tmp/x", "a/.objstore-lock",
	} {
		_, err := b.Create(ctx, key, []byte("x"))
		wantErr(t, fmt.Sprintf("Create(%q)", key), err, objstore.ErrInvalidKey)
		_, err = b.Put(ctx, key, []byte("x"), objstore.PutOptions{})
		wantErr(t, fmt.Sprintf("Put(%q)", key), err, objstore.ErrInvalidKey)
		_, _, err = b.Get(ctx, key)
		wantErr(t, fmt.Sprintf("Get(%q)", key), err, objstore.ErrInvalidKey)
		_, err = b.GetRange(ctx, key, 0, 1)
		wantErr(t, fmt.Sprintf("GetRange(%q)", key), err, objstore.ErrInvalidKey)
		_, err = b.Stat(ctx, key)
		wantErr(t, fmt.Sprintf("Stat(%q)", key), err, objstore.ErrInvalidKey)
		err = b.Delete(ctx, key)
		wantErr(t, fmt.Sprintf("Delete(%q)", key), err, objstore.ErrInvalidKey)
	}
	seg := strings.Repeat("k", objstore.MaxSegmentLen)
	longest := seg + "/" + seg + "/" + seg + "/" + seg[1:] + "/k"
	if len(longest) != objstore.MaxKeyLen {
		t.Fatalf("test key is %d bytes", len(longest))
	}
	mustCreate(t, b, longest, []byte("longest key"))
	all, err := b.List(ctx, "", "", 0)
	if err != nil || len(all) != 1 {
		t.Fatalf("after invalid keys, List = %v, %v; want only the longest valid key", keysOf(all), err)
	}
}
