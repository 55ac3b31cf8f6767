package relay

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/internal/testenv"
)

// faultyBucket passes every call through until a fault is set: then calls
// hang (until their context ends: a frozen store, MinIO under SIGSTOP) or
// fail at once with an error (a store that refuses).
type faultyBucket struct {
	objstore.Bucket
	mu   sync.Mutex
	mode string // "", "hang", "fail"
	thaw chan struct{}
}

func newFaultyBucket(b objstore.Bucket) *faultyBucket {
	return &faultyBucket{Bucket: b, thaw: make(chan struct{})}
}

func (f *faultyBucket) set(mode string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mode == "hang" && mode != "hang" {
		close(f.thaw)
		f.thaw = make(chan struct{})
	}
	f.mode = mode
}

// gate applies the fault to one call.
func (f *faultyBucket) gate(ctx context.Context) error {
	f.mu.Lock()
	mode, thaw := f.mode, f.thaw
	f.mu.Unlock()
	switch mode {
	case "hang":
		select {
		case <-thaw:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	case "fail":
		return fmt.Errorf("faulty bucket: %w", errConnRefused)
	}
	return nil
}

// errConnRefused stands for a refused connection (an outage).
var errConnRefused = &refused{}

type refused struct{}

func (*refused) Error() string   { return "connection refused" }
func (*refused) Timeout() bool   { return false }
func (*refused) Temporary() bool { return true }

func (f *faultyBucket) Get(ctx context.Context, key string) ([]byte, objstore.ObjectInfo, error) {
	if err := f.gate(ctx); err != nil {
		return nil, objstore.ObjectInfo{}, err
	}
	return f.Bucket.Get(ctx, key)
}

func (f *faultyBucket) Stat(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	if err := f.gate(ctx); err != nil {
		return objstore.ObjectInfo{}, err
	}
	return f.Bucket.Stat(ctx, key)
}

func (f *faultyBucket) Put(ctx context.Context, key string, body []byte, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	if err := f.gate(ctx); err != nil {
		return objstore.ObjectInfo{}, err
	}
	return f.Bucket.Put(ctx, key, body, opts)
}

func (f *faultyBucket) GetRange(ctx context.Context, key string, offset, length int64) ([]byte, error) {
	if err := f.gate(ctx); err != nil {
		return nil, err
	}
	return f.Bucket.GetRange(ctx, key, offset, length)
}

func (f *faultyBucket) List(ctx context.Context, prefix, startAfter string, limit int) ([]objstore.ObjectInfo, error) {
	if err := f.gate(ctx); err != nil {
		return nil, err
	}
	return f.Bucket.List(ctx, prefix, startAfter, limit)
}

// TestObjectStoreFaultVisible (issue 26): while the object store hangs or
// refuses, the relay turns readiness red naming object storage within one
// object-store timeout, counts the failures in sluice_relay_objectstore_errors_total
// and sluice_relay_objectstore_stalled, and logs it; when the store answers again
// it recovers by itself and publishes what was appended meanwhile. Before,
// a hanging call blocked the relay with readiness green (until the stall
// check, here a minute) and nothing in the metrics or log.
func TestObjectStoreFaultVisible(t *testing.T) {
	for _, mode := range []string{"hang", "fail"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t, 30*time.Second)
			fb := newFaultyBucket(e.bucket)
			// The relay reads through the faulty bucket; the writers
			// append through the real one.
			rst, err := eventstore.New(eventstore.Config{AppendTimeout: e.appendTO}, eventstore.Deps{Pool: e.pool, Bucket: fb, Logger: testLogger(t, slog.LevelWarn)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = rst.Close() })
			opts := e.opts(t)
			opts.Config.StallAfter = time.Hour // readiness must not come from the stall check
			opts.Config.ObjectStoreTimeout = 500 * time.Millisecond
			var logs testenv.Buffer
			opts.Deps.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
			opts.Deps.Store, opts.Deps.Bucket = rst, fb
			r, err := opts.new()
			if err != nil {
				t.Fatal(err)
			}
			testenv.RunInBackground(t, "relay Run", r.Run, r.Close)

			stored := appendAll(t, e.store, 4, mixedEnvelopes(20, 5, ""))
			testenv.WaitFor(t, 30*time.Second, "first events", func() bool { return e.checkpoint(t).Position == 20 })

			fb.set(mode)
			faultAt := time.Now()
			more := appendAll(t, e.store, 4, mixedEnvelopes(20, 5, ""))
			// Every sign becomes visible by itself: readiness (a call in
			// flight past the timeout, or a failed one) may turn red before
			// the failed call was counted, its gauge set and its warning
			// logged, which on a loaded machine can be a while later. So
			// the wait is for all of them (a hang guard); the checks
			// below say which one is missing.
			outages := func() float64 {
				return value(r.m.objErrs.WithLabelValues("get", "outage")) + value(r.m.objErrs.WithLabelValues("list", "outage")) + value(r.m.objErrs.WithLabelValues("checkpoint", "outage"))
			}
			readyRed := func() bool {
				err := r.Ready(context.Background())
				return err != nil && strings.Contains(err.Error(), "object storage")
			}
			testenv.WaitFor(t, time.Minute, "readiness red naming object storage, the failures counted and logged", func() bool {
				return readyRed() && sumVec(r.m.objErrs) >= 1 && outages() >= 1 && value(r.m.objStalled) == 1 &&
					strings.Contains(logs.String(), "object storage call failed")
			})
			t.Logf("readiness while the store is %s: %v", mode, r.Ready(context.Background()))
			if !readyRed() {
				t.Errorf("readiness %v, want red naming object storage while the store is %s", r.Ready(context.Background()), mode)
			}
			if v := sumVec(r.m.objErrs); v < 1 {
				t.Errorf("sluice_relay_objectstore_errors_total = %v, want the failures counted", v)
			}
			if outages() < 1 {
				t.Errorf("no object-storage failure classified as an outage")
			}
			if v := value(r.m.objStalled); v != 1 {
				t.Errorf("sluice_relay_objectstore_stalled = %v, want 1", v)
			}
			if !strings.Contains(logs.String(), "object storage call failed") {
				t.Errorf("no warning logged:\n%s", logs.String())
			}

			fb.set("")
			// At most one warning per objLogEvery while the fault lasted,
			// and the first one.
			maxWarnings := int(time.Since(faultAt)/objLogEvery) + 1
			testenv.WaitFor(t, time.Minute, "recovery", func() bool { return e.checkpoint(t).Position == 40 })
			testenv.WaitFor(t, time.Minute, "readiness green", func() bool { return r.Ready(context.Background()) == nil })
			if v := value(r.m.objStalled); v != 0 {
				t.Errorf("sluice_relay_objectstore_stalled = %v after recovery, want 0", v)
			}
			if n := strings.Count(logs.String(), "object storage call failed"); n > maxWarnings {
				t.Errorf("%d warnings while the store was %s: not rate-limited (at most %d, one per %s)", n, mode, maxWarnings, objLogEvery)
			}
			for id, ev := range more {
				stored[id] = ev
			}
			verifyAtLeastOnce(t, stored, e.consumeAll(t, e.commandsTopic(), e.eventsTopic()))
		})
	}
}
