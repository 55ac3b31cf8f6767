package s3store_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/eventstore/objstore/objstoretest"
	"github.com/sluicehq/sluice/eventstore/objstore/s3store"
	"github.com/sluicehq/sluice/internal/testenv"
)

var minio *testenv.MinIO

func TestMain(m *testing.M) {
	os.Exit(testenv.RunWithMinIO(m, func(mi *testenv.MinIO) { minio = mi }))
}

func options(bucket string) s3store.Options {
	return s3store.Options{
		Bucket:          bucket,
		Endpoint:        minio.Endpoint,
		PathStyle:       true,
		AccessKeyID:     minio.AccessKey,
		SecretAccessKey: minio.SecretKey,
	}
}

func newBucket(t testing.TB, o s3store.Options) *s3store.Bucket {
	t.Helper()
	if o.Bucket == "" {
		o.Bucket = minio.NewBucket(t)
	}
	b, err := s3store.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestAcceptance(t *testing.T) {
	objstoretest.Run(t, func(t *testing.T) objstore.Bucket { return newBucket(t, options("")) })
}

func TestMissingBucketIsNotFound(t *testing.T) {
	b := newBucket(t, options("sluice-no-such-bucket"))
	ctx := t.Context()
	if _, err := b.Create(ctx, "k", []byte("x")); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("Create in a missing bucket = %v, want ErrNotFound", err)
	}
	if err := objstore.SelfTest(ctx, b); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("SelfTest on a missing bucket = %v, want ErrNotFound", err)
	}
	if _, err := b.List(ctx, "", "", 1); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("List of a missing bucket = %v, want ErrNotFound", err)
	}
}

func TestWrongCredentialsAreNotAnOutage(t *testing.T) {
	o := options("")
	o.SecretAccessKey = "wrong-secret"
	b := newBucket(t, o)
	_, err := b.Create(t.Context(), "k", []byte("x"))
	if err == nil || errors.Is(err, objstore.ErrUnavailable) {
		t.Fatalf("Create with a wrong secret = %v, want a non-outage error", err)
	}
	if strings.Contains(err.Error(), "wrong-secret") {
		t.Fatalf("error leaks the secret: %v", err)
	}
}

// countingTransport counts the HTTP attempts that pass through it.
type countingTransport struct {
	next http.RoundTripper
	n    atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(r)
}

// TestOutage stops MinIO: every operation must fail promptly with
// ErrUnavailable, and work again once MinIO is back. Promptly is checked
// by its mechanism, not a stopwatch: each call gives up after at most
// MaxAttempts HTTP attempts (the retryer's budget), not because a
// deadline (its own Timeout or the caller's) expired.
func TestOutage(t *testing.T) {
	o := options("")
	o.MaxAttempts = 2
	o.MaxBackoff = 20 * time.Millisecond
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{Timeout: time.Second}).DialContext
	attempts := &countingTransport{next: tr}
	o.HTTPClient = &http.Client{Transport: attempts}
	// The SDK applies a custom CA bundle only to its own client type; the
	// counting client needs none (MinIO speaks plain HTTP here).
	t.Setenv("AWS_CA_BUNDLE", "")
	b := newBucket(t, o)
	ctx := t.Context()
	if _, err := b.Create(ctx, "before", []byte("x")); err != nil {
		t.Fatal(err)
	}
	minio.Stop()
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = minio.Restart(context.Background())
		}
	})
	ops := map[string]func() error{
		"Create":   func() error { _, err := b.Create(ctx, "during", []byte("x")); return err },
		"Put":      func() error { _, err := b.Put(ctx, "during", []byte("x"), objstore.PutOptions{}); return err },
		"Get":      func() error { _, _, err := b.Get(ctx, "before"); return err },
		"GetRange": func() error { _, err := b.GetRange(ctx, "before", 0, 1); return err },
		"Stat":     func() error { _, err := b.Stat(ctx, "before"); return err },
		"List":     func() error { _, err := b.List(ctx, "", "", 10); return err },
		"Delete":   func() error { return b.Delete(ctx, "before") },
		"SelfTest": func() error { return objstore.SelfTest(ctx, b) },
	}
	for name, op := range ops {
		before := attempts.n.Load()
		err := op()
		if !errors.Is(err, objstore.ErrUnavailable) {
			t.Errorf("%s during the outage = %v, want ErrUnavailable", name, err)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s during the outage ended by a deadline (%v), want the retryer to give up first", name, err)
		}
		if n := attempts.n.Load() - before; n < 1 || n > int64(o.MaxAttempts) {
			t.Errorf("%s made %d HTTP attempts during the outage, want 1..%d (MaxAttempts)", name, n, o.MaxAttempts)
		}
	}
	// A deadline that expires while the store hangs is an outage too.
	dctx, cancel := context.WithTimeout(ctx, time.Nanosecond)
	defer cancel()
	<-dctx.Done()
	if _, err := b.Stat(dctx, "before"); !errors.Is(err, objstore.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Stat past its deadline = %v, want ErrUnavailable and DeadlineExceeded", err)
	}
	// A canceled caller is not an outage.
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	if _, err := b.Stat(cctx, "before"); err == nil || errors.Is(err, objstore.ErrUnavailable) {
		t.Errorf("Stat with a canceled context = %v, want a non-outage error", err)
	}

	if err := minio.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	restarted = true
	got, _, err := b.Get(ctx, "before")
	if err != nil || string(got) != "x" {
		t.Fatalf("Get after restart = %q, %v", got, err)
	}
	if _, err := b.Create(ctx, "after", []byte("y")); err != nil {
		t.Fatalf("Create after restart: %v", err)
	}
}

// BenchmarkCreateGetRange measures conditional creates of 64 KiB segments
// and 1 KiB ranged reads against MinIO, in parallel.
func BenchmarkCreateGetRange(b *testing.B) {
	bk := newBucket(b, options(""))
	ctx := context.Background()
	body := make([]byte, 64<<10)
	for i := range body {
		body[i] = byte(i)
	}
	b.Run("Create", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.SetParallelism(8) // I/O bound: 8 goroutines per CPU
		b.RunParallel(func(pb *testing.PB) {
			id := testenv.RandomSuffix(8)
			for i := 0; pb.Next(); i++ {
				if _, err := bk.Create(ctx, fmt.Sprintf("bench/%s-%d", id, i), body); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	})
	if _, err := bk.Create(ctx, "bench/range", body); err != nil && !errors.Is(err, objstore.ErrPreconditionFailed) {
		b.Fatal(err)
	}
	b.Run("GetRange", func(b *testing.B) {
		b.SetBytes(1 << 10)
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			for i := 0; pb.Next(); i++ {
				off := int64(i*4096) % int64(len(body)-1024)
				got, err := bk.GetRange(ctx, "bench/range", off, 1024)
				if err != nil || len(got) != 1024 || got[0] != body[off] {
					b.Errorf("GetRange: %d bytes, %v", len(got), err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	})
}
