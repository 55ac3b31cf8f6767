package projectionworker_test

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/testenv"
)

// BenchmarkProjection measures events/s Kafka → registry claim (batched) →
// ES bulk → mark_done → commit for the history projection with real
// Postgres, kfake and the ES test server; events are published before the
// timer starts (4 partitions, 2000 aggregates). "batched" uses
// ELASTICSEARCH_BULK_MAX_DOCS=1000; "per-event" sends one bulk request per
// event (MAX_DOCS=1). p50/p99 are the runtime's end-to-end stage
// (poll → finished) quantiles.
func BenchmarkProjection(b *testing.B) {
	for _, tc := range []struct {
		name    string
		maxDocs string
	}{{"batched", "1000"}, {"per-event", "1"}} {
		b.Run(tc.name, func(b *testing.B) {
			e := newEnv(b, 4)
			n := max(b.N, 1000)
			evs := make([]envelope.Envelope, 0, n)
			for i := 0; len(evs) < n; i++ {
				id := fmt.Sprintf("b%d", i%2000)
				seq := int64(i/2000 + 1)
				typ := projectionworker.InstanceUpdated
				if seq == 1 {
					typ = projectionworker.InstanceCreated
				}
				evs = append(evs, e.event(typ, "bench", "items", id, seq, map[string]any{"v": seq, "name": id}))
			}
			for i := 0; i < len(evs); i += 1000 {
				e.publish(evs[i:min(i+1000, len(evs))]...)
			}
			metrics := prometheus.NewRegistry()
			b.ResetTimer()
			start := time.Now()
			e.startInProcess(map[string]string{"ELASTICSEARCH_BULK_MAX_DOCS": tc.maxDocs, "SLUICE_LOG_LEVEL": "warn"}, metrics, spec("history"))
			testenv.WaitFor(b, 10*time.Minute, "caught up", e.caughtUp("projection-history-v1"))
			el := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(len(evs))/el.Seconds(), "events/s")
			p50, p99 := quantiles(b, metrics, "end_to_end")
			b.ReportMetric(p50*1000, "p50-ms")
			b.ReportMetric(p99*1000, "p99-ms")
		})
	}
}

// quantiles estimates p50 and p99 of a stage from the runtime histogram
// (upper bucket bounds).
func quantiles(b *testing.B, reg *prometheus.Registry, stage string) (p50, p99 float64) {
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_worker_stage_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			ok := false
			for _, l := range m.GetLabel() {
				if l.GetName() == "stage" && l.GetValue() == stage {
					ok = true
				}
			}
			if !ok {
				continue
			}
			h := m.GetHistogram()
			total := float64(h.GetSampleCount())
			bs := h.GetBucket()
			sort.Slice(bs, func(i, j int) bool { return bs[i].GetUpperBound() < bs[j].GetUpperBound() })
			for _, bk := range bs {
				c := float64(bk.GetCumulativeCount())
				if p50 == 0 && c >= 0.5*total {
					p50 = bk.GetUpperBound()
				}
				if p99 == 0 && c >= 0.99*total {
					p99 = bk.GetUpperBound()
				}
			}
		}
	}
	return p50, p99
}
