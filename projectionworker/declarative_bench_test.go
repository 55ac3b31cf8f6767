package projectionworker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/projectionworker/declarative"
	"github.com/sluicehq/sluice/projectionworker/declarative/declarativetest"
	"github.com/sluicehq/sluice/shared/envelope"
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
	// The floor of the same run: what users compare a read model with, a
	// Kafka-to-Elasticsearch sink (one consumer, bulk index of one
	// document per customer per record, last write wins) with no registry,
	// no sequence guard and no read before the write.
	b.Run("sink-floor", func(b *testing.B) {
		e := newEnv(b, 4)
		n := max(b.N, 5000)
		evs := make([]envelope.Envelope, 0, n)
		for i := 0; len(evs) < n; i++ {
			evs = append(evs, orderEvent(e, "ORDER_PLACED", fmt.Sprintf("o-%d", i%10000), int64(1+i/10000), fmt.Sprintf("c-%d", i%2000), float64(i%97)))
		}
		for i := 0; i < len(evs); i += 1000 {
			e.publish(evs[i:min(i+1000, len(evs))]...)
		}
		b.ResetTimer()
		start := time.Now()
		if got := sinkFloor(b, e, len(evs)); got != len(evs) {
			b.Fatalf("sink indexed %d records, want %d", got, len(evs))
		}
		el := time.Since(start)
		b.StopTimer()
		b.ReportMetric(float64(len(evs))/el.Seconds(), "events/s")
	})
}

// sinkFloor consumes n records of e's topic with a plain consumer group
// and indexes each as the customer's document in bulk requests of up to
// 1,000, committing after each bulk; it returns the records indexed.
func sinkFloor(b *testing.B, e *env, n int) int {
	cl := e.kafka.Client(b, kgo.ConsumeTopics(e.topic), kgo.ConsumerGroup(testenv.UniqueName("sink-")),
		kgo.DisableAutoCommit(), kgo.FetchMaxWait(50*time.Millisecond))
	ctx := ctxT(b)
	done := 0
	var body bytes.Buffer
	for done < n {
		fs := cl.PollRecords(ctx, 1000)
		if err := fs.Err0(); err != nil {
			b.Fatal(err)
		}
		body.Reset()
		recs := fs.Records()
		for _, r := range recs {
			ev, err := envelope.Parse(r.Value, envelope.DefaultLimits())
			if err != nil {
				b.Fatal(err)
			}
			var d struct {
				Customer string `json:"customer_id"`
			}
			if err := json.Unmarshal(ev.Data, &d); err != nil {
				b.Fatal(err)
			}
			fmt.Fprintf(&body, `{"index":{"_index":"sink_shop_order_totals","_id":%q}}`+"\n", "customer-"+d.Customer)
			body.Write(ev.Data)
			body.WriteByte('\n')
		}
		if len(recs) == 0 {
			continue
		}
		res, err := e.esc.Bulk(bytes.NewReader(body.Bytes()), e.esc.Bulk.WithContext(ctx))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.IsError() {
			b.Fatalf("bulk: %s", res.Status())
		}
		if err := cl.CommitRecords(ctx, recs...); err != nil {
			b.Fatal(err)
		}
		done += len(recs)
	}
	return done
}
