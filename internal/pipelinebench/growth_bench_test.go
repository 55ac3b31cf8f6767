package pipelinebench

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/eventstore/eventstoretest"
	"github.com/sluicehq/sluice/internal/testenv"
)

// waitReadable waits until k's document is readable and returns when it
// became so.
func (d *deployment) waitReadable(b testing.TB, k docKey, within time.Duration) time.Time {
	b.Helper()
	var at time.Time
	testenv.WaitForEvery(b, within, time.Millisecond, fmt.Sprintf("document %s at %d readable", k.id, k.version), func() bool {
		t, ok := d.readableAt(k)
		at = t
		return ok
	})
	return at
}

// BenchmarkPatchLatency measures a merge patch of one instance whose
// aggregate holds 1, 1,000 and 10,000 commands (each with its domain event
// in its slot), on the deployment of BenchmarkPipelineProcesses (file
// backend): request → 202 (api-*) and request → the document at the
// patch's sequence readable in Elasticsearch (readable-*), one patch at a
// time. The aggregate is grown between the sizes by patches sent 16 at a
// time through the API, the whole pipeline applying each, and the
// measured patches stay on it. Sizes above SLUICE_BENCH_GROWTH_MAX are left
// out (testenv.GrowthSizes).
func BenchmarkPatchLatency(b *testing.B) {
	d := deploy(b, backendFile, deployOptions{})
	ctx := context.Background()
	// Warm-up on another instance: connections, consumer groups, indices.
	w, err := d.create(ctx, "warmup", 0)
	if err != nil {
		b.Fatal(err)
	}
	d.waitReadable(b, w, time.Minute)
	for i := range 20 {
		if w, err = d.patch(ctx, "warmup", i); err != nil {
			b.Fatal(err)
		}
		d.waitReadable(b, w, time.Minute)
	}
	const id = "long-lived"
	k, err := d.create(ctx, id, 0)
	if err != nil {
		b.Fatal(err)
	}
	d.waitReadable(b, k, time.Minute)
	events := k.version
	for _, n := range testenv.GrowthSizes(1, 1000, 10_000) {
		if grow := int64(n) - events; grow > 0 {
			events = d.grow(b, id, int(grow))
		}
		b.Run("events="+testenv.SizeName(n), func(b *testing.B) {
			var api, readable []time.Duration
			for i := range b.N {
				t0 := time.Now()
				k, err := d.patch(ctx, id, i)
				if err != nil {
					b.Fatal(err)
				}
				api = append(api, time.Since(t0))
				at := d.waitReadable(b, k, time.Minute)
				readable = append(readable, at.Sub(t0))
				events = k.version
			}
			slices.Sort(api)
			slices.Sort(readable)
			b.ReportMetric(ms(quantile(api, 0.5)), "api-p50-ms")
			b.ReportMetric(ms(quantile(api, 0.99)), "api-p99-ms")
			b.ReportMetric(ms(quantile(readable, 0.5)), "readable-p50-ms")
			b.ReportMetric(ms(quantile(readable, 0.99)), "readable-p99-ms")
			b.ReportMetric(float64(events), "aggregate-events")
		})
	}
}

// grow sends n patches of instance id, 16 at a time, waits until the last
// is readable and returns the aggregate's last sequence.
func (d *deployment) grow(b testing.TB, id string, n int) int64 {
	b.Helper()
	ctx := context.Background()
	var next, last atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				k, err := d.patch(ctx, id, int(i))
				if err != nil {
					failed.CompareAndSwap(nil, err.Error())
					return
				}
				for cur := last.Load(); k.version > cur && !last.CompareAndSwap(cur, k.version); cur = last.Load() {
				}
			}
		})
	}
	wg.Wait()
	if f := failed.Load(); f != nil {
		b.Fatalf("growing %s: %v", id, f)
	}
	k, err := d.patch(ctx, id, 0) // the last one, after every other was accepted
	if err != nil {
		b.Fatal(err)
	}
	d.waitReadable(b, k, 20*time.Minute)
	return k.version
}

// BenchmarkStartup measures how long each service takes to start with
// 10,000 and 1,000,000 instance aggregates in the store (sizes above
// SLUICE_BENCH_GROWTH_MAX left out): from the exec of the binary to
// /readyz answering 200 (ready-ms), and for the instance worker also to
// its start-up check of the read model done ("instance worker running",
// running-ms). The store is seeded straight into its index
// (eventstoretest.SeedCommands: one command per aggregate, no segment),
// the relay's checkpoint is moved past the seed, and one command is run
// through the pipeline first, so that the instance worker has worked and
// its start-up check runs. File backend; Kafka and Elasticsearch as in
// BenchmarkPipelineProcesses. Each service is stopped (SIGTERM) and
// started again per iteration, the others running.
func BenchmarkStartup(b *testing.B) {
	for _, n := range testenv.GrowthSizes(10_000, 1_000_000) {
		b.Run("aggregates="+testenv.SizeName(n), func(b *testing.B) {
			d := deploy(b, backendFile, deployOptions{logLevel: "info", beforeServices: func(d *deployment) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
				defer cancel()
				last, err := eventstoretest.SeedCommands(ctx, d.pool, benchDB, benchClass, int64(n))
				if err != nil {
					b.Fatal(err)
				}
				cmd := exec.Command(d.bin, "relay", "checkpoint", "set", "--position", strconv.FormatInt(last, 10), "--yes")
				cmd.Env = childEnv(d.base)
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("relay checkpoint set: %v\n%s", err, out)
				}
			}})
			k, err := d.create(context.Background(), "probe", 1)
			if err != nil {
				b.Fatal(err)
			}
			d.waitReadable(b, k, time.Minute)
			for _, kind := range services {
				b.Run(kind, func(b *testing.B) {
					var ready, running []time.Duration
					for range b.N {
						d.stop(kind)
						var runningAt atomic.Int64
						start := time.Now()
						d.start(kind, func(line string, at time.Time) {
							if strings.Contains(line, `"msg":"instance worker running"`) {
								runningAt.CompareAndSwap(0, at.UnixNano())
							}
						})
						d.waitReady(kind, 10*time.Minute)
						ready = append(ready, time.Since(start))
						if kind == groupInstance {
							testenv.WaitForEvery(b, 10*time.Minute, time.Millisecond, "instance worker running", func() bool { return runningAt.Load() != 0 })
							running = append(running, time.Unix(0, runningAt.Load()).Sub(start))
						}
					}
					slices.Sort(ready)
					b.ReportMetric(ms(quantile(ready, 0.5)), "ready-ms")
					if len(running) > 0 {
						slices.Sort(running)
						b.ReportMetric(ms(quantile(running, 0.5)), "running-ms")
					}
					b.ReportMetric(0, "ns/op")
				})
			}
		})
	}
}
