package projectionworker_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/worker"
)

// BenchmarkProjection measures events/s Kafka → registry claim → ES bulk →
// mark_done → commit for the history projection with real Postgres, kfake
// and the ES test server; events are published before the timer starts (4
// partitions, 2000 aggregates). Both cases run the same worker (batch
// handler, ELASTICSEARCH_BULK_MAX_DOCS=1000); they differ only in the
// registry path: "batched" claims and marks done with one ClaimBatch and one
// MarkDoneBatch per round, "per-event-registry" (the issue #8 baseline)
// makes one Claim and one MarkDone call per event. p50/p99 are the
// runtime's end-to-end stage (poll → finished) quantiles (histogram bucket
// bounds); registry-calls/event counts the claim and mark_done round trips.
func BenchmarkProjection(b *testing.B) {
	for _, tc := range []struct {
		name     string
		perEvent bool
	}{{"batched", false}, {"per-event-registry", true}} {
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
			var calls atomic.Int64
			e.wrapRegistry = func(r worker.Registry) worker.Registry {
				return &countingRegistry{Registry: r, perEvent: tc.perEvent, calls: &calls}
			}
			metrics := prometheus.NewRegistry()
			b.ResetTimer()
			start := time.Now()
			e.startInProcess(map[string]string{"ELASTICSEARCH_BULK_MAX_DOCS": "1000", "SLUICE_LOG_LEVEL": "warn"}, metrics, spec("history"))
			testenv.WaitFor(b, 10*time.Minute, "caught up", e.caughtUp("projection-history-v1"))
			el := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(len(evs))/el.Seconds(), "events/s")
			p50, p99 := quantiles(b, metrics, "end_to_end")
			b.ReportMetric(p50*1000, "p50-ms")
			b.ReportMetric(p99*1000, "p99-ms")
			b.ReportMetric(float64(calls.Load())/float64(len(evs)), "registry-calls/event")
		})
	}
}

// countingRegistry counts the claim and mark_done round trips; perEvent
// turns every batch into one call per event (registry.Claim and
// registry.MarkDone are exactly one-element batches).
type countingRegistry struct {
	worker.Registry
	perEvent bool
	calls    *atomic.Int64
}

func (r *countingRegistry) ClaimBatch(ctx context.Context, reqs []claim.Request) ([]claim.Result, error) {
	if !r.perEvent {
		r.calls.Add(1)
		return r.Registry.ClaimBatch(ctx, reqs)
	}
	out := make([]claim.Result, len(reqs))
	for i, req := range reqs {
		r.calls.Add(1)
		res, err := r.Registry.ClaimBatch(ctx, []claim.Request{req})
		if err != nil {
			var re *claim.RequestError
			if errors.As(err, &re) {
				re.Index = i
			}
			return nil, err
		}
		out[i] = res[0]
	}
	return out, nil
}

func (r *countingRegistry) MarkDoneBatch(ctx context.Context, items []claim.Done) ([]error, error) {
	if !r.perEvent {
		r.calls.Add(1)
		return r.Registry.MarkDoneBatch(ctx, items)
	}
	errs := make([]error, len(items))
	for i, d := range items {
		r.calls.Add(1)
		e, err := r.Registry.MarkDoneBatch(ctx, []claim.Done{d})
		if err != nil {
			return nil, err
		}
		errs[i] = e[0]
	}
	return errs, nil
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
			// Beyond the last bucket: +Inf rather than 0.
			if total > 0 && p50 == 0 {
				p50 = math.Inf(1)
			}
			if total > 0 && p99 == 0 {
				p99 = math.Inf(1)
			}
		}
	}
	return p50, p99
}
