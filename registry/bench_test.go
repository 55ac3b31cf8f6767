package registry_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/shared/claim"
)

// benchEvents returns n claim requests under wait-for-predecessor whose
// aggregates cycle over 1000 ids, so every event is its aggregate's next
// slot and each batch of ≤ 1000 touches distinct aggregates.
func benchEvents(run string, from, n int) []claim.Request {
	h := "bench-" + run
	out := make([]claim.Request, n)
	for i := range out {
		k := from + i
		out[i] = req(h, fmt.Sprintf("%s-%d", run, k), fmt.Sprintf("agg-%d", k%1000), int64(k/1000+1), wait)
	}
	return out
}

// BenchmarkClaimMarkDone measures claim + mark done per event: one call per
// event ("per-event") against ClaimBatch + MarkDoneBatch ("batch-N"), side
// by side on the real server. The events/s metric is the figure to compare.
func BenchmarkClaimMarkDone(b *testing.B) {
	_, pool := testenv.NewMigratedDatabase(b)
	ctx := context.Background()
	for _, size := range []int{1000, 100, 1} {
		name := fmt.Sprintf("batch-%d", size)
		if size == 1 {
			name = "per-event"
		}
		b.Run(name, func(b *testing.B) {
			r := newRegistry(b, pool, "bench-"+name, registry.Config{})
			run := testenv.RandomSuffix(8)
			b.ResetTimer()
			for start := 0; start < b.N; start += size {
				n := min(size, b.N-start)
				reqs := benchEvents(run, start, n)
				if size == 1 {
					res, err := r.Claim(ctx, reqs[0])
					if err != nil || res.Kind != claim.Claimed {
						b.Fatal(res.Kind, err)
					}
					if err := r.MarkDone(ctx, res.Lease, claim.Applied()); err != nil {
						b.Fatal(err)
					}
					continue
				}
				claimAndMarkDone(ctx, b, r, reqs)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkClaimBatch measures claims alone, 1000 per call.
func BenchmarkClaimBatch(b *testing.B) {
	_, pool := testenv.NewMigratedDatabase(b)
	ctx := context.Background()
	r := newRegistry(b, pool, "bench", registry.Config{})
	run := testenv.RandomSuffix(8)
	const size = 1000
	b.ResetTimer()
	for start := 0; start < b.N; start += size {
		reqs := benchEvents(run, start, min(size, b.N-start))
		for i := range reqs {
			reqs[i].Policy = claim.SkipStale // nothing is marked done here
		}
		res, err := r.ClaimBatch(ctx, reqs)
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range res {
			if c.Kind != claim.Claimed {
				b.Fatal(c.Kind)
			}
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkClaimRedelivery measures a redelivered batch: 1000 events that
// are all done already (DUPLICATE_DONE), as after a consumer restart or a
// rebalance. It takes the claim's general path; a plan that joined the
// batch with itself by nested loops would make it quadratic in the batch.
func BenchmarkClaimRedelivery(b *testing.B) {
	_, pool := testenv.NewMigratedDatabase(b)
	ctx := context.Background()
	r := newRegistry(b, pool, "bench", registry.Config{})
	const size = 1000
	reqs := benchEvents(testenv.RandomSuffix(8), 0, size)
	claimAndMarkDone(ctx, b, r, reqs)
	for b.Loop() {
		res, err := r.ClaimBatch(ctx, reqs)
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range res {
			if c.Kind != claim.DuplicateDone {
				b.Fatal(c.Kind)
			}
		}
	}
	b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "events/s")
}

// claimAndMarkDone claims reqs with one ClaimBatch, requires every one to be
// CLAIMED, and marks them all done with one MarkDoneBatch.
func claimAndMarkDone(ctx context.Context, b *testing.B, r *registry.Registry, reqs []claim.Request) {
	b.Helper()
	res, err := r.ClaimBatch(ctx, reqs)
	if err != nil {
		b.Fatal(err)
	}
	items := make([]claim.Done, len(res))
	for i, c := range res {
		if c.Kind != claim.Claimed {
			b.Fatalf("event %s: %s", reqs[i].EventID, c.Kind)
		}
		items[i] = claim.Done{Lease: c.Lease, Outcome: claim.Applied()}
	}
	if errs, err := r.MarkDoneBatch(ctx, items); err != nil || errors.Join(errs...) != nil {
		b.Fatal(err, errs)
	}
}
