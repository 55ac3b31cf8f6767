package projectionworker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/projectionworker/declarative"
	"github.com/sluicehq/sluice/projectionworker/declarative/declarativetest"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/testenv"
)

// goOrderTotals is examples/projections/order_totals.yaml in Go
// (declarativetest.OrderTotals, the same documents, checked in package
// declarative), as a Stateful projection of its own, for
// BenchmarkDeclarativeVsGo.
type goOrderTotals struct{ *declarative.Projection }

func (g goOrderTotals) ProjectState(ctx context.Context, e envelope.Envelope, st *projectionworker.DocState) ([]projectionworker.Op, error) {
	return declarativetest.OrderTotals(ctx, e, st)
}

// BenchmarkDeclarativeVsGo measures events/s Kafka → registry claim →
// document reads → ES bulk → mark_done → commit for the order_totals
// example, declared in YAML and written in Go, in one run, on real
// Postgres, kfake and the ES test server (4 partitions, 2,000 customers,
// 10,000 orders; events published before the timer starts).
func BenchmarkDeclarativeVsGo(b *testing.B) {
	specs, err := declarative.LoadFiles("../examples/projections/order_totals.yaml")
	if err != nil {
		b.Fatal(err)
	}
	ps, err := declarative.Compile(specs)
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		p    projectionworker.Projection
	}{{"declarative", ps[0]}, {"go", goOrderTotals{ps[0]}}} {
		b.Run(tc.name, func(b *testing.B) {
			e := newEnv(b, 4)
			n := max(b.N, 5000)
			evs := make([]envelope.Envelope, 0, n)
			for i := 0; len(evs) < n; i++ {
				typ, seq := "ORDER_PLACED", int64(1+i/10000)
				evs = append(evs, orderEvent(e, typ, fmt.Sprintf("o-%d", i%10000), seq, fmt.Sprintf("c-%d", i%2000), float64(i%97)))
			}
			for i := 0; i < len(evs); i += 1000 {
				e.publish(evs[i:min(i+1000, len(evs))]...)
			}
			b.ResetTimer()
			start := time.Now()
			e.startInProcess(map[string]string{"ELASTICSEARCH_BULK_MAX_DOCS": "1000", "SLUICE_LOG_LEVEL": "warn"}, prometheus.NewRegistry(), projectionworker.Spec{Projection: tc.p})
			testenv.WaitFor(b, 10*time.Minute, "caught up", e.caughtUp("projection-order_totals-v1"))
			el := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(len(evs))/el.Seconds(), "events/s")
		})
	}
}
