package eventstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/eventstore/objstore/filestore"
	"github.com/sluicehq/sluice/internal/procstat"
	"github.com/sluicehq/sluice/internal/testenv"
)

// BenchmarkGroupPostgresCPU measures what Postgres spends per store group,
// by the database's backends' own CPU counters (procstat), on the file
// backend so that nothing else shares the figure. With one appender every
// group holds one envelope: the fixed cost of a group, which a paced load
// pays every few commands and a closed loop shares among many
// (docs/benchmarks.md, eighth session); with 8, 32 and 96 the groups fill,
// and the growth of a group's cost with its size is the cost of an
// envelope. Reported: Postgres CPU µs per append and per group, and
// envelopes per group. A group is four transactions (the reservation, its
// flush, the commit and its notification; TestGroupWork counts the
// statements). It needs a local Postgres (the backends in this machine's
// /proc).
//
//	go test -run '^$' -bench '^BenchmarkGroupPostgresCPU$' -benchtime 3000x ./eventstore/
func BenchmarkGroupPostgresCPU(b *testing.B) {
	for _, conc := range []int{1, 8, 32, 96} {
		b.Run(fmt.Sprintf("appenders=%d", conc), func(b *testing.B) {
			ctx := context.Background()
			url, _ := testenv.NewMigratedDatabase(b)
			pool, err := pgxpool.New(ctx, url)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(pool.Close)
			bucket, err := filestore.New(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			s, err := New(testConfig(), Deps{Pool: pool, Bucket: bucket})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			appendN := func(n int64, prefix string) {
				var next atomic.Int64
				var wg sync.WaitGroup
				for range conc {
					wg.Go(func() {
						for i := next.Add(1); i <= n; i = next.Add(1) {
							if _, err := s.AppendOne(ctx, command("Order", fmt.Sprintf("%s-%d", prefix, i), map[string]any{"qty": 2})); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
			}
			appendN(200, "warm") // plans cached, connections open
			st0 := s.stats.snapshot()
			cpu := procstat.MeasureBackends(b, ctx, pool, func() {
				b.ResetTimer()
				appendN(int64(b.N), "o")
				b.StopTimer()
			})
			st := s.stats.snapshot().sub(st0)
			if st.groups == 0 {
				b.Fatal("no group was counted")
			}
			us := cpu * 1e6
			b.ReportMetric(us/float64(b.N), "pg-cpu-us/append")
			b.ReportMetric(us/float64(st.groups), "pg-cpu-us/group")
			b.ReportMetric(float64(st.events)/float64(st.groups), "events/group")
		})
	}
}
