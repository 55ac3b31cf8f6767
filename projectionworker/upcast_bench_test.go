package projectionworker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/projectionworker/declarative"
	"github.com/sluicehq/sluice/schema"
	"github.com/sluicehq/sluice/schema/schematest"
	"github.com/sluicehq/sluice/shared/envelope"
)

// Two projections computing the same documents from OrderPlaced events
// stored as v1 (examples/schemas/OrderPlaced): one reads them upcast to
// v3 through both upcasters, the other reads the stored v1 form and does
// by hand what the upcasters do.
const (
	amountsUpcast = `name: order_amounts
version: 1
scope: shop
event_types: [OrderPlaced]
upcast: latest
key: event.data.order_id
updates:
  - increment: amount
    by: event.data.amount
  - set: currency
    value: event.data.currency
  - increment: orders
`
	amountsStored = `name: order_amounts
version: 1
scope: shop
event_types: [OrderPlaced]
key: event.data.order_id
updates:
  - increment: amount
    by: event.data.total
  - set: currency
    value: '"EUR"'
  - increment: orders
`
)

// BenchmarkDeclarativeUpcast measures events/s Kafka → registry claim →
// document reads → ES bulk → mark_done → commit of one declarative
// projection over the same OrderPlaced events stored as v1, read as
// stored and read with upcast: latest (two upcasters each, v1 → v2 → v3,
// and the validation of the result against v3), in one run, on real
// Postgres, kfake and the ES test server (4 partitions, 2,000 documents;
// events published before the timer starts). The ratio of the two is the
// cost of upcasting in projection throughput (docs/benchmarks.md).
func BenchmarkDeclarativeUpcast(b *testing.B) {
	for _, tc := range []struct{ name, yaml string }{{"stored", amountsStored}, {"upcast=latest", amountsUpcast}} {
		b.Run(tc.name, func(b *testing.B) {
			e := newEnv(b, 4)
			reg := schema.New(e.pool, schema.Config{}, nil)
			schematest.RegisterOrderPlaced(b, reg)
			specs, err := declarative.Parse("bench.yaml", []byte(tc.yaml))
			if err != nil {
				b.Fatal(err)
			}
			ps, err := declarative.Compile(specs)
			if err != nil {
				b.Fatal(err)
			}
			ps[0].UseUpcaster(reg)
			n := max(b.N, 5000)
			evs := make([]envelope.Envelope, n)
			for i := range evs {
				evs[i] = envelope.Envelope{EventID: uuid.NewString(), EventType: "OrderPlaced", Kind: envelope.KindDomain,
					AggregateType: "Order", AggregateID: fmt.Sprintf("o-%d", i%10000), SequenceNumber: int64(1 + i/10000), Position: int64(i + 1),
					OccurredAt: envelope.NewTimestamp(time.Unix(1_700_000_000+int64(i), 0)), SchemaVersion: 1,
					Data: fmt.Appendf(nil, `{"order_id":"k-%d","total":%d.5}`, i%2000, i%97)}
			}
			for i := 0; i < len(evs); i += 1000 {
				e.publish(evs[i:min(i+1000, len(evs))]...)
			}
			b.ResetTimer()
			start := time.Now()
			e.startInProcess(map[string]string{"ELASTICSEARCH_BULK_MAX_DOCS": "1000", "SLUICE_LOG_LEVEL": "warn"}, prometheus.NewRegistry(), projectionworker.Spec{Projection: ps[0]})
			testenv.WaitFor(b, 10*time.Minute, "caught up", e.caughtUp("projection-order_amounts-v1"))
			el := time.Since(start)
			b.StopTimer()
			if d := e.get("sluice_shop_order_amounts_v1", "k-1"); !d.Found || d.Source["currency"] != "EUR" {
				b.Fatalf("k-1: %v", d.Source)
			}
			if dlq := e.dlqRecords(); len(dlq) != 0 {
				b.Fatalf("%d dead letters", len(dlq))
			}
			b.ReportMetric(float64(len(evs))/el.Seconds(), "events/s")
		})
	}
}
