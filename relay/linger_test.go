package relay

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/shared/envelope"
)

// lingerHold replaces the wake linger's timer with a hook that, once armed,
// holds the relay in its next linger until the test releases it: the test
// counts cycles, not time.
type lingerHold struct {
	armed   atomic.Bool
	lingers chan chan struct{}
}

// holdLingers installs the hook on opts: every wake-up lingers (an hour:
// only the hook ends a linger), no poll cycle runs during the test, and
// the wake-ups come from the commit stream or the returned channel.
func holdLingers(opts *relayArgs) (*lingerHold, chan<- struct{}) {
	h := &lingerHold{lingers: make(chan chan struct{})}
	opts.Config.PollInterval = time.Hour
	opts.Config.WakeLinger = time.Hour
	wake := make(chan struct{}, 1)
	opts.Deps.Wake = wake
	opts.Opts = append(opts.Opts, withLingerWait(func(ctx context.Context, _ time.Duration) {
		if !h.armed.Load() {
			return
		}
		end := make(chan struct{})
		select {
		case h.lingers <- end:
		case <-ctx.Done():
			return
		}
		select {
		case <-end:
		case <-ctx.Done():
		}
	}))
	return h, wake
}

// hold wakes the relay and returns once it lingers; the returned function
// ends that linger.
func (h *lingerHold) hold(t *testing.T, wake chan<- struct{}) (release func()) {
	t.Helper()
	h.armed.Store(true)
	defer h.armed.Store(false)
	wake <- struct{}{}
	select {
	case end := <-h.lingers:
		return func() { close(end) }
	case <-time.After(20 * time.Second):
		t.Fatal("the relay did not linger after a wake-up")
		return nil
	}
}

// settled waits for the relay's first cycle (an idle plan: nothing
// committed yet) and for the commit stream's first notification, its Resync, taken
// by a cycle: the Resync sends the cycle that takes it down the full path,
// and from then on the wake-ups are the test's.
func settled(t *testing.T, r *Relay) {
	t.Helper()
	testenv.WaitFor(t, 20*time.Second, "the first cycle and the commit stream's resync taken", func() bool {
		return r.Leader() && value(r.m.plans.WithLabelValues("idle"))+value(r.m.plans.WithLabelValues("list")) > 0 &&
			value(r.m.notes.WithLabelValues("resync")) >= 1 && !r.hints.missed.Load()
	})
}

// TestWakeLinger: commits notified while the relay lingers after a
// wake-up are published by one cycle (EVENT_PUBLISHER_WAKE_LINGER), and
// the wake-ups they left start no cycle of their own afterwards (the
// cycle took them). The test holds the relay in its linger (a hook in
// place of the timer) while it appends; it counts cycles, not time.
func TestWakeLinger(t *testing.T) {
	e := newEnv(t, 30*time.Second)
	opts := e.opts(t)
	h, wake := holdLingers(&opts)
	r, stop := runRelay(t, e, opts)
	defer stop()
	cycles := func(plan string) float64 { return value(r.m.plans.WithLabelValues(plan)) }
	settled(t, r)
	hinted := func(pos int64) func() bool {
		return func() bool {
			r.hints.mu.Lock()
			defer r.hints.mu.Unlock()
			for _, x := range r.hints.byFirst {
				if x.first <= pos && pos <= x.last {
					return true
				}
			}
			return false
		}
	}
	// Hold the relay in a linger, then commit positions 1 and 2.
	release := h.hold(t, wake)
	hints0, idle0 := cycles("hint"), cycles("idle")
	appendAll(t, e.store, 1, []envelope.Envelope{command("X", 0)}) // position 1
	appendAll(t, e.store, 1, []envelope.Envelope{command("Y", 0)}) // position 2, its own group
	testenv.WaitFor(t, 20*time.Second, "positions 1 and 2 notified", func() bool { return hinted(1)() && hinted(2)() })
	release()
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

// TestWakeLingerUncovered: a cycle takes the wake-ups left before it
// starts, so what their notifications announced must not depend on them.
// Commits notified while the relay lingers, that the hint cycle after the
// linger cannot publish, are published at once all the same, not at the
// next poll (an hour here): a commit whose hint was turned away (more
// than maxHints held) makes that cycle read the head, and a hinted block
// behind an in-flight position makes it say there is more.
func TestWakeLingerUncovered(t *testing.T) {
	tests := []struct {
		name string
		// commit runs while the relay lingers; it returns the commit
		// notifications to wait for and the records to be published.
		commit func(t *testing.T, e *env) (notified, published int)
	}{
		{"hints turned away", func(t *testing.T, e *env) (int, int) {
			envs := make([]envelope.Envelope, maxHints+1)
			for i := range envs {
				envs[i] = command("A", i)
			}
			appendAll(t, e.store, 1, envs) // one writer: a group each, positions 1..17
			return len(envs), len(envs)
		}},
		{"a hinted block behind an in-flight position", func(t *testing.T, e *env) (int, int) {
			appendAll(t, e.store, 1, []envelope.Envelope{command("X", 0)}) // position 1
			reserveCrashed(t, e, command("Y", 0))                          // position 2, in flight
			appendAll(t, e.store, 1, []envelope.Envelope{command("Z", 0)}) // position 3
			return 2, 2
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 30*time.Second) // the reservation stays young
			opts := e.opts(t)
			h, wake := holdLingers(&opts)
			r, stop := runRelay(t, e, opts)
			defer stop()
			settled(t, r)
			release := h.hold(t, wake)
			committed := value(r.m.notes.WithLabelValues("committed"))
			notified, want := tc.commit(t, e)
			testenv.WaitFor(t, 20*time.Second, "the commits notified", func() bool {
				return value(r.m.notes.WithLabelValues("committed"))-committed == float64(notified)
			})
			release()
			testenv.WaitFor(t, 20*time.Second, "every committed record published without a poll", func() bool {
				return sumVec(r.m.published) == float64(want)
			})
		})
	}
}
