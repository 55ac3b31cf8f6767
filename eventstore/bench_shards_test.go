package eventstore

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/shared/envelope"
)

// BenchmarkAppendShards measures group-commit appends to a store of 1, 2
// and 4 shards (issue 33, docs/scale-out.md#what-limits-appends) against
// real MinIO and Postgres: 16 and 128 concurrent appenders over 100000
// aggregates through one writer (one Store, as one API process), and 128
// through two writers (two Stores with their own pools on the same
// database and bucket, as two API processes). Each case has a fresh
// database and bucket. Reported besides events/s, p50/p99 latency and the
// group stages of BenchmarkAppend (summed over the writers):
//
//   - head-us/group: the time a group waited for its shards' head rows
//     (sluice_eventstore_head_lock_wait_seconds summed over its shards),
//     mean per group;
//   - head-mean-us, head-p99-us: the same histogram per head row taken,
//     mean (exact: sum/count) and p99 (interpolated in the histogram's
//     buckets, which grow by 4x: a coarse figure);
//   - head-share-pct: head-us/group as a share of reserve-ms (the part of
//     a reservation's round trips spent waiting for head rows);
//   - shards/group: head rows a group took (1 with one shard).
//
// The names of BenchmarkAppend's cases are unchanged, so bench-ab
// comparisons with revisions from before shards keep matching. Run without
// -race:
//
//	go test -run '^$' -bench '^BenchmarkAppendShards$' -benchtime 3s ./eventstore/
func BenchmarkAppendShards(b *testing.B) {
	loads := []struct {
		appenders int
		writers   []int
	}{{16, []int{1}}, {128, []int{1, 2}}}
	for _, n := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("shards=%d", n), func(b *testing.B) {
			for _, l := range loads {
				b.Run(fmt.Sprintf("appenders=%d", l.appenders), func(b *testing.B) {
					parent := b
					for _, w := range l.writers {
						var stores []*Store // made on the first run, kept across b.N's runs
						b.Run(fmt.Sprintf("writers=%d", w), func(b *testing.B) {
							if stores == nil {
								stores = shardWriters(cleanupOn{B: b, parent: parent}, n, w)
							}
							benchWriters(b, l.appenders, stores)
						})
					}
				})
			}
		})
	}
}

// cleanupOn is a leaf benchmark whose cleanups run when parent ends: what
// the leaf makes on its first run lives through b.N's later runs (a
// leaf's own cleanups run after each).
type cleanupOn struct {
	*testing.B
	parent *testing.B
}

func (c cleanupOn) Cleanup(f func()) { c.parent.Cleanup(f) }

// shardWriters opens writers Stores of n shards on a fresh database and
// bucket, each with a pool of its own (16 connections, as newEnv's).
func shardWriters(t testing.TB, n, writers int) []*Store {
	t.Helper()
	e := newEnv(t)
	cfg := testConfig()
	cfg.Shards = n
	stores := []*Store{e.store(t, named(cfg, "bench-w0"))}
	for w := 1; w < writers; w++ {
		pc, err := pgxpool.ParseConfig(e.url)
		if err != nil {
			t.Fatal(err)
		}
		pc.MaxConns = 16
		pool, err := pgxpool.NewWithConfig(context.Background(), pc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		s, err := New(named(cfg, fmt.Sprintf("bench-w%d", w)), Deps{Pool: pool, Bucket: e.bucket})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		stores = append(stores, s)
	}
	return stores
}

// benchWriters runs the appenders spread round-robin over the writers
// and reports the stages and the head lock wait of the run.
func benchWriters(b *testing.B, appenders int, stores []*Store) {
	stage := make([]stageSnapshot, len(stores))
	wait := make([]headWaitSnapshot, len(stores))
	for i, s := range stores {
		stage[i], wait[i] = s.stats.snapshot(), readHeadWait(b, s)
	}
	var next atomic.Uint64
	runAppendersOver(b, appenders, 100000, func(ctx context.Context, ev envelope.Envelope) error {
		_, err := stores[next.Add(1)%uint64(len(stores))].AppendOne(ctx, ev)
		return err
	})
	var st stageSnapshot
	var hw headWaitSnapshot
	for i, s := range stores {
		st = st.add(s.stats.snapshot().sub(stage[i]))
		hw = hw.add(readHeadWait(b, s).sub(wait[i]))
	}
	reportStages(b, st)
	if st.groups == 0 {
		return
	}
	if hw.count < uint64(st.groups) {
		b.Fatalf("sluice_eventstore_head_lock_wait_seconds observed %d head rows for %d groups: every group takes at least one", hw.count, st.groups)
	}
	us := func(sec float64) float64 { return sec * 1e6 }
	perGroup := us(hw.sum) / float64(st.groups)
	b.ReportMetric(perGroup, "head-us/group")
	b.ReportMetric(us(hw.sum)/float64(hw.count), "head-mean-us")
	b.ReportMetric(us(hw.quantile(0.99)), "head-p99-us")
	b.ReportMetric(float64(hw.count)/float64(st.groups), "shards/group")
	if st.reserve > 0 {
		b.ReportMetric(100*hw.sum/st.reserve.Seconds(), "head-share-pct")
	}
}

func (a stageSnapshot) add(b stageSnapshot) stageSnapshot {
	return stageSnapshot{
		groups: a.groups + b.groups, events: a.events + b.events, lookups: a.lookups + b.lookups,
		gather: a.gather + b.gather, reserve: a.reserve + b.reserve,
		put: a.put + b.put, commit: a.commit + b.commit, inFlight: a.inFlight + b.inFlight,
	}
}

// headWaitSnapshot is sluice_eventstore_head_lock_wait_seconds summed
// over a store's shards: count, sum and the cumulative bucket counts.
type headWaitSnapshot struct {
	count   uint64
	sum     float64
	bounds  []float64
	buckets []uint64
}

func readHeadWait(t testing.TB, s *Store) headWaitSnapshot {
	t.Helper()
	ch := make(chan prometheus.Metric, 2*MaxShards)
	s.m.headWait.Collect(ch)
	close(ch)
	var out headWaitSnapshot
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		h := d.GetHistogram()
		out = out.add(headWaitSnapshot{count: h.GetSampleCount(), sum: h.GetSampleSum(), bounds: bucketBounds(h), buckets: bucketCounts(h)})
	}
	return out
}

func bucketBounds(h *dto.Histogram) []float64 {
	out := make([]float64, len(h.GetBucket()))
	for i, bk := range h.GetBucket() {
		out[i] = bk.GetUpperBound()
	}
	return out
}

func bucketCounts(h *dto.Histogram) []uint64 {
	out := make([]uint64, len(h.GetBucket()))
	for i, bk := range h.GetBucket() {
		out[i] = bk.GetCumulativeCount()
	}
	return out
}

// add sums two snapshots of the same buckets (or one empty).
func (a headWaitSnapshot) add(b headWaitSnapshot) headWaitSnapshot {
	if a.bounds == nil {
		return b
	}
	out := headWaitSnapshot{count: a.count + b.count, sum: a.sum + b.sum, bounds: a.bounds, buckets: make([]uint64, len(a.buckets))}
	for i := range out.buckets {
		out.buckets[i] = a.buckets[i]
		if i < len(b.buckets) {
			out.buckets[i] += b.buckets[i]
		}
	}
	return out
}

func (a headWaitSnapshot) sub(b headWaitSnapshot) headWaitSnapshot {
	out := headWaitSnapshot{count: a.count - b.count, sum: a.sum - b.sum, bounds: a.bounds, buckets: make([]uint64, len(a.buckets))}
	for i := range out.buckets {
		out.buckets[i] = a.buckets[i]
		if i < len(b.buckets) {
			out.buckets[i] -= b.buckets[i]
		}
	}
	return out
}

// quantile interpolates linearly within the bucket that holds the q-th
// observation, as PromQL's histogram_quantile; above the last bound it
// answers the last bound.
func (a headWaitSnapshot) quantile(q float64) float64 {
	if a.count == 0 || len(a.bounds) == 0 {
		return math.NaN()
	}
	rank := q * float64(a.count)
	lower, below := 0.0, uint64(0)
	for i, up := range a.bounds {
		if float64(a.buckets[i]) >= rank {
			in := a.buckets[i] - below
			if in == 0 {
				return up
			}
			return lower + (up-lower)*(rank-float64(below))/float64(in)
		}
		lower, below = up, a.buckets[i]
	}
	return a.bounds[len(a.bounds)-1]
}
