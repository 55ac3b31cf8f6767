package eventstore

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/shared/envelope"
)

// BenchmarkIndexBytes measures the Postgres bytes the event store keeps per
// stored event (issue #34 item 4): pg_total_relation_size (table, indexes,
// TOAST) of sluice.appends and sluice.sequences after 10,000 and 100,000
// events appended through Append (real Postgres and MinIO), as the instance
// pipeline stores them: per instance aggregate a command then a domain
// event, 500 envelopes per call. The store index has no prune: every row is
// kept for as long as the store lives (nothing compacts the index), so
// this is the cost per event for good. Sizes above SLUICE_BENCH_GROWTH_MAX are left out. It measures once
// per size, whatever b.N (-benchtime 1x).
func BenchmarkIndexBytes(b *testing.B) {
	for _, n := range testenv.GrowthSizes(10_000, 100_000) {
		b.Run("events="+testenv.SizeName(n), func(b *testing.B) {
			e := newEnv(b)
			s := e.store(b, testConfig())
			ctx := context.Background()
			batch := make([]envelope.Envelope, 0, 500)
			for i := 0; i < n; i += 2 {
				agg := fmt.Sprintf("bench:orders:o-%d", i/2)
				batch = append(batch,
					command(envelope.AggregateTypeInstance, agg, map[string]any{"total": i}),
					domainEvent(envelope.AggregateTypeInstance, agg, map[string]any{"total": i}))
				if len(batch) == cap(batch) || i+2 >= n {
					mustAppend(b, s, batch...)
					batch = batch[:0]
				}
			}
			var appends, sequences int64
			if err := e.pool.QueryRow(ctx, `SELECT pg_total_relation_size('sluice.appends'), pg_total_relation_size('sluice.sequences')`).
				Scan(&appends, &sequences); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(appends)/float64(n), "appends-B/event")
			b.ReportMetric(float64(sequences)/float64(n), "sequences-B/event")
			b.ReportMetric(float64(appends+sequences)/float64(n), "index-B/event")
		})
	}
}
