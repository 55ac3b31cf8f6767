package relay

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/eventstoretest"
	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/shared/envelope"
)

// listingBucket counts the LISTs made through it.
type listingBucket struct {
	objstore.Bucket
	lists atomic.Int64
}

func (b *listingBucket) List(ctx context.Context, prefix, startAfter string, limit int) ([]objstore.ObjectInfo, error) {
	b.lists.Add(1)
	return b.Bucket.List(ctx, prefix, startAfter, limit)
}

// TestCaughtUpRelayDoesNotList: a relay close behind the head never lists
// segments/, neither on the poll interval's cycles while it is idle nor
// while a reservation is in flight, and still publishes the segment of a
// writer that died between PUT and commit before the append timeout (the
// once-per-poll-interval probe reads the in-flight segments by key). On
// the file backend a LIST walks every segment of the store, so a relay
// that listed once per poll interval paid for the store's size on every
// poll: patches of an aggregate of 10,000 events waited up to that walk
// (docs/benchmarks.md). The LISTs are counted, not timed.
func TestCaughtUpRelayDoesNotList(t *testing.T) {
	e := newEnv(t, time.Hour) // the reservation stays young for the whole test
	lb := &listingBucket{Bucket: e.bucket}
	// The relay reads segments through the counting bucket; the writers
	// append through the real one.
	rst, err := eventstore.New(eventstore.Config{AppendTimeout: e.appendTO}, eventstore.Deps{Pool: e.pool, Bucket: lb, Logger: testLogger(t, slog.LevelWarn)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rst.Close() })
	opts := e.opts(t)
	opts.Config.PollInterval = 20 * time.Millisecond
	opts.Deps.Store = rst
	r, stop := runRelay(t, e, opts)
	defer stop()

	// pollCycles waits until n more cycles planned from the index or
	// the listing ran (idle ones included): most are the poll interval's
	// full cycles, each of which listed before.
	pollCycles := func(t *testing.T, n float64) {
		t.Helper()
		cycles := func() float64 {
			return value(r.m.plans.WithLabelValues("idle")) + value(r.m.plans.WithLabelValues("index")) + value(r.m.plans.WithLabelValues("list"))
		}
		from := cycles()
		testenv.WaitFor(t, 30*time.Second, "poll cycles", func() bool { return cycles() >= from+n })
	}
	t.Run("idle and one append at a time", func(t *testing.T) {
		for i := range 3 {
			appendAll(t, e.store, 1, []envelope.Envelope{command("X", i)})
			testenv.WaitFor(t, 20*time.Second, "published", func() bool { return sumVec(r.m.published) == float64(i+1) })
			pollCycles(t, 10)
		}
	})
	t.Run("in flight, then written but never committed", func(t *testing.T) {
		gapPos := reserveCrashed(t, e, command("W", 0))
		// Each probe finds the reservation's segment not written yet.
		pollCycles(t, 10)
		writeSegmentOf(t, e, gapPos) // PUT done, the commit never comes
		testenv.WaitFor(t, 20*time.Second, "the uncommitted segment's event published", func() bool { return sumVec(r.m.published) == 4 })
		testenv.WaitFor(t, 10*time.Second, "checkpoint past it", func() bool { return e.checkpoint(t).Position == gapPos })
		for _, how := range []string{"repaired_committed", "abandoned"} {
			if v := value(r.m.gaps.WithLabelValues(how)); v != 0 {
				t.Errorf("gap resolutions %q = %v, want 0: the event must come from its segment, not from the append timeout", how, v)
			}
		}
	})
	t.Run("an abandoned reservation past the head", func(t *testing.T) {
		// The tail's last reservation abandoned (a repair found no segment)
		// and nothing committed after it: no LIST could resolve it before
		// a commit follows it (the listing's holes end at the head).
		ctx := ctxT(t, 10*time.Second)
		if _, _, err := eventstoretest.Forge(ctx, e.pool, eventstoretest.Forged{EventID: "8d6f5f0e-4c3b-4f7e-9a57-2f4d1b1c0a01", Kind: envelope.KindCommand,
			AggregateType: "X", AggregateID: "abandoned", State: eventstore.StateAbandoned, CanonicalHash: make([]byte, 32), OccurredAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		pollCycles(t, 10)
	})
	if n := lb.lists.Load(); n != 0 {
		t.Fatalf("the relay listed segments/ %d times while close behind the head, want 0 (a LIST walks the whole store on the file backend)", n)
	}
	if n := value(r.m.plans.WithLabelValues("list")); n != 0 {
		t.Fatalf("sluice_relay_cycles_total{plan=list} = %v, want 0", n)
	}
}
