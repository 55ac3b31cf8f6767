package relay

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/internal/testenv"
)

// ackHold holds the answers to a relay's produce requests while on: the
// broker has written the records, the producer has read its answer, and
// the relay's callbacks wait until release. It is a kgo hook
// (HookBrokerRead runs on the connection's read path, before the answer
// is handed to the records' promises).
type ackHold struct {
	on       atomic.Bool
	held     chan struct{} // a value when an answer is held
	release  chan struct{} // closed to let every held answer through
	released sync.Once
}

func newAckHold() *ackHold {
	return &ackHold{held: make(chan struct{}, 1), release: make(chan struct{})}
}

func (h *ackHold) OnBrokerRead(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key != int16(kmsg.Produce) || err != nil || !h.on.Load() {
		return
	}
	select {
	case h.held <- struct{}{}:
	default:
	}
	<-h.release
}

// let releases every held answer (and those to come).
func (h *ackHold) let() {
	h.released.Do(func() {
		h.on.Store(false)
		close(h.release)
	})
}

// waitHeld waits until an answer is held (a hang guard, not an assertion).
func (h *ackHold) waitHeld(t *testing.T) {
	t.Helper()
	select {
	case <-h.held:
	case <-time.After(time.Minute):
		t.Fatal("no produce answer was held within a minute")
	}
}

// exactlyOnce fails the test for every stored event not published exactly
// once (verify checks presence, content and order).
func exactlyOnce(t *testing.T, stored map[string]eventstore.Event, seen map[string]int) {
	t.Helper()
	dups := 0
	for id, n := range seen {
		if n != 1 {
			dups++
			if dups <= 5 {
				ev := stored[id].Envelope
				t.Errorf("event %s (%s %s, position %d) published %d times, want once", id, ev.AggregateType, ev.AggregateID, ev.Position, n)
			}
		}
	}
	if dups > 0 {
		t.Errorf("%d of %d events published more than once across a graceful handover", dups, len(stored))
	}
}

// A graceful stop (SIGTERM: Run's context cancelled) of the one-shard
// relay while a produce batch is in flight re-publishes nothing: the
// records Kafka has written but whose acknowledgements have not reached
// the relay yet are waited for, marked done, and covered by the final
// checkpoint (with the epoch) before the lease is released; the standby
// that takes over starts after them. Every event is on Kafka exactly
// once. Before the fix the leader stopped without waiting, its final
// checkpoint stopped before the batch, and the standby published the
// batch again.
func TestGracefulStopWhilePublishingRepublishesNothing(t *testing.T) {
	e := newEnv(t, 30*time.Second)
	hold := newAckHold()
	t.Cleanup(hold.let)
	a := e.opts(t)
	a.Config.Holder = "relay-a"
	a.Config.KafkaFlushTimeout = 30 * time.Second // the drain's bound: far above a held answer
	a.Opts = append(a.Opts, WithKafkaOpts(kgo.WithHooks(hold)))
	ra, err := a.new()
	if err != nil {
		t.Fatal(err)
	}
	ctx, sigterm := context.WithCancel(context.Background())
	doneA := make(chan struct{})
	go func() {
		defer close(doneA)
		if err := ra.Run(ctx); err != nil {
			t.Errorf("relay-a: Run: %v", err)
		}
	}()
	t.Cleanup(func() {
		sigterm()
		hold.let()
		<-doneA
		ra.Close()
	})
	stored := appendAll(t, e.store, 4, mixedEnvelopes(100, 20, ""))
	testenv.WaitFor(t, time.Minute, "relay-a publishing the first appends", func() bool { return e.checkpoint(t).Position == maxPosition(stored) })

	b := e.opts(t)
	b.Config.Holder = "relay-b"
	b.Config.KafkaFlushTimeout = 30 * time.Second
	runRelay(t, e, b) // the standby

	hold.on.Store(true)
	maps.Copy(stored, appendAll(t, e.store, 4, mixedEnvelopes(400, 40, "")))
	hold.waitHeld(t)
	sigterm()
	hold.let()
	<-doneA

	testenv.WaitFor(t, time.Minute, "relay-b publishing to the head", func() bool { return e.checkpoint(t).Position == maxPosition(stored) })
	if cp := e.checkpoint(t); cp.Holder != "relay-b" {
		t.Errorf("checkpoint written by %s, want the standby relay-b", cp.Holder)
	}
	exactlyOnce(t, stored, verify(t, e, stored, e.consumeAll(t, e.commandsTopic(), e.eventsTopic()), ""))
}

// A shard released to a replica that joins re-publishes nothing, even
// while its leader is publishing: one replica leads all four shards,
// the acknowledgements of its produce batches are held (written by the
// broker, not yet seen by the relay), a second replica joins, the first
// releases two shards (their leaderships cancelled while the batches are
// in flight) and only then the acknowledgements arrive. Each released
// shard's leader waits for them, checkpoints past them, then releases
// its lease; the new leader starts after them. Every event is on Kafka
// exactly once over the whole run.
func TestShardReleasedWhilePublishingRepublishesNothing(t *testing.T) {
	const shards = 4
	e := newShardedEnv(t, shards, 30*time.Second)
	hold := newAckHold()
	t.Cleanup(hold.let)
	cancelled := make(chan []int, 8)
	a := startReplica(t, e, "replica-a", WithKafkaOpts(kgo.WithHooks(hold)), withReleased(func(shs []int) {
		cancelled <- shs
	}))
	testenv.WaitFor(t, time.Minute, "one replica leading every shard", func() bool { ok, _ := balanced(t, e, shards, a); return ok })
	stored := appendAll(t, e.store, 8, mixedEnvelopes(200, 40, ""))
	testenv.WaitFor(t, time.Minute, "every shard published to its head", func() bool { return e.allPublished(t) })

	hold.on.Store(true)
	maps.Copy(stored, appendAll(t, e.store, 8, mixedEnvelopes(800, 80, "")))
	hold.waitHeld(t)
	b := startReplica(t, e, "replica-b")
	var shs []int
	select {
	case shs = <-cancelled:
	case <-time.After(time.Minute):
		t.Fatal("replica-a released no shard within a minute of replica-b joining")
	}
	t.Logf("replica-a released shards %v with acknowledgements held", shs)
	hold.let()

	testenv.WaitFor(t, 2*time.Minute, "two replicas sharing the shards", func() bool { ok, _ := balanced(t, e, shards, a, b); return ok })
	testenv.WaitFor(t, time.Minute, "every shard published to its head", func() bool { return e.allPublished(t) })
	exactlyOnce(t, stored, verify(t, e, stored, e.consumeAll(t, e.commandsTopic(), e.eventsTopic()), ""))
}

// maxPosition is the highest position of stored (a store of one shard:
// its head).
func maxPosition(stored map[string]eventstore.Event) int64 {
	var m int64
	for _, ev := range stored {
		m = max(m, ev.Envelope.Position)
	}
	return m
}
