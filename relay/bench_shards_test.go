package relay

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/kafka"
	"github.com/sluicehq/sluice/shared/observability"
)

// BenchmarkRelayShards measures the relay's backlog drain over a store of
// N = 1, 2 and 4 shards with R = 1 and 2 relays (issue 33,
// docs/scale-out.md#relay-throughput-per-shard-count), against real
// Postgres and MinIO and a kfake cluster:
//
//   - per N, a fresh database and bucket, seeded before the timer through
//     the store's Append (batches of 1,000, 4 at a time) with
//     SLUICE_RELAY_SHARDS_BENCH_EVENTS events (default 50,000) over 5,000
//     aggregates;
//   - per run, a fresh kfake cluster and a relay name of its own (so every
//     shard starts from a zero checkpoint), and R relays, each a Relay
//     with its own Postgres pool, store reader and Prometheus registry, as
//     R processes would be, with the same name and distinct holders, so
//     they share the shards (one leader per shard, docs/relay.md#shards).
//     Both member rows are written before the relays start, so each takes
//     its share of the shards at once, as relays that have been running
//     for a while would: the start-up rebalancing is not in the figure.
//
// Reported:
//
//   - events/s: from the relays' start to the Kafka ack of the last event
//     not acknowledged before (distinct event ids, counted by the relays'
//     ack hook), over all of b.N's runs;
//   - dup-records: records acknowledged more than once (a shard handed
//     over mid-drain re-publishes a few; 0 expected);
//   - shards/relay1, shards/relay2: the shards each relay led at the end
//     of the (last) run; the runs' lists are logged;
//   - segments: the seeded segments (one per group commit; a group holds
//     events of every shard); gets/segment: the segment GETs (whole or
//     ranged) of all the relays' store readers per segment and run: each
//     shard's leader GETs every segment holding an event of its shard, so
//     about the shards a segment holds (1 with one shard);
//   - read-bytes/segment-bytes: the bytes those GETs returned over the
//     seeded segments' bytes, per run: the read amplification. Each
//     shard's leader reads only its own lines of a segment (a ranged
//     GET, eventstore.ShardLog.ReadSegment), so about 1 whatever N is
//     (whole reads made it about N);
//   - floor-events/s: the same records (Router.Record of the stored
//     events) produced by one franz-go client with the relay's producer
//     options to a fresh kfake cluster, all in flight up to the relay's
//     buffer bound, then one flush: what kfake takes on this machine, in
//     the same run; floor-ratio is events/s over it.
//
// Run without -race:
//
//	go test -run '^$' -bench '^BenchmarkRelayShards$' -benchtime 1x ./relay/
func BenchmarkRelayShards(b *testing.B) {
	events := envInt("SLUICE_RELAY_SHARDS_BENCH_EVENTS", 50000)
	for _, n := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("shards=%d", n), func(b *testing.B) {
			// A parent benchmark's body runs once: the seeded store
			// serves both relay counts and all their runs.
			e := newShardBenchEnv(b, n)
			stored := seedInBatches(b, e.store, mixedEnvelopes(events, 5000, ""), 1000, 4)
			for _, r := range []int{1, 2} {
				b.Run(fmt.Sprintf("relays=%d", r), func(b *testing.B) {
					benchRelayDrain(b, e, stored, r)
				})
			}
		})
	}
}

// newShardBenchEnv is an env whose store has n shards (n > 1 on a
// database of its own: newShardedEnv).
func newShardBenchEnv(t testing.TB, n int) *env {
	t.Helper()
	if n == 1 {
		return newEnv(t, 30*time.Second)
	}
	return newShardedEnv(t, n, 30*time.Second)
}

// seedInBatches appends envs through Append in batches of size, writers
// batches at a time, and returns the stored events in envs' order.
func seedInBatches(t testing.TB, st *eventstore.Store, envs []envelope.Envelope, size, writers int) []eventstore.Event {
	t.Helper()
	ctx := ctxT(t, 10*time.Minute)
	out := make([]eventstore.Event, len(envs))
	starts := make(chan int)
	errs := make(chan error, writers)
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for from := range starts {
				to := min(from+size, len(envs))
				res, err := st.Append(ctx, envs[from:to]...)
				if err == nil {
					for i, r := range res {
						if err = r.Err; err != nil {
							break
						}
						out[from+i] = r.Event
					}
				}
				if err != nil {
					errs <- err
					for range starts { // drain, so the sender ends
					}
					return
				}
			}
		})
	}
	for from := 0; from < len(envs); from += size {
		starts <- from
	}
	close(starts)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatalf("seeding the store: %v", err)
	}
	return out
}

// benchRelayDrain runs b.N drains of stored by r relays and reports them
// (see BenchmarkRelayShards).
func benchRelayDrain(b *testing.B, e *env, stored []eventstore.Event, r int) {
	var total, dups int64
	var took, floorTook time.Duration
	var held [][]int
	var gets, read atomic.Int64
	segs := map[string]bool{}
	for _, ev := range stored {
		segs[ev.SegmentKey] = true
	}
	var segBytes int64
	for key := range segs {
		oi, err := e.bucket.Stat(ctxT(b, time.Minute), key)
		if err != nil {
			b.Fatal(err)
		}
		segBytes += oi.Size
	}
	b.ResetTimer()
	for run := range b.N {
		b.StopTimer()
		floorTook += produceFloor(b, stored)
		d, dup, h := drainOnce(b, e, len(stored), r, run, readCount{&gets, &read})
		took += d
		total += int64(len(stored))
		dups += dup
		held = h
		b.Logf("run %d: %d events in %s by %d relay(s), shards held %v, %d records acknowledged twice", run, len(stored), d, r, h, dup)
	}
	b.StopTimer()
	rate := float64(total) / took.Seconds()
	floor := float64(total) / floorTook.Seconds()
	b.ReportMetric(rate, "events/s")
	b.ReportMetric(float64(dups), "dup-records")
	b.ReportMetric(float64(len(segs)), "segments")
	b.ReportMetric(float64(gets.Load())/float64(len(segs)*b.N), "gets/segment")
	b.ReportMetric(float64(read.Load())/float64(segBytes*int64(b.N)), "read-bytes/segment-bytes")
	for i, h := range held {
		b.ReportMetric(float64(len(h)), fmt.Sprintf("shards/relay%d", i+1))
	}
	b.ReportMetric(floor, "floor-events/s")
	b.ReportMetric(rate/floor, "floor-ratio")
	b.ReportMetric(0, "ns/op")
}

// drainOnce starts r relays over e (a fresh kfake cluster, a relay name of
// its own) and returns the time from their start to the ack of the last of
// events distinct event ids (the benchmark timer runs over that span
// only), the records acknowledged more than once, and the shards each
// relay led at the end.
func drainOnce(b *testing.B, e *env, events, r, run int, gets readCount) (time.Duration, int64, [][]int) {
	b.Helper()
	k := testenv.NewKafka(b)
	name := testenv.UniqueName("bench")
	prefix := testenv.UniqueName("b") + "."
	lease := shardTestLease

	var mu sync.Mutex
	seen := make(map[string]struct{}, events)
	var acks atomic.Int64
	var last time.Time
	done := make(chan struct{})
	hook := withAckHook(func(ids []string, at time.Time) {
		acks.Add(int64(len(ids)))
		mu.Lock()
		defer mu.Unlock()
		if len(seen) >= events {
			return
		}
		for _, id := range ids {
			seen[id] = struct{}{}
		}
		if len(seen) >= events {
			last = at
			close(done)
		}
	})

	// The member rows first, so that every relay sees R live replicas in
	// its first balance and takes its share at once.
	holders := make([]string, r)
	for i := range holders {
		holders[i] = fmt.Sprintf("relay%d-%d", i+1, run)
		m := &members{pool: e.pool, name: name, holder: holders[i], ttl: lease}
		if _, err := m.beat(ctxT(b, 10*time.Second)); err != nil {
			b.Fatal(err)
		}
	}
	relays := make([]*Relay, r)
	for i := range relays {
		relays[i] = newBenchRelay(b, e, k, name, prefix, holders[i], lease, hook, gets)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	start := time.Now()
	b.StartTimer()
	for _, rl := range relays {
		wg.Go(func() {
			if err := rl.Run(ctx); err != nil {
				b.Errorf("relay Run: %v", err)
			}
		})
	}
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.StopTimer()
		cancel()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		b.Fatalf("%d of %d events acknowledged within 5 minutes", len(seen), events)
	}
	b.StopTimer()
	held := make([][]int, r)
	for i, rl := range relays {
		held[i] = rl.Held()
	}
	cancel()
	wg.Wait()
	for _, rl := range relays {
		rl.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	return last.Sub(start), acks.Load() - int64(events), held
}

// newBenchRelay is one relay "process" of the benchmark: its own pool (8
// connections), store reader (its segment GETs and their bytes counted in
// gets) and
// registry; quiet logs; the production batch sizes (200 segments per
// cycle, a flush per 200 records).
func newBenchRelay(b *testing.B, e *env, k *testenv.Kafka, name, prefix, holder string, lease time.Duration, hook Option, gets readCount) *Relay {
	b.Helper()
	st, pool := replicaStore(b, e, countingGets{e.bucket, gets})
	a := e.opts(b)
	a.Config.Name, a.Config.Holder = name, holder
	a.Config.BatchSize, a.Config.KafkaFlushBatchSize = 200, 200
	a.Config.LeaderLease = lease
	a.Config.MetricsLogInterval = 0
	a.Deps.Store, a.Deps.Pool = st, pool
	a.Deps.Kafka.Brokers, a.Deps.Kafka.TopicPrefix = k.Brokers, prefix
	a.Deps.Logger = testLogger(b, slog.LevelWarn)
	a.Deps.Registerer, a.Deps.Health = prometheus.NewRegistry(), observability.NewHealth()
	a.Opts = append(a.Opts, hook)
	rl, err := a.new()
	if err != nil {
		b.Fatal(err)
	}
	return rl
}

// produceFloor produces the records of stored (the relay's Router.Record,
// the relay's topics with 4 partitions) to a fresh kfake cluster with one
// client of the relay's producer options, all in flight up to the relay's
// buffer bound, then one flush, and returns the time from the first
// produce to the flush's end.
func produceFloor(b *testing.B, stored []eventstore.Event) time.Duration {
	b.Helper()
	tk := testenv.NewKafka(b)
	kc := kafkaWithDefaults(kafka.Config{Brokers: tk.Brokers, TopicPrefix: testenv.UniqueName("f") + ".", TopicPartitions: 4, ReplicationFactor: 1})
	cl, err := kafka.NewClient(kc, kafka.MaxBuffered((pipelineDepth+1)*200))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx := ctxT(b, 5*time.Minute)
	if err := kafka.EnsureTopics(ctx, cl, kc, kc.CommandsTopic, kc.EventsTopic); err != nil {
		b.Fatal(err)
	}
	router := NewRouter(kc.CommandsTopic, kc.EventsTopic, nil)
	recs := make([]*kgo.Record, len(stored))
	for i, ev := range stored {
		recs[i] = router.Record(ev, "")
	}
	var failed atomic.Int64
	start := time.Now()
	for _, rec := range recs {
		cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.Add(1)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	took := time.Since(start)
	if f := failed.Load(); f > 0 {
		b.Fatalf("floor: %d of %d records failed", f, len(recs))
	}
	return took
}

// readCount counts GETs and the bytes they returned.
type readCount struct {
	gets, bytes *atomic.Int64
}

// countingGets is a bucket that counts its GETs, whole and ranged, and
// the bytes they return (a store reader's: segments).
type countingGets struct {
	objstore.Bucket
	n readCount
}

func (c countingGets) Get(ctx context.Context, key string) ([]byte, objstore.ObjectInfo, error) {
	body, oi, err := c.Bucket.Get(ctx, key)
	c.n.gets.Add(1)
	c.n.bytes.Add(int64(len(body)))
	return body, oi, err
}

func (c countingGets) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	body, err := c.Bucket.GetRange(ctx, key, off, n)
	c.n.gets.Add(1)
	c.n.bytes.Add(int64(len(body)))
	return body, err
}
