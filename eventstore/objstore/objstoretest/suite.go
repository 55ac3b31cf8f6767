package objstoretest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/eventstore/objstore"
)

// NewBucketFunc returns a fresh, empty bucket for one test.
type NewBucketFunc func(t *testing.T) objstore.Bucket

// Run runs the acceptance suite; each subtest gets its own bucket.
func Run(t *testing.T, newBucket NewBucketFunc) {
	tests := []struct {
		name string
		fn   func(t *testing.T, b objstore.Bucket)
	}{
		{"CreateIsConditional", testCreateConditional},
		{"CreateRace", testCreateRace},
		{"PutUnconditional", testPutUnconditional},
		{"PutIfMatch", testPutIfMatch},
		{"PutIfMatchRace", testPutIfMatchRace},
		{"GetRange", testGetRange},
		{"GetRangeConcurrent", testGetRangeConcurrent},
		{"BinaryAndEmpty", testBinaryAndEmpty},
		{"LargeObject", testLarge},
		{"Stat", testStat},
		{"NotFound", testNotFound},
		{"Delete", testDelete},
		{"List", testList},
		{"ListPagination", testListPagination},
		{"InvalidKeys", testInvalidKeys},
		{"CanceledContext", testCanceled},
		{"SelfTest", testSelfTest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newBucket(t)) })
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

func mustCreate(t *testing.T, b objstore.Bucket, key string, body []byte) objstore.ObjectInfo {
	t.Helper()
	oi, err := b.Create(ctxT(t), key, body)
	if err != nil {
		t.Fatalf("Create(%q): %v", key, err)
	}
	if oi.Key != key || oi.Size != int64(len(body)) || oi.ETag == "" {
		t.Fatalf("Create(%q) info = %+v, want key, size %d and an ETag", key, oi, len(body))
	}
	return oi
}

func mustGet(t *testing.T, b objstore.Bucket, key string) ([]byte, objstore.ObjectInfo) {
	t.Helper()
	got, oi, err := b.Get(ctxT(t), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return got, oi
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: err = %v, want %v", what, err, target)
	}
}

func testCreateConditional(t *testing.T, b objstore.Bucket) {
	ctx := ctxT(t)
	first := mustCreate(t, b, "segments/00000000000000000001-00000000000000000002.jsonl", []byte("one\ntwo\n"))
	_, err := b.Create(ctx, first.Key, []byte("overwrite!"))
	wantErr(t, "second Create", err, objstore.ErrPreconditionFailed)
	got, oi := mustGet(t, b, first.Key)
	if string(got) != "one\ntwo\n" || oi.ETag != first.ETag {
		t.Fatalf("after refused Create: %q etag %s, want the first body, etag %s", got, oi.ETag, first.ETag)
	}
}

func testCreateRace(t *testing.T, b objstore.Bucket) {
	ctx := ctxT(t)
	const n = 20
	key := "segments/race.jsonl"
	type result struct {
		body []byte
		info objstore.ObjectInfo
		err  error
	}
	results := make([]result, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			body := fmt.Appendf(nil, "writer %d %x\n", i, randomBytes(8))
			<-start
			oi, err := b.Create(ctx, key, body)
			results[i] = result{body, oi, err}
		})
	}
	close(start)
	wg.Wait()
	var winner *result
	for i := range results {
		r := &results[i]
		switch {
		case r.err == nil:
			if winner != nil {
				t.Fatalf("two Creates of %s won: %q and %q", key, winner.body, r.body)
			}
			winner = r
		case !errors.Is(r.err, objstore.ErrPreconditionFailed):
			t.Fatalf("losing Create: %v, want ErrPreconditionFailed", r.err)
		}
	}
	if winner == nil {
		t.Fatal("no Create won")
	}
	got, oi := mustGet(t, b, key)
	if !bytes.Equal(got, winner.body) || oi.ETag != winner.info.ETag {
		t.Fatalf("stored %q (etag %s), winner wrote %q (etag %s)", got, oi.ETag, winner.body, winner.info.ETag)
	}
}

func testPutUnconditional(t *testing.T, b objstore.Bucket) {
	ctx := ctxT(t)
	key := "checkpoints/r.json"
	v1, err := b.Put(ctx, key, []byte(`{"position":1}`), objstore.PutOptions{})
	if err != nil {
		t.Fatalf("Put new: %v", err)
	}
	v2, err := b.Put(ctx, key, []byte(`{"position":2}`), objstore.PutOptions{})
	if err != nil {
		t.Fatalf("Put over: %v", err)
	}
	if v1.ETag == v2.ETag {
		t.Fatalf("different bodies, same ETag %s", v1.ETag)
	}
	got, oi := mustGet(t, b, key)
	if string(got) != `{"position":2}` || oi.ETag != v2.ETag {
		t.Fatalf("Get = %s etag %s, want the second Put (etag %s)", got, oi.ETag, v2.ETag)
	}
}

func testPutIfMatch(t *testing.T, b objstore.Bucket) {
	ctx := ctxT(t)
	key := "checkpoints/relay.json"
	v1 := mustCreate(t, b, key, []byte(`{"position":10}`))
	v2, err := b.Put(ctx, key, []byte(`{"position":20}`), objstore.PutOptions{IfMatch: v1.ETag})
	if err != nil {
		t.Fatalf("Put IfMatch current: %v", err)
	}
	if v2.ETag == "" || v2.ETag == v1.ETag {
		t.Fatalf("Put IfMatch: ETag %q, want a new one (old %s)", v2.ETag, v1.ETag)
	}
	_, err = b.Put(ctx, key, []byte(`{"position":15}`), objstore.PutOptions{IfMatch: v1.ETag})
	wantErr(t, "Put IfMatch stale", err, objstore.ErrPreconditionFailed)
	// A quoted ETag (as HTTP spells it) works too.
	v3, err := b.Put(ctx, key, []byte(`{"position":30}`), objstore.PutOptions{IfMatch: `"` + v2.ETag + `"`})
	if err != nil {
		t.Fatalf("Put IfMatch quoted: %v", err)
	}
	got, oi := mustGet(t, b, key)
	if string(got) != `{"position":30}` || oi.ETag != v3.ETag {
		t.Fatalf("Get = %s etag %s, want position 30 etag %s", got, oi.ETag, v3.ETag)
	}
	st, err := b.Stat(ctx, key)
	if err != nil || st.ETag != v3.ETag {
		t.Fatalf("Stat = %+v, %v; want etag %s", st, err, v3.ETag)
	}
	_, err = b.Put(ctx, "checkpoints/missing.json", []byte(`{}`), objstore.PutOptions{IfMatch: v3.ETag})
	wantErr(t, "Put IfMatch on a missing key", err, objstore.ErrNotFound)
	if _, err := b.Stat(ctx, "checkpoints/missing.json"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("a refused Put IfMatch created the object: %v", err)
	}
}

func testPutIfMatchRace(t *testing.T, b objstore.Bucket) {
	ctx := ctxT(t)
	key := "checkpoints/ha.json"
	base := mustCreate(t, b, key, []byte(`{"position":0}`))
	const n = 10
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			_, errs[i] = b.Put(ctx, key, fmt.Appendf(nil, `{"position":%d}`, i+1), objstore.PutOptions{IfMatch: base.ETag})
		})
	}
	close(start)
	wg.Wait()
	wins := 0
	for _, err := range errs {
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, objstore.ErrPreconditionFailed):
			t.Fatalf("losing Put IfMatch: %v", err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d conditional Puts over the same ETag won, want exactly 1", wins)
	}
}

func testGetRange(t *testing.T, b objstore.Bucket) {
	ctx := ctxT(t)
	body := make([]byte, 100)
	for i := range body {
		body[i] = byte(255 - i)
	}
	key := "segments/range.jsonl"
	mustCreate(t, b, key, body)
	for _, tc := range []struct {
		off, n int64
		err    error
	}{
		{0, 1, nil},
		{0, 100, nil},
		{99, 1, nil},
		{50, 25, nil},
		{1, 99, nil},
		{99, 2, objstore.ErrInvalidRange},
		{100, 1, objstore.ErrInvalidRange},
		{250, 10, objstore.ErrInvalidRange},
		{0, 101, objstore.ErrInvalidRange},
		{-1, 5, objstore.ErrInvalidRange},
		{0, 0, objstore.ErrInvalidRange},
		{10, -3, objstore.ErrInvalidRange},
	} {
		got, err := b.GetRange(ctx, key, tc.off, tc.n)
		if tc.err != nil {
			wantErr(t, fmt.Sprintf("GetRange(%d, %d)", tc.off, tc.n), err, tc.err)
			continue
		}
		if err != nil {
			t.Fatalf("GetRange(%d, %d): %v", tc.off, tc.n, err)
		}
		if !bytes.Equal(got, body[tc.off:tc.off+tc.n]) {
			t.Fatalf("GetRange(%d, %d) = %x, want %x", tc.off, tc.n, got, body[tc.off:tc.off+tc.n])
		}
	}
	_, err := b.GetRange(ctx, "segments/nope.jsonl", 0, 1)
	wantErr(t, "GetRange of a missing key", err, objstore.ErrNotFound)
}

// testGetRangeConcurrent reads adjacent ranges of one object at once, as
// the relay's shard leaders read their own lines of one segment: each read
// returns exactly its bytes, and together they are the object.
func testGetRangeConcurrent(t *testing.T, b objstore.Bucket) {
	ctx := ctxT(t)
	body := randomBytes(64<<10 + 17)
	key := "segments/ranges.jsonl"
	mustCreate(t, b, key, body)
	const parts = 16
	got := make([][]byte, parts)
	errs := make([]error, parts)
	size := int64(len(body)) / parts
	var wg sync.WaitGroup
	for i := range parts {
		off, n := int64(i)*size, size
		if i == parts-1 {
			n = int64(len(body)) - off
		}
		wg.Go(func() { got[i], errs[i] = b.GetRange(ctx, key, off, n) })
	}
	wg.Wait()
	var joined []byte
	for i := range parts {
		if errs[i] != nil {
			t.Fatalf("GetRange part %d: %v", i, errs[i])
		}
		joined = append(joined, got[i]...)
	}
	if !bytes.Equal(joined, body) {
		t.Fatalf("%d concurrent ranges joined to %d bytes that differ from the %d-byte object", parts, len(joined), len(body))
	}
}

func testBinaryAndEmpty(t *testing.T, b objstore.Bucket) {
	ctx := ctxT(t)
	bin := make([]byte, 0, 1024)
	for i := range 1024 {
		bin = append(bin, byte(i*7))
	}
	bin = append(bin, "\r\n\x00\xff\xfe{\"a\":1}\n"...)
	for _, tc := range []struct {
		key  string
		body []byte
	}{
		{"bin/all-bytes", bin},
		{"bin/empty", []byte{}},
		{"bin/ünïcödé key with spaces+&=?.jsonl", []byte("x")},
	} {
		mustCreate(t, b, tc.key, tc.body)
		got, oi := mustGet(t, b, tc.key)
		if !bytes.Equal(got, tc.body) || oi.Size != int64(len(tc.body)) {
			t.Fatalf("%q: round trip = %d bytes (size %d), want %d", tc.key, len(got), oi.Size, len(tc.body))
		}
	}
	_, err := b.GetRange(ctx, "bin/empty", 0, 1)
	wantErr(t, "GetRange of an empty object", err, objstore.ErrInvalidRange)
	list, err := b.List(ctx, "bin/", "", 0)
	if err != nil || len(list) != 3 {
		t.Fatalf("List(bin/) = %v, %v; want 3 objects", list, err)
	}
}

func testLarge(t *testing.T, b objstore.Bucket) {
	ctx := ctxT(t)
	body := randomBytes(5<<20 + 3)
	key := "segments/large.jsonl"
	mustCreate(t, b, key, body)
	got, oi := mustGet(t, b, key)
	if !bytes.Equal(got, body) || oi.Size != int64(len(body)) {
		t.Fatalf("large round trip: %d bytes, size %d; want %d", len(got), oi.Size, len(body))
	}
	tail, err := b.GetRange(ctx, key, int64(len(body))-(1<<20), 1<<20)
	if err != nil || !bytes.Equal(tail, body[len(body)-(1<<20):]) {
		t.Fatalf("GetRange of the last MiB: %d bytes, %v", len(tail), err)
	}
}

func testStat(t *testing.T, b objstore.Bucket) {
	ctx := ctxT(t)
	before := time.Now().Add(-time.Minute)
	created := mustCreate(t, b, "a/b/c.json", []byte("hello"))
	st, err := b.Stat(ctx, "a/b/c.json")
	if err != nil {
		t.Fatalf("Stat: %v", err)
	}
	if st.Key != "a/b/c.json" || st.Size != 5 || st.ETag != created.ETag {
		t.Fatalf("Stat = %+v, want key a/b/c.json, size 5, etag %s", st, created.ETag)
	}
	if st.LastModified.Before(before) || st.LastModified.After(time.Now().Add(time.Minute)) {
		t.Fatalf("Stat LastModified = %v, want about now", st.LastModified)
	}
	_, gi := mustGet(t, b, "a/b/c.json")
	if gi.Size != st.Size || gi.ETag != st.ETag || gi.LastModified.IsZero() {
		t.Fatalf("Get info %+v differs from Stat %+v", gi, st)
	}
}

func testNotFound(t *testing.T, b objstore.Bucket) {
	ctx := ctxT(t)
	mustCreate(t, b, "dir/obj", []byte("x"))
	for _, key := range []string{"nothing", "dir/nothing", "dir", "dir/obj/deeper", "nothing/deeper/key"} {
		_, _, err := b.Get(ctx, key)
		wantErr(t, "Get "+key, err, objstore.ErrNotFound)
		_, err = b.Stat(ctx, key)
		wantErr(t, "Stat "+key, err, objstore.ErrNotFound)
		_, err = b.GetRange(ctx, key, 0, 1)
		wantErr(t, "GetRange "+key, err, objstore.ErrNotFound)
	}
}

func testDelete(t *testing.T, b objstore.Bucket) {
	ctx := ctxT(t)
	mustCreate(t, b, "d/k", []byte("v1"))
	for i := range 2 {
		if err := b.Delete(ctx, "d/k"); err != nil {
			t.Fatalf("Delete #%d: %v", i+1, err)
		}
	}
	if err := b.Delete(ctx, "never/existed"); err != nil {
		t.Fatalf("Delete of a missing key: %v", err)
	}
	_, _, err := b.Get(ctx, "d/k")
	wantErr(t, "Get after Delete", err, objstore.ErrNotFound)
	mustCreate(t, b, "d/k", []byte("v2"))
	if got, _ := mustGet(t, b, "d/k"); string(got) != "v2" {
		t.Fatalf("re-created object = %q", got)
	}
}

func testCanceled(t *testing.T, b objstore.Bucket) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := b.Create(ctx, "c/k", []byte("x")); err == nil {
		t.Fatal("Create with a canceled context succeeded")
	}
	if _, _, err := b.Get(ctx, "c/k"); err == nil {
		t.Fatal("Get with a canceled context succeeded")
	}
	if _, err := b.List(ctx, "", "", 0); err == nil {
		t.Fatal("List with a canceled context succeeded")
	}
}

func testSelfTest(t *testing.T, b objstore.Bucket) {
	ctx := ctxT(t)
	if err := objstore.SelfTest(ctx, b); err != nil {
		t.Fatalf("SelfTest: %v", err)
	}
	left, err := b.List(ctx, objstore.SelfTestPrefix, "", 0)
	if err != nil || len(left) != 0 {
		t.Fatalf("SelfTest left %v (%v)", left, err)
	}
}
