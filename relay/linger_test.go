package relay

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/shared/envelope"
)

// TestWakeLinger: commits notified while the relay lingers after a
// wake-up are published by one cycle (EVENT_PUBLISHER_WAKE_LINGER), and
// the wake-ups they left start no cycle of their own afterwards (the
// cycle took them). The test holds the relay in its linger (a hook in
// place of the timer) while it appends; it counts cycles, not time.
func TestWakeLinger(t *testing.T) {
	e := newEnv(t, 30*time.Second)
	opts := e.opts(t)
	opts.Config.PollInterval = time.Minute // no poll cycle during the test
	opts.Config.WakeLinger = time.Hour     // only the hook ends a linger
	wake := make(chan struct{}, 1)
	opts.Deps.Wake = wake
	var armed atomic.Bool
	lingers := make(chan chan struct{})
	opts.Opts = append(opts.Opts, withLingerWait(func(ctx context.Context, _ time.Duration) {
		if !armed.Load() {
			return
		}
		end := make(chan struct{})
		select {
		case lingers <- end:
		case <-ctx.Done():
			return
		}
		select {
		case <-end:
		case <-ctx.Done():
		}
	}))
	r, stop := runRelay(t, e, opts)
	defer stop()
	cycles := func(plan string) float64 { return value(r.m.plans.WithLabelValues(plan)) }
	testenv.WaitFor(t, 20*time.Second, "the first cycle", func() bool { return r.Leader() && cycles("list") > 0 })
	hinted := func(pos int64) func() bool {
		return func() bool {
			r.hints.mu.Lock()
			defer r.hints.mu.Unlock()
			for _, h := range r.hints.byFirst {
				if h.first <= pos && pos <= h.last {
					return true
				}
			}
			return false
		}
	}
	// Hold the relay in a linger, then commit positions 1 and 2.
	armed.Store(true)
	wake <- struct{}{}
	var end chan struct{}
	select {
	case end = <-lingers:
	case <-time.After(20 * time.Second):
		t.Fatal("the relay did not linger after a wake-up")
	}
	armed.Store(false)
	hints0, idle0 := cycles("hint"), cycles("idle")
	appendAll(t, e.store, 1, []envelope.Envelope{command("X", 0)}) // position 1
	appendAll(t, e.store, 1, []envelope.Envelope{command("Y", 0)}) // position 2, its own group
	testenv.WaitFor(t, 20*time.Second, "positions 1 and 2 notified", func() bool { return hinted(1)() && hinted(2)() })
	close(end)
	testenv.WaitFor(t, 20*time.Second, "positions 1 and 2 published", func() bool { return sumVec(r.m.published) == 2 })
	// A later commit: its cycle follows any cycle the wake-ups of 1 and 2
	// could still start.
	appendAll(t, e.store, 1, []envelope.Envelope{command("Z", 0)}) // position 3
	testenv.WaitFor(t, 20*time.Second, "position 3 published", func() bool { return sumVec(r.m.published) == 3 })
	stop()
	if got := cycles("hint") - hints0; got != 2 {
		t.Errorf("%v hint cycles published positions 1..3, want 2 (1 and 2 together, then 3)", got)
	}
	if got := cycles("idle") - idle0; got != 0 {
		t.Errorf("%v idle cycles: a wake-up the lingering cycle covered started a cycle of its own", got)
	}
}
