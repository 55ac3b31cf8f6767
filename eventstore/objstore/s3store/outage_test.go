package s3store_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/shared/failure"
)

// Every call of the s3 backend has a deadline (issue 26): a store that does
// not answer fails the call with ErrUnavailable (an outage, its cause a
// deadline) after Options.Timeout instead of the SDK's response-header
// timeout per attempt; and a write tells "definitely not written"
// (ErrNotWritten: refused, or answered with an error) from an unknown
// outcome (sent, no answer).
func TestOutages(t *testing.T) {
	answer503 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(answer503.Close)
	cases := []struct {
		name       string
		endpoint   string
		notWritten bool // a write's outcome is known: not written
		deadline   bool // the call was cut by its deadline
	}{
		{"frozen (accepts, never answers)", "http://" + testenv.BlackHole(t), false, true},
		{"refused (port closed)", "http://127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)), true, false},
		{"answers 503", answer503.URL, true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := options("sluice-outage")
			o.Endpoint, o.Timeout, o.MaxBackoff = c.endpoint, 500*time.Millisecond, 50*time.Millisecond
			b := newBucket(t, o)
			// No deadline of the caller's: only the backend's own bound
			// can end a call to a frozen store (the guard below only
			// keeps a failing run from hanging the package).
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			guard := time.AfterFunc(time.Minute, cancel)
			defer guard.Stop()
			writes := map[string]func() error{
				"create": func() error { _, err := b.Create(ctx, "segments/k", []byte("body")); return err },
				"put":    func() error { _, err := b.Put(ctx, "checkpoints/k", []byte("body"), objstore.PutOptions{}); return err },
			}
			reads := map[string]func() error{
				"get":      func() error { _, _, err := b.Get(ctx, "segments/k"); return err },
				"getrange": func() error { _, err := b.GetRange(ctx, "segments/k", 0, 2); return err },
				"stat":     func() error { _, err := b.Stat(ctx, "segments/k"); return err },
				"list":     func() error { _, err := b.List(ctx, "segments/", "", 10); return err },
				"delete":   func() error { return b.Delete(ctx, "segments/k") },
			}
			check := func(op string, err error, write bool) {
				t.Helper()
				if !errors.Is(err, objstore.ErrUnavailable) || !failure.IsOutage(context.Background(), err) {
					t.Errorf("%s: %v, want ErrUnavailable (an outage)", op, err)
				}
				if got := errors.Is(err, context.DeadlineExceeded); got != c.deadline {
					t.Errorf("%s: cut by its deadline = %v, want %v (%v)", op, got, c.deadline, err)
				}
				if got := errors.Is(err, objstore.ErrNotWritten); write && got != c.notWritten {
					t.Errorf("%s: ErrNotWritten = %v, want %v (%v)", op, got, c.notWritten, err)
				} else if !write && got {
					t.Errorf("%s: a read reports ErrNotWritten: %v", op, err)
				}
			}
			for op, f := range writes {
				check(op, f(), true)
			}
			for op, f := range reads {
				check(op, f(), false)
			}
			if ctx.Err() != nil {
				t.Fatal("a call outlived its deadline: the test's guard cancelled it")
			}
		})
	}
}
