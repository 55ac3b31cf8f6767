package registry_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/shared/claim"
)

// Concurrent batches over the same events: every event is CLAIMED by exactly
// one of the claimers, whatever the order of the events in each batch and
// whether the claimers agree on the aggregate (when they do not, they hold
// different advisory locks and only the primary key separates them: the
// claim's fast path meets a unique violation and falls back to the general
// path).
func TestConcurrentBatchClaims(t *testing.T) {
	_, pool := testenv.NewMigratedDatabase(t)
	const claimers, events, rounds = 6, 60, 4
	regs := make([]*registry.Registry, claimers)
	for i := range regs {
		regs[i] = newRegistry(t, pool, fmt.Sprintf("w%d", i), registry.Config{})
	}
	cases := []struct {
		name string
		agg  func(claimer, event int) string
	}{
		{"same aggregates", func(_, e int) string { return fmt.Sprintf("agg-%d", e%7) }},
		{"aggregate differs per claimer", func(c, e int) string { return fmt.Sprintf("agg-%d-%d", c, e%7) }},
	}
	for ci, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for round := range rounds {
				h := fmt.Sprintf("h%d-%d", ci, round)
				results := make([][]claim.Result, claimers)
				orders := make([][]int, claimers)
				errs := make([]error, claimers)
				start := make(chan struct{})
				var wg sync.WaitGroup
				for c := range claimers {
					rng := rand.New(rand.NewPCG(uint64(round), uint64(c)))
					orders[c] = rng.Perm(events)
					reqs := make([]claim.Request, events)
					for i, e := range orders[c] {
						reqs[i] = req(h, fmt.Sprintf("e%03d", e), tc.agg(c, e), int64(e/7+1), skip)
					}
					wg.Go(func() {
						<-start
						results[c], errs[c] = regs[c].ClaimBatch(context.Background(), reqs)
					})
				}
				close(start)
				wg.Wait()
				winners := make([]int, events)
				for c := range claimers {
					if errs[c] != nil {
						t.Fatalf("claimer %d: %v", c, errs[c])
					}
					for i, res := range results[c] {
						switch res.Kind {
						case claim.Claimed:
							winners[orders[c][i]]++
						case claim.InProgress:
						default:
							t.Fatalf("claimer %d event %d: %s", c, orders[c][i], res.Kind)
						}
					}
				}
				for e, n := range winners {
					if n != 1 {
						t.Fatalf("round %d: event %d claimed %d times", round, e, n)
					}
					if got := row(t, regs[0], h, fmt.Sprintf("e%03d", e)); got.Attempts != 1 || got.Status != claim.StatusProcessing {
						t.Fatalf("round %d: event %d row %+v", round, e, got)
					}
				}
			}
		})
	}
}

// Concurrent claims and marks of one aggregate's events, in random order
// across workers: aggregate_versions.last_sequence never goes backwards (a
// poller watches it throughout) and ends at the highest sequence.
func TestVersionsNeverGoBackwards(t *testing.T) {
	_, pool := testenv.NewMigratedDatabase(t)
	ctx := context.Background()
	const workers, events, batch = 4, 400, 10
	perm := rand.New(rand.NewPCG(1, 2)).Perm(events)
	var wg sync.WaitGroup
	var (
		mu     sync.Mutex
		failed error
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if failed == nil {
			failed = err
		}
	}
	for w := range workers {
		r := newRegistry(t, pool, fmt.Sprintf("w%d", w), registry.Config{})
		wg.Go(func() {
			mine := perm[w*events/workers : (w+1)*events/workers]
			for len(mine) > 0 {
				n := min(batch, len(mine))
				reqs := make([]claim.Request, n)
				for i, e := range mine[:n] {
					reqs[i] = req("h", fmt.Sprintf("e%d", e), "A", int64(e+1), skip)
				}
				mine = mine[n:]
				res, err := r.ClaimBatch(ctx, reqs)
				if err != nil {
					fail(err)
					return
				}
				var items []claim.Done
				for _, c := range res {
					if c.Kind == claim.Claimed {
						items = append(items, claim.Done{Lease: c.Lease, Outcome: claim.Applied()})
					}
				}
				if len(items) == 0 {
					continue
				}
				errs, err := r.MarkDoneBatch(ctx, items)
				if err == nil {
					err = errors.Join(errs...)
				}
				if err != nil {
					fail(err)
					return
				}
			}
		})
	}
	done := make(chan struct{})
	var polls atomic.Int64
	watcher := newRegistry(t, pool, "watcher", registry.Config{})
	var pw sync.WaitGroup
	pw.Go(func() {
		var last int64
		for {
			select {
			case <-done:
				return
			default:
			}
			got, err := watcher.LastSequence(ctx, "h", "A")
			if err != nil {
				fail(err)
				return
			}
			if got < last {
				fail(fmt.Errorf("last_sequence went back from %d to %d", last, got))
				return
			}
			last = got
			polls.Add(1)
		}
	})
	wg.Wait()
	close(done)
	pw.Wait()
	if failed != nil {
		t.Fatal(failed)
	}
	if polls.Load() == 0 {
		t.Fatal("the watcher never polled")
	}
	last, err := watcher.LastSequence(ctx, "h", "A")
	if err != nil || last != events {
		t.Fatalf("last %d (want %d), err %v", last, events, err)
	}
}
