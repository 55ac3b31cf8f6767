package registry_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/registry"
)

// seedDone writes n done rows of handler straight into the registry, as
// a registry that has run for long holds them: ten events per aggregate
// (ids seed-agg-*, apart from benchEvents' agg-*) and their aggregates'
// versions, then VACUUM ANALYZE. generate_series, for the growth
// benchmarks only.
func seedDone(b *testing.B, pool *pgxpool.Pool, handler string, n int) {
	b.Helper()
	ctx := context.Background()
	testenv.MustExec(b, pool, `INSERT INTO sluice.processed_events (handler, event_id, aggregate_id, sequence_number,
			status, owner, started_at, processed_at, attempt_count, outcome)
		SELECT $1, 'seed-' || i, 'seed-agg-' || (i / 10), i % 10 + 1, 'done', 'seed', now(), now(), 1, '{"result":"applied"}'
		FROM generate_series(0, $2::bigint - 1) AS i`, handler, n)
	testenv.MustExec(b, pool, `INSERT INTO sluice.aggregate_versions (handler, aggregate_id, last_sequence)
		SELECT $1, 'seed-agg-' || a, 10 FROM generate_series(0, ($2::bigint - 1) / 10) AS a`, handler, n)
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE sluice.processed_events, sluice.aggregate_versions`); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkClaimMarkDoneGrowth measures batched claim + mark done (1000
// events per ClaimBatch and MarkDoneBatch, as BenchmarkClaimMarkDone's
// batch-1000) on a registry that already holds 10,000, 1,000,000 and
// 10,000,000 done rows of the same handler (issue #34 item 4: the target
// is 10M within 20 % of 10k). Sizes above SLUICE_BENCH_GROWTH_MAX (default
// 1M) are left out: 10M rows take a few GB and minutes to seed
// (SLUICE_BENCH_GROWTH_MAX=10000000 to include them).
func BenchmarkClaimMarkDoneGrowth(b *testing.B) {
	ctx := context.Background()
	for _, n := range testenv.GrowthSizes(10_000, 1_000_000, 10_000_000) {
		b.Run("rows="+testenv.SizeName(n), func(b *testing.B) {
			_, pool := testenv.NewMigratedDatabase(b)
			run := testenv.RandomSuffix(8)
			seedDone(b, pool, "bench-"+run, n)
			r := newRegistry(b, pool, "bench-growth", registry.Config{})
			const size = 1000
			// Warm-up: connections, plans and caches, with events of
			// another handler.
			claimAndMarkDone(ctx, b, r, benchEvents(testenv.RandomSuffix(8), 0, size))
			b.ResetTimer()
			for start := 0; start < b.N; start += size {
				claimAndMarkDone(ctx, b, r, benchEvents(run, start, min(size, b.N-start)))
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkRegistryBytes measures the Postgres bytes the registry keeps
// per event of one handler (issue #34 item 4): pg_total_relation_size of
// sluice.processed_events and sluice.aggregate_versions after rounds of
// 20,000 events claimed and marked done (1000 per batch, over 1000
// aggregates), without prune ("kept-B/event": the size over every event of
// the rounds) and with PruneSafely of the rows older than a second and a
// VACUUM after each round, as PROCESSED_EVENT_PRUNE_INTERVAL and
// autovacuum would ("pruned-B/event": the size over every event, which
// falls as the rounds go on when the space is reused; "pruned-growth-B/event":
// the growth after the first round per event). The instance worker's rows
// are command statuses and never pruned: they cost the kept figure. It
// measures once, whatever b.N (-benchtime 1x).
func BenchmarkRegistryBytes(b *testing.B) {
	ctx := context.Background()
	const perRound, rounds = 20_000, 4
	for _, prune := range []bool{false, true} {
		name := "kept"
		if prune {
			name = "pruned"
		}
		b.Run(name, func(b *testing.B) {
			_, pool := testenv.NewMigratedDatabase(b)
			r := newRegistry(b, pool, "bench-bytes", registry.Config{LeaseTimeout: time.Second, HeartbeatInterval: 500 * time.Millisecond})
			run := testenv.RandomSuffix(8)
			size := func() int64 {
				var s int64
				if err := pool.QueryRow(ctx, `SELECT pg_total_relation_size('sluice.processed_events') + pg_total_relation_size('sluice.aggregate_versions')`).Scan(&s); err != nil {
					b.Fatal(err)
				}
				return s
			}
			var first int64
			for round := range rounds {
				for start := 0; start < perRound; start += 1000 {
					claimAndMarkDone(ctx, b, r, benchEvents(run, round*perRound+start, 1000))
				}
				if prune {
					time.Sleep(1100 * time.Millisecond) // the rows must be older than the retention
					if _, err := r.PruneSafely(ctx, registry.PruneRequest{OlderThan: time.Second}); err != nil {
						b.Fatal(err)
					}
					testenv.MustExec(b, pool, `VACUUM sluice.processed_events, sluice.aggregate_versions`)
				}
				if round == 0 {
					first = size()
				}
			}
			total := size()
			b.ReportMetric(float64(total)/float64(rounds*perRound), name+"-B/event")
			if prune {
				b.ReportMetric(float64(total-first)/float64((rounds-1)*perRound), "pruned-growth-B/event")
			}
		})
	}
}
