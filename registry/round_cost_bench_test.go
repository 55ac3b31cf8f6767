package registry_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/internal/procstat"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/registry"
)

// BenchmarkRoundPostgresCPU measures what Postgres spends on a worker
// round's registry work (one ClaimBatch and one MarkDoneBatch) by the
// database's backends' own CPU counters (procstat), at batches of 1, 10, 50
// and 200 events: the round's fixed cost and the cost per event
// (docs/benchmarks.md, eighth session). b.N is the number of rounds.
// Reported: Postgres CPU µs per round and per event (/proc counts CPU in
// 10 ms ticks per backend: run enough rounds). It needs a local Postgres
// (the backends in this machine's /proc).
//
//	go test -run '^$' -bench '^BenchmarkRoundPostgresCPU$' -benchtime 300x ./registry/
func BenchmarkRoundPostgresCPU(b *testing.B) {
	_, pool := testenv.NewMigratedDatabase(b)
	ctx := context.Background()
	for _, size := range []int{1, 10, 50, 200} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			r := newRegistry(b, pool, fmt.Sprintf("round-%d", size), registry.Config{})
			run := testenv.RandomSuffix(8)
			claimAndMarkDone(ctx, b, r, benchEvents(run+"-warm", 0, size)) // plans cached
			cpu := procstat.MeasureBackends(b, ctx, pool, func() {
				b.ResetTimer()
				for i := range b.N {
					claimAndMarkDone(ctx, b, r, benchEvents(run, i*size, size))
				}
				b.StopTimer()
			})
			us := cpu * 1e6
			b.ReportMetric(us/float64(b.N), "pg-cpu-us/round")
			b.ReportMetric(us/float64(b.N*size), "pg-cpu-us/event")
		})
	}
}
