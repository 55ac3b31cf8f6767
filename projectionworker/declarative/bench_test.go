package declarative

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/projectionworker/declarative/declarativetest"
	"github.com/sluicehq/sluice/schema"
	"github.com/sluicehq/sluice/schema/schematest"
	"github.com/sluicehq/sluice/shared/envelope"
)

// goOrderTotals is the Go twin of the example (declarativetest.OrderTotals)
// on this package's Store.
func goOrderTotals(ctx context.Context, e envelope.Envelope, store Store) ([]projectionworker.Op, error) {
	return declarativetest.OrderTotals(ctx, e, store)
}

// benchEvents are order events over 1,000 customers and 10,000 orders.
func benchEvents(n int) []envelope.Envelope {
	out := make([]envelope.Envelope, n)
	for i := range out {
		typ := "ORDER_PLACED"
		seq := int64(1)
		if i%10 == 9 {
			typ, seq = "ORDER_CANCELLED", 2
		}
		data := fmt.Sprintf(`{"customer_id":"c-%d","amount":%d.5}`, i%1000, i%97)
		out[i] = envelope.Envelope{EventID: fmt.Sprintf("00000000-0000-4000-8000-%012d", i), EventType: typ, Kind: envelope.KindDomain,
			AggregateType: "Order", AggregateID: fmt.Sprintf("o-%d", i%10000), SequenceNumber: seq, Position: int64(i + 1),
			OccurredAt: envelope.NewTimestamp(time.Unix(1_700_000_000+int64(i), 0)), Data: []byte(data), SchemaVersion: 1}
	}
	return out
}

// BenchmarkOrderTotals measures events per second of the declarative
// order_totals example and of the same projection in Go, in one run, on
// an in-memory document store (the projection's own cost: decoding the
// event and the document, the updates, encoding; no Elasticsearch). Each
// iteration projects 1,000 events (a worker round) onto a fresh store, so
// documents stay small.
func BenchmarkOrderTotals(b *testing.B) {
	ps := compileOrderTotals(b)
	evs := benchEvents(1000)
	ctx := context.Background()
	run := func(b *testing.B, apply func(context.Context, envelope.Envelope, Store) ([]projectionworker.Op, error)) {
		b.ReportAllocs()
		for b.Loop() {
			m := NewMemory()
			for _, e := range evs {
				if _, err := apply(ctx, e, m); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.N*len(evs))/b.Elapsed().Seconds(), "events/s")
	}
	b.Run("declarative", func(b *testing.B) { run(b, ps[0].Apply) })
	b.Run("go", func(b *testing.B) { run(b, goOrderTotals) })
}

// BenchmarkUpcastLatest measures events per second of one declarative
// projection alone (an in-memory document store, as BenchmarkOrderTotals)
// over the same OrderPlaced events stored as v1 (examples/schemas), read
// as stored and with upcast: latest (v1 → v2 → v3 through both upcasters
// and the validation against v3), the two written to compute the same
// documents: the upper bound of what upcasting costs a projection, whose
// worker also waits for Kafka, Postgres and Elasticsearch
// (projectionworker's BenchmarkDeclarativeUpcast measures that).
func BenchmarkUpcastLatest(b *testing.B) {
	_, pool := testenv.NewMigratedDatabase(b)
	reg := schema.New(pool, schema.Config{}, nil)
	schematest.RegisterOrderPlaced(b, reg)
	const common = "name: order_amounts\nversion: 1\nscope: shop\nevent_types: [OrderPlaced]\nkey: event.data.order_id\n"
	specs := map[string]string{
		"stored":        common + "updates:\n  - increment: amount\n    by: event.data.total\n  - set: currency\n    value: '\"EUR\"'\n  - increment: orders\n",
		"upcast=latest": common + "upcast: latest\nupdates:\n  - increment: amount\n    by: event.data.amount\n  - set: currency\n    value: event.data.currency\n  - increment: orders\n",
	}
	evs := make([]envelope.Envelope, 1000)
	for i := range evs {
		evs[i] = envelope.Envelope{EventID: fmt.Sprintf("00000000-0000-4000-8000-%012d", i), EventType: "OrderPlaced", Kind: envelope.KindDomain,
			AggregateType: "Order", AggregateID: fmt.Sprintf("o-%d", i), SequenceNumber: 1, Position: int64(i + 1),
			OccurredAt: envelope.NewTimestamp(time.Unix(1_700_000_000+int64(i), 0)), SchemaVersion: 1,
			Data: fmt.Appendf(nil, `{"order_id":"k-%d","total":%d.5}`, i%100, i%97)}
	}
	ctx := context.Background()
	for _, name := range []string{"stored", "upcast=latest"} {
		b.Run(name, func(b *testing.B) {
			parsed, err := Parse("bench.yaml", []byte(specs[name]))
			if err != nil {
				b.Fatal(err)
			}
			ps, err := Compile(parsed)
			if err != nil {
				b.Fatal(err)
			}
			ps[0].UseUpcaster(reg)
			if _, err := ps[0].Upcast(ctx, evs[0]); err != nil { // the registry loads once per process
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				m := NewMemory()
				for _, e := range evs {
					if _, err := ps[0].Apply(ctx, e, m); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.N*len(evs))/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// compileOrderTotals compiles the order_totals example (its one
// projection in ps[0]).
func compileOrderTotals(tb testing.TB) []*Projection {
	tb.Helper()
	specs, err := LoadFiles("../../examples/projections/order_totals.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	ps, err := Compile(specs)
	if err != nil {
		tb.Fatal(err)
	}
	return ps
}

// The Go twin computes the same documents as the declarative example.
func TestGoTwinMatchesDeclarative(t *testing.T) {
	ps := compileOrderTotals(t)
	a, b := NewMemory(), NewMemory()
	for _, e := range benchEvents(3000) {
		if _, err := ps[0].Apply(context.Background(), e, a); err != nil {
			t.Fatal(err)
		}
		if _, err := goOrderTotals(context.Background(), e, b); err != nil {
			t.Fatal(err)
		}
	}
	if len(a.Docs) != len(b.Docs) {
		t.Fatalf("%d documents vs %d", len(a.Docs), len(b.Docs))
	}
	for k, d := range a.Docs {
		var x, y any
		_ = json.Unmarshal(d.Source, &x)
		_ = json.Unmarshal(b.Docs[k].Source, &y)
		if fmt.Sprint(x) != fmt.Sprint(y) || d.Version != b.Docs[k].Version {
			t.Fatalf("%v:\ndeclarative %s\ngo          %s", k, d.Source, b.Docs[k].Source)
		}
	}
}
