package eventstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/shared/envelope"
)

// BenchmarkAppend measures group-commit appends against real MinIO and
// Postgres at 1, 16 and 128 concurrent appenders (each appends one envelope
// at a time and waits for it), next to the one-object-per-event baseline: a
// conditional PUT per event straight to the same MinIO, without Postgres —
// the most that design could do. Reported: events/s and p50/p99 append
// latency. Run without -race:
//
//	go test -run '^$' -bench '^BenchmarkAppend$' -benchtime 20000x ./eventstore/
func BenchmarkAppend(b *testing.B) {
	for _, conc := range []int{1, 16, 128} {
		e := newEnv(b)
		s := e.store(b, testConfig())
		b.Run(fmt.Sprintf("groupcommit/appenders=%d", conc), func(b *testing.B) {
			before := s.stats.snapshot()
			runAppenders(b, conc, func(ctx context.Context, ev envelope.Envelope) error {
				_, err := s.AppendOne(ctx, ev)
				return err
			})
			reportStages(b, s.stats.snapshot().sub(before))
		})
		b.Run(fmt.Sprintf("object-per-event/appenders=%d", conc), func(b *testing.B) {
			var n atomic.Int64
			prefix := fmt.Sprintf("baseline/%d/", time.Now().UnixNano())
			runAppenders(b, conc, func(ctx context.Context, ev envelope.Envelope) error {
				ev.SequenceNumber, ev.Position = 1, n.Add(1)
				line, err := envelope.Marshal(ev)
				if err != nil {
					return err
				}
				_, err = e.bucket.Create(ctx, fmt.Sprintf("%s%020d.json", prefix, ev.Position), line)
				return err
			})
		})
	}
}

func runAppenders(b *testing.B, conc int, appendFn func(context.Context, envelope.Envelope) error) {
	runAppendersOver(b, conc, 1000, appendFn)
}

// runAppendersOver runs b.N appends from conc goroutines, each to one of
// aggregates random aggregates, and reports events/s and p50/p99 latency.
func runAppendersOver(b *testing.B, conc, aggregates int, appendFn func(context.Context, envelope.Envelope) error) {
	ctx := context.Background()
	var next atomic.Int64
	lat := make([][]time.Duration, conc)
	var wg sync.WaitGroup
	var failed atomic.Value
	b.ResetTimer()
	start := time.Now()
	for g := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				ev := command("Order", fmt.Sprintf("order-%d", rand.IntN(aggregates)), map[string]any{"item": "sku-123", "qty": 2, "note": "benchmark payload"})
				t0 := time.Now()
				if err := appendFn(ctx, ev); err != nil {
					failed.Store(err)
					return
				}
				lat[g] = append(lat[g], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(err)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	pct := func(p float64) float64 {
		return float64(all[min(len(all)-1, int(p*float64(len(all))))]) / float64(time.Millisecond)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(0, "ns/op")
}

// reportStages reports where a group's time went: events per group, the
// mean gather wait, reservation, segment PUT and commit, the mean number of
// groups in flight, and the reservations that read their facts (a round
// trip more; 0 when every group's assumed facts held).
func reportStages(b *testing.B, st stageSnapshot) {
	if st.groups == 0 {
		return
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(st.groups) / float64(time.Millisecond) }
	b.ReportMetric(float64(st.events)/float64(st.groups), "events/group")
	b.ReportMetric(ms(st.gather), "gather-ms")
	b.ReportMetric(ms(st.reserve), "reserve-ms")
	b.ReportMetric(ms(st.put), "put-ms")
	b.ReportMetric(ms(st.commit), "commit-ms")
	b.ReportMetric(float64(st.inFlight)/float64(st.groups), "inflight")
	b.ReportMetric(float64(st.lookups)/float64(st.groups), "lookups/group")
}
