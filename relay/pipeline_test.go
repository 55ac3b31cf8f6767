package relay

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/shared/kafka"
)

// gatedBucket holds every checkpoint Put (the relay's conditional writes)
// while the gate is closed; everything else passes through.
type gatedBucket struct {
	objstore.Bucket
	key string

	mu     sync.Mutex
	open   chan struct{} // closed when the gate opens
	puts   int           // Puts started
	waiter int           // Puts waiting at the gate
}

func newGatedBucket(b objstore.Bucket, key string) *gatedBucket {
	return &gatedBucket{Bucket: b, key: key, open: make(chan struct{})}
}

func (g *gatedBucket) Put(ctx context.Context, key string, body []byte, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	if key == g.key {
		g.mu.Lock()
		g.puts++
		g.waiter++
		open := g.open
		g.mu.Unlock()
		select {
		case <-open:
		case <-ctx.Done():
		}
		g.mu.Lock()
		g.waiter--
		g.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return objstore.ObjectInfo{}, err
		}
	}
	return g.Bucket.Put(ctx, key, body, opts)
}

func (g *gatedBucket) release() { close(g.open) }

func (g *gatedBucket) waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiter
}

// TestCheckpointStallBoundsProduction: while checkpoint writes hang, the
// relay keeps producing only until CheckpointMaxRecords records are not
// covered by a durable checkpoint, then waits; when the write completes it
// goes on, and a clean run stays exactly once.
func TestCheckpointStallBoundsProduction(t *testing.T) {
	const n, maxRecords = 1200, 300
	e := newEnv(t, 30*time.Second)
	stored := appendAll(t, e.store, 16, mixedEnvelopes(n, 20, ""))
	gate := newGatedBucket(e.bucket, "checkpoints/test.json")
	opts := e.opts(t)
	opts.Config.KafkaFlushBatchSize = 100
	opts.Config.CheckpointMaxRecords = maxRecords
	opts.Deps.Bucket = gate
	r, err := opts.new()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		r.Close()
	})

	testenv.WaitFor(t, 30*time.Second, "a checkpoint write to hang", func() bool { return gate.waiting() == 1 })
	// Give the relay time to run into the bound.
	testenv.WaitFor(t, 30*time.Second, "production to reach the bound", func() bool { return sumVec(r.m.published) >= maxRecords })
	// Evidence instead of a pause: the walk waits in ensureBudget (at the
	// bound, for the hanging write), so nothing more can be produced.
	testenv.WaitFor(t, 30*time.Second, "the relay waiting at the bound", func() bool { return goroutineIn("/relay.(*Relay).ensureBudget(") })
	if got := sumVec(r.m.published); got != maxRecords {
		t.Fatalf("published %v records while no checkpoint after the claim was durable, want exactly the bound %d", got, maxRecords)
	}
	if cp := e.checkpoint(t); cp.Position != 0 {
		t.Fatalf("checkpoint %d while its writes hang", cp.Position)
	}
	gate.release()
	testenv.WaitFor(t, time.Minute, "catch up", func() bool { return e.checkpoint(t).Position == n })
	recs := e.consumeAll(t, e.commandsTopic(), e.eventsTopic())
	for id, c := range verifyAtLeastOnce(t, stored, recs) {
		if c != 1 {
			t.Errorf("event %s published %d times in a run without a crash", id, c)
		}
	}
}

// TestBatchDone: a batch's done channel closes once it is sealed and every
// record was answered, whatever the order of the two.
func TestBatchDone(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kafka.NewClient(kafka.Config{Brokers: c.ListenAddrs()}, kafka.MaxBuffered(100))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := ctxT(t, 30*time.Second)
	r := &Relay{cfg: Config{KafkaFlushBatchSize: 10}}
	cases := []struct {
		name        string
		records     int
		sealFirst   bool // seal right after producing, before the acks
		wantRecords int
	}{
		{"empty", 0, true, 0},
		{"seal after acks", 5, false, 5},
		{"seal before acks", 5, true, 5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := r.newBatch()
			for i := range tc.records {
				b.produce(ctx, cl, &kgo.Record{Topic: "t", Value: []byte("v")}, int64(i+1), "id", "", false)
			}
			if !tc.sealFirst {
				if err := cl.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
			b.seal()
			b.seal() // idempotent
			select {
			case <-b.done:
			case <-ctx.Done():
				t.Fatal("batch never done")
			}
			if b.len() != tc.wantRecords {
				t.Errorf("%d records, want %d", b.len(), tc.wantRecords)
			}
			for _, pr := range b.recs {
				if pr.err != nil {
					t.Errorf("record %d: %v", pr.pos, pr.err)
				}
			}
		})
	}
}

// goroutineIn reports whether a goroutine of this process has fn (a
// qualified function name as stack traces print it) on its stack.
func goroutineIn(fn string) bool {
	buf := make([]byte, 8<<20)
	return strings.Contains(string(buf[:runtime.Stack(buf, true)]), fn)
}
