package worker

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/shared/claim"
)

// TestRoundLinger: records that arrive one by one while a round is in
// flight share the next round when WORKER_ROUND_LINGER is longer than
// their arrival (one claim, one handler batch, one mark_done for both),
// and each gets a round of its own without it. An idle worker starts its
// first record at once whatever the linger. Asserted through the
// handler's batches and the registry's claim and mark_done calls (one
// round trip of each per round), not through time.
func TestRoundLinger(t *testing.T) {
	for _, tc := range []struct {
		name    string
		linger  time.Duration
		batches string // handler batches, sorted
	}{
		{"a long linger merges the records that arrive during a round", time.Hour, "[[a b] [stuck]]"},
		{"no linger starts a round per poll", 0, "[[a] [b] [stuck]]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			brokers, topic, produceRecs := oneTopic(t, "linger-")
			produce := func(agg string) { produceRecs(thingRecord(t, "", agg, 1, 1)) }
			var (
				mu      sync.Mutex
				batches [][]string
				handled int
				started = make(chan struct{}, 1)
				release = make(chan struct{})
			)
			h := batchFunc(func(ctx context.Context, recs []*Record) []BatchResult {
				out := make([]BatchResult, len(recs))
				var names []string
				for i, r := range recs {
					names = append(names, r.Envelope.AggregateID)
					if r.Envelope.AggregateID == "stuck" {
						started <- struct{}{}
						select {
						case <-release:
						case <-ctx.Done():
							out[i].Err = ctx.Err()
							continue
						}
					}
					out[i].Outcome = claim.Applied()
				}
				mu.Lock()
				batches = append(batches, names)
				handled += len(recs)
				mu.Unlock()
				return out
			})
			reg := &fakeRegistry{attempts: map[string]int{}}
			c, _ := startConsumer(t, brokers, topic, Config{Settings: Settings{RoundLinger: tc.linger}}, Deps{Registry: reg, Handler: h})
			polled := func(n int) func() bool { // n records polled: unfinished, or handled
				return func() bool {
					mu.Lock()
					defer mu.Unlock()
					c.mu.Lock()
					defer c.mu.Unlock()
					return c.pending+handled >= n
				}
			}
			produce("stuck")
			select { // an idle worker starts at once, even with an hour of linger
			case <-started:
			case <-time.After(20 * time.Second):
				t.Fatal("the first record was not handled")
			}
			produce("a")
			testenv.WaitFor(t, 20*time.Second, "a polled", polled(2))
			produce("b")
			testenv.WaitFor(t, 20*time.Second, "b polled", polled(3))
			close(release)
			testenv.WaitFor(t, 20*time.Second, "every record committed", func() bool { return committedOffset(c, topic) == 3 })
			mu.Lock()
			slices.SortFunc(batches, func(x, y []string) int { return slices.Compare(x, y) })
			got := fmt.Sprint(batches)
			mu.Unlock()
			if got != tc.batches {
				t.Errorf("handler batches %s, want %s", got, tc.batches)
			}
			reg.mu.Lock()
			defer reg.mu.Unlock()
			if want := len(batches); len(reg.marks) != want || reg.claims != want {
				t.Errorf("%d claim and %d mark_done calls, want one each per round (%d)", reg.claims, len(reg.marks), want)
			}
		})
	}
}
