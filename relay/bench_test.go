package relay

import (
	"context"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// BenchmarkRelay measures the relay against real MinIO and Postgres and a
// kfake cluster:
//
//   - drain: events/s publishing a backlog of segments (appended before the
//     relay starts) until the checkpoint reaches the head;
//   - latency: append→Kafka-ack latency p50/p99 at a paced append rate
//     (default 1,000 events/s) with LISTEN wake-ups.
//
// Run: go test -run '^$' -bench BenchmarkRelay -benchtime 1x ./relay/
// (SLUICE_RELAY_BENCH_EVENTS, SLUICE_RELAY_BENCH_RATE override the sizes).
func BenchmarkRelay(b *testing.B) {
	events := envInt("SLUICE_RELAY_BENCH_EVENTS", 20000)
	rate := envInt("SLUICE_RELAY_BENCH_RATE", 1000)
	for _, flush := range []int{200, 2000} {
		b.Run("drain/flush="+strconv.Itoa(flush), func(b *testing.B) {
			for range b.N {
				e := newEnv(b, 30*time.Second)
				appendAll(b, e.store, 128, mixedEnvelopes(events, 1000, ""))
				opts := e.opts(b)
				opts.Logger = testLogger(b, 8) // quiet
				opts.Config.BatchSize, opts.Config.KafkaFlushBatchSize = 200, flush
				start := time.Now()
				r, err := New(e.store, e.bucket, e.pool, opts)
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() { _ = r.Run(ctx); close(done) }()
				waitFor(b, 5*time.Minute, "drain", func() bool { return e.checkpoint(b).Position == int64(events) })
				el := time.Since(start)
				cancel()
				<-done
				r.Close()
				b.ReportMetric(float64(events)/el.Seconds(), "events/s")
				b.ReportMetric(0, "ns/op")
			}
		})
	}
	b.Run("latency/rate="+strconv.Itoa(rate), func(b *testing.B) {
		for range b.N {
			e := newEnv(b, 30*time.Second)
			var mu sync.Mutex
			started := map[string]time.Time{}
			var lat []time.Duration
			opts := e.opts(b)
			opts.Logger = testLogger(b, 8)
			opts.Config.PollInterval = time.Second // wake-ups come from LISTEN
			opts.ackHook = func(ids []string, at time.Time) {
				mu.Lock()
				defer mu.Unlock()
				for _, id := range ids {
					if s, ok := started[id]; ok {
						lat = append(lat, at.Sub(s))
					}
				}
			}
			_, stop := runRelay(b, e, opts)
			waitFor(b, 30*time.Second, "relay leader", func() bool { return e.checkpoint(b).Position == 0 })
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
				})
			}
			wg.Wait()
			waitFor(b, time.Minute, "all published", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(lat) >= total
			})
			stop()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50_ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99_ms")
			b.ReportMetric(0, "ns/op")
		}
	})
}

func envInt(key string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(key)); err == nil && v > 0 {
		return v
	}
	return def
}
