package minioext_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/eventstore/objstore/minioext"
	"github.com/sluicehq/sluice/eventstore/objstore/s3store"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/testskip"
)

var minio *testenv.MinIO

func TestMain(m *testing.M) {
	os.Exit(testenv.RunWithMinIO(m, func(mi *testenv.MinIO) { minio = mi }))
}

func newClient(t *testing.T) *minioext.Client {
	t.Helper()
	c, err := minioext.New(minioext.Options{
		Endpoint: minio.Endpoint, AccessKeyID: minio.AccessKey, SecretAccessKey: minio.SecretKey,
		ReconnectMin: 50 * time.Millisecond, ReconnectMax: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newStore(t *testing.T, bucket string) *s3store.Bucket {
	t.Helper()
	b, err := s3store.New(t.Context(), s3store.Options{
		Bucket: bucket, Endpoint: minio.Endpoint, PathStyle: true,
		AccessKeyID: minio.AccessKey, SecretAccessKey: minio.SecretKey,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestEnsureBucket(t *testing.T) {
	c := newClient(t)
	ctx := t.Context()
	name := "sluice-ensure-" + testenv.RandomSuffix(8)
	for i := range 2 { // creates, then finds it
		if err := c.EnsureBucket(ctx, name); err != nil {
			t.Fatalf("EnsureBucket #%d: %v", i+1, err)
		}
	}
	if err := objstore.SelfTest(ctx, newStore(t, name)); err != nil {
		t.Fatalf("SelfTest on the new bucket: %v", err)
	}
}

// drain empties ch and reports whether anything was in it.
func drain(ch <-chan struct{}) bool {
	got := false
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return got
			}
			got = true
		default:
			return got
		}
	}
}

// TestListenSegments runs notifications end to end against the real MinIO:
// segment creations wake the listener, objects outside the prefix do not,
// and the channel closes with the context. Some MinIO builds (among them
// the one pinned in testenv, see docs/objstore.md) do not flush the listen
// stream, so events arrive only once ~32 KiB of them are buffered; the test
// therefore creates segments until a wake-up arrives and reports how many
// it took, and checks single-event latency only where the server streams.
func TestListenSegments(t *testing.T) {
	c := newClient(t)
	bucket := minio.NewBucket(t)
	store := newStore(t, bucket)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	segs, err := c.ListenSegments(ctx, bucket, "segments/")
	if err != nil {
		t.Fatal(err)
	}
	others, err := c.ListenSegments(ctx, bucket, "checkpoints/")
	if err != nil {
		t.Fatal(err)
	}

	created := 0
	deadline := time.After(60 * time.Second)
	for wait := true; wait; {
		if _, err := store.Create(ctx, fmt.Sprintf("segments/%020d.jsonl", created), []byte("{}\n")); err != nil {
			t.Fatal(err)
		}
		created++
		select {
		case <-segs:
			wait = false
		case <-time.After(2 * time.Millisecond):
		case <-deadline:
			t.Fatalf("no notification after %d segments in 60s", created)
		}
	}
	t.Logf("first wake-up after %d segment creations", created)
	if drain(others) {
		t.Fatal("the checkpoints/ listener was woken by segments")
	}

	t.Run("SingleEventLatency", func(t *testing.T) {
		if created > 100 {
			testskip.Skip(t, fmt.Sprintf("this MinIO build buffers the listen stream (%d objects before the first event): "+
				"it lacks the Flush fix for trackingResponseWriter (minio commit 52eee5a2f); "+
				"single-event latency is covered by TestListenSegmentsWithFlushingServer", created))
		}
		time.Sleep(300 * time.Millisecond) // paces: late wake-ups of the creations above arrive before the drain; only the positive wait below asserts
		drain(segs)
		start := time.Now()
		if _, err := store.Create(ctx, "segments/latency.jsonl", []byte("{}\n")); err != nil {
			t.Fatal(err)
		}
		select {
		case <-segs:
			t.Logf("wake-up %v after the create", time.Since(start))
		case <-time.After(5 * time.Second):
			t.Fatal("no wake-up within 5s of creating a segment")
		}
	})

	cancel()
	for _, ch := range []<-chan struct{}{segs, others} {
		closed := time.After(5 * time.Second)
	loop:
		for {
			select {
			case _, ok := <-ch:
				if !ok {
					break loop
				}
			case <-closed:
				t.Fatal("channel not closed after the context ended")
			}
		}
	}
}

func TestListenSegmentsErrors(t *testing.T) {
	c := newClient(t)
	_, err := c.ListenSegments(t.Context(), "sluice-missing-"+testenv.RandomSuffix(6), "segments/")
	if !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("ListenSegments on a missing bucket = %v, want ErrNotFound", err)
	}
	down, err := minioext.New(minioext.Options{Endpoint: "http://127.0.0.1:1", AccessKeyID: "a", SecretAccessKey: "b"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if _, err := down.ListenSegments(ctx, "bucket", "segments/"); !errors.Is(err, objstore.ErrUnavailable) {
		t.Fatalf("ListenSegments on a closed port = %v, want ErrUnavailable", err)
	}
	if _, err := minioext.New(minioext.Options{Endpoint: "minio:9000"}); err == nil {
		t.Fatal("New accepted an endpoint without scheme")
	}
}
