package relay

import (
	"context"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/eventstore/objstore/filestore"
	"github.com/sluicehq/sluice/internal/testenv"
)

// BenchmarkRelay measures the relay against real MinIO and Postgres and a
// kfake cluster:
//
//   - drain: events/s publishing a backlog of segments (appended before the
//     relay starts), from the relay's start to the Kafka ack of its last
//     event (events/s); the checkpoint records the end at most
//     RELAY_CHECKPOINT_INTERVAL after that (ckpt_ms: from the last ack to
//     the checkpoint object at the head; events_to_ckpt/s: the rate counted
//     to that point);
//   - latency: append→Kafka-ack latency p50/p99 at a paced append rate
//     (default 1,000 events/s) with LISTEN wake-ups (p50_ms, p99_ms: from
//     the append call, so they include the event store's append latency;
//     relay_p50_ms, relay_p99_ms: from the append's return, the relay's
//     own share).
//
// Run: go test -run '^$' -bench BenchmarkRelay -benchtime 1x ./relay/
// (SLUICE_RELAY_BENCH_EVENTS, SLUICE_RELAY_BENCH_RATE override the sizes).
func BenchmarkRelay(b *testing.B) {
	events := envInt("SLUICE_RELAY_BENCH_EVENTS", 50000)
	rate := envInt("SLUICE_RELAY_BENCH_RATE", 1000)
	drains := []struct {
		name  string
		flush int
		file  bool
	}{
		{"drain/flush=200", 200, false},
		{"drain/flush=2000", 2000, false},
		// The same backlog in a file bucket (docs/objstore.md#backends): what the relay
		// does when segment GETs and checkpoint PUTs are cheap.
		{"drain-file/flush=200", 200, true},
	}
	for _, d := range drains {
		flush := d.flush
		b.Run(d.name, func(b *testing.B) {
			for range b.N {
				e := newEnv(b, 30*time.Second)
				if d.file {
					e.useFileBucket(b)
				}
				appendAll(b, e.store, 128, mixedEnvelopes(events, 1000, ""))
				opts := e.opts(b)
				opts.Deps.Logger = testLogger(b, 8) // quiet
				opts.Config.BatchSize, opts.Config.KafkaFlushBatchSize = 200, flush
				var shape produceShape
				opts.Opts = append(opts.Opts, WithKafkaOpts(kgo.WithHooks(&shape)))
				var acked atomic.Int64
				var lastAck atomic.Pointer[time.Time]
				opts.Opts = append(opts.Opts, withAckHook(func(ids []string, at time.Time) {
					if acked.Add(int64(len(ids))) >= int64(events) {
						lastAck.CompareAndSwap(nil, &at)
					}
				}))
				start := time.Now()
				r, err := opts.new()
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() { _ = r.Run(ctx); close(done) }()
				// the acks first, without a request (a checkpoint GET every
				// few ms would take MinIO CPU from the drain), then the
				// checkpoint
				testenv.WaitForEvery(b, 5*time.Minute, time.Millisecond, "the last ack", func() bool { return lastAck.Load() != nil })
				testenv.WaitForEvery(b, time.Minute, 5*time.Millisecond, "the checkpoint at the head", func() bool { return e.checkpoint(b).Position == int64(events) })
				durable := time.Now()
				cancel()
				<-done
				r.Close()
				last := lastAck.Load()
				b.ReportMetric(float64(events)/last.Sub(start).Seconds(), "events/s")
				b.ReportMetric(float64(durable.Sub(*last).Microseconds())/1000, "ckpt_ms")
				b.ReportMetric(float64(events)/durable.Sub(start).Seconds(), "events_to_ckpt/s")
				shape.report(b)
				b.ReportMetric(0, "ns/op")
			}
		})
	}
	b.Run("latency/rate="+strconv.Itoa(rate), func(b *testing.B) {
		for range b.N {
			e := newEnv(b, 30*time.Second)
			var mu sync.Mutex
			started := map[string]time.Time{}
			committed := map[string]time.Time{}
			acked := map[string]time.Time{}
			opts := e.opts(b)
			opts.Deps.Logger = testLogger(b, 8)
			opts.Config.PollInterval = time.Second // wake-ups come from LISTEN
			var shape produceShape
			opts.Opts = append(opts.Opts, WithKafkaOpts(kgo.WithHooks(&shape)))
			opts.Opts = append(opts.Opts, withAckHook(func(ids []string, at time.Time) {
				mu.Lock()
				defer mu.Unlock()
				for _, id := range ids {
					if _, ok := started[id]; ok {
						acked[id] = at
					}
				}
			}))
			reg := prometheus.NewRegistry()
			reg.MustRegister(e.store.Collectors()...)
			r, stop := runRelay(b, e, opts)
			testenv.WaitFor(b, 30*time.Second, "relay leader", func() bool { return e.checkpoint(b).Position == 0 })
			total := rate * 5
			envs := mixedEnvelopes(total, 500, "")
			ctx := context.Background()
			interval := time.Second / time.Duration(rate)
			var wg sync.WaitGroup
			next := time.Now()
			for i := range envs {
				next = next.Add(interval)
				time.Sleep(time.Until(next))
				env := envs[i]
				mu.Lock()
				started[env.EventID] = time.Now()
				mu.Unlock()
				wg.Go(func() {
					if _, err := e.store.AppendOne(ctx, env); err != nil {
						b.Error(err)
					}
					mu.Lock()
					committed[env.EventID] = time.Now()
					mu.Unlock()
				})
			}
			wg.Wait()
			testenv.WaitFor(b, time.Minute, "all published", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(acked) >= total
			})
			stop()
			var lat, rlat []time.Duration
			for id, at := range acked {
				lat = append(lat, at.Sub(started[id]))
				rlat = append(rlat, max(at.Sub(committed[id]), 0))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50_ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99_ms")
			// From the append's return (an ack before it counts as 0).
			slices.Sort(rlat)
			b.ReportMetric(float64(rlat[len(rlat)/2].Microseconds())/1000, "relay_p50_ms")
			b.ReportMetric(float64(rlat[len(rlat)*99/100].Microseconds())/1000, "relay_p99_ms")
			// How the cycles were planned (a LIST costs several ms on MinIO).
			for _, pl := range []string{"list", "index", "hint", "idle"} {
				b.ReportMetric(value(r.m.plans.WithLabelValues(pl)), pl+"_cycles")
			}
			// Where the append's share goes: the store's stages (means).
			reportStoreStages(b, reg)
			shape.report(b)
			b.ReportMetric(0, "ns/op")
		}
	})
}

// produceShape counts what the relay's producers send the broker
// (franz-go hooks): produce requests, record batches and records. Records
// per request is the broker's work per event that the relay's produce
// shape decides (one request's fixed cost spread over its records).
type produceShape struct {
	requests, batches, records, bytes, raw atomic.Int64
}

// OnBrokerWrite counts produce requests (kmsg key 0).
func (s *produceShape) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == 0 && err == nil {
		s.requests.Add(1)
	}
}

// OnProduceBatchWritten counts the batches and records Kafka acknowledged.
func (s *produceShape) OnProduceBatchWritten(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.ProduceBatchMetrics) {
	s.batches.Add(1)
	s.records.Add(int64(m.NumRecords))
	s.bytes.Add(int64(m.CompressedBytes))
	s.raw.Add(int64(m.UncompressedBytes))
}

// report reports produce_requests, records/request, records/batch,
// batch_bytes (the mean bytes of a batch as written) and
// compression_ratio (uncompressed over written bytes: franz-go's default
// snappy).
func (s *produceShape) report(b *testing.B) {
	req, bat, rec := s.requests.Load(), s.batches.Load(), s.records.Load()
	b.ReportMetric(float64(req), "produce_requests")
	if req > 0 && bat > 0 {
		b.ReportMetric(float64(rec)/float64(req), "records/request")
		b.ReportMetric(float64(rec)/float64(bat), "records/batch")
		b.ReportMetric(float64(s.bytes.Load())/float64(bat), "batch_bytes")
		b.ReportMetric(float64(s.raw.Load())/float64(max(s.bytes.Load(), 1)), "compression_ratio")
	}
}

// reportStoreStages reports the mean of each of the event store's group
// commit stages (sluice_eventstore_stage_duration_seconds) as
// store_<stage>_ms, and the bound of the histogram bucket holding its p99 as
// store_<stage>_p99le_ms.
func reportStoreStages(b *testing.B, reg *prometheus.Registry) {
	b.Helper()
	fams, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "sluice_eventstore_stage_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			h := m.GetHistogram()
			if h.GetSampleCount() == 0 {
				continue
			}
			for _, l := range m.GetLabel() {
				if l.GetName() == "stage" {
					b.ReportMetric(h.GetSampleSum()/float64(h.GetSampleCount())*1000, "store_"+l.GetValue()+"_ms")
					for _, bk := range h.GetBucket() {
						if float64(bk.GetCumulativeCount()) >= 0.99*float64(h.GetSampleCount()) {
							b.ReportMetric(bk.GetUpperBound()*1000, "store_"+l.GetValue()+"_p99le_ms")
							break
						}
					}
				}
			}
		}
	}
}

// useFileBucket switches the env's store and checkpoint to a file bucket.
func (e *env) useFileBucket(t testing.TB) {
	t.Helper()
	fb, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e.bucket = fb
	e.store = e.newStore(t)
}

func envInt(key string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(key)); err == nil && v > 0 {
		return v
	}
	return def
}
