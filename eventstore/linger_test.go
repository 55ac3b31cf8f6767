package eventstore

import (
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/shared/envelope"
)

// streamClock is the committer's stream clock in a test (hooks.gapNow):
// it moves only when the test moves it.
type streamClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *streamClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *streamClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestLingerSharesAGroup pins the committer's linger
// (EVENT_STORE_GROUP_COMMIT_LINGER, docs/eventstore.md#append-protocol-group-commit)
// by the groups it forms, not by time: appends of a steady stream that
// reach an idle committer one by one share one group (one reservation,
// one segment, one commit, one notification) instead of the first one
// going alone, while an append after a pause longer than the linger, or
// the first one, starts at once. The linger and the gather time are an
// hour and the stream's clock is the test's, so a group forms only by
// being full (3 envelopes) or by starting at once: a committer that did
// not linger forms two groups for the stream, one that lingered after the
// pause waits past the test's deadline.
func TestLingerSharesAGroup(t *testing.T) {
	e := newEnv(t)
	cfg := testConfig()
	cfg.GroupCommitMaxWait, cfg.GroupCommitLinger, cfg.GroupCommitMaxEvents = time.Hour, time.Hour, 3
	clock := &streamClock{t: time.Now()}
	s := e.store(t, cfg, Option(func(h *hooks) { h.gapNow = clock.now }))
	groups := func() (groups, events int64) {
		st := s.stats.snapshot()
		return st.groups, st.events
	}
	appendAlone := func(t *testing.T) {
		t.Helper()
		g0, e0 := groups()
		mustAppend(t, s, command("Order", "alone", 1))
		if g, ev := groups(); g-g0 != 1 || ev-e0 != 1 {
			t.Fatalf("%d groups of %d envelopes, want 1 of 1", g-g0, ev-e0)
		}
	}
	t.Run("the first append starts at once", appendAlone)
	t.Run("a steady stream shares one group", func(t *testing.T) {
		clock.advance(time.Millisecond) // well within the linger of the append before
		g0, e0 := groups()
		var wg sync.WaitGroup
		for i := range 3 {
			wg.Go(func() {
				rs, err := s.Append(ctxT(t), command("Order", "stream", i))
				if err == nil {
					err = rs[0].Err
				}
				if err != nil {
					t.Errorf("append %d: %v", i, err)
				}
			})
		}
		wg.Wait()
		if g, ev := groups(); g-g0 != 1 || ev-e0 != 3 {
			t.Fatalf("the stream's 3 appends took %d groups (%d envelopes), want 1 (an idle committer lingers in a stream)", g-g0, ev-e0)
		}
	})
	t.Run("an append after a pause starts at once", func(t *testing.T) {
		clock.advance(2 * time.Hour)
		appendAlone(t)
	})
	t.Run("the envelopes of one call after a pause start at once", func(t *testing.T) {
		clock.advance(2 * time.Hour)
		g0, e0 := groups()
		mustAppend(t, s, []envelope.Envelope{command("Order", "call", 1), command("Order", "call", 2)}...)
		if g, ev := groups(); g-g0 != 1 || ev-e0 != 2 {
			t.Fatalf("%d groups of %d envelopes, want 1 of 2", g-g0, ev-e0)
		}
	})
}
