package worker

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/shared/claim"
)

// TestRoundsInFlight: while a round is stuck in its handler, a record of
// another aggregate that arrives later is handled at once in a round of
// its own (with RoundsInFlight 1 it would wait for the stuck one); the next
// record of the stuck aggregate waits for it (per-aggregate order); and no
// offset is committed past the stuck record until it is done.
func TestRoundsInFlight(t *testing.T) {
	brokers, topic, produceRecs := oneTopic(t, "rounds-")
	produce := func(agg string, seq int64) { produceRecs(thingRecord(t, "", agg, seq, seq)) }

	var (
		c       *Consumer
		mu      sync.Mutex
		handled []string // "agg/seq" in handling order
		started = make(chan struct{}, 1)
		release = make(chan struct{})
	)
	committed := func() int64 { return committedOffset(c, topic) }
	h := batchFunc(func(ctx context.Context, recs []*Record) []BatchResult {
		out := make([]BatchResult, len(recs))
		for i, r := range recs {
			name := fmt.Sprintf("%s/%d", r.Envelope.AggregateID, r.Envelope.SequenceNumber)
			if name == "stuck/1" {
				select {
				case started <- struct{}{}:
				default:
				}
				select {
				case <-release:
				case <-ctx.Done():
					out[i].Err = ctx.Err()
					continue
				}
			}
			mu.Lock()
			handled = append(handled, name)
			mu.Unlock()
			out[i].Outcome = claim.Applied()
		}
		return out
	})
	logs := newMsgCounter()
	c, _ = startConsumer(t, brokers, topic, Config{}, Deps{Registry: &fakeRegistry{attempts: map[string]int{}}, Handler: h, Logger: slog.New(logs)})
	has := func(name string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, h := range handled {
			if h == name {
				return true
			}
		}
		return false
	}
	// doneAt reports whether the record at offset is finished and its
	// round over: from then on every commit would cover it if it did not
	// stop at the first record in flight.
	doneAt := func(offset int64) bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if ps := c.parts[topic][0]; ps != nil {
			for _, it := range ps.queue {
				if it.rec.Offset == offset {
					return !it.busy && it.st == stDone
				}
			}
		}
		return false
	}

	produce("stuck", 1) // offset 0
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the first record was never handled")
	}
	// stuck/2 comes before free/1 in the partition, so the turn that
	// selects free/1 has stuck/2 in its queue too: handling free/1 is the
	// evidence that a round was selected with stuck/2 runnable but for
	// its aggregate.
	produce("stuck", 2) // offset 1
	produce("free", 1)  // offset 2
	testenv.WaitFor(t, 20*time.Second, "the other aggregate handled while the first round is stuck", func() bool { return has("free/1") })
	if has("stuck/2") {
		t.Fatal("stuck/2 handled before stuck/1 finished")
	}
	// free/1's round over, then two more turns logged: the first of them
	// polled, selected and committed after it, the second began after that
	// commit. (The deadlines are hang guards.)
	testenv.WaitFor(t, 20*time.Second, "free/1 done and its round over", func() bool { return doneAt(2) })
	polls := logs.count("poll")
	testenv.WaitFor(t, 20*time.Second, "two more turns of the loop", func() bool { return logs.count("poll") >= polls+2 })
	if has("stuck/2") {
		t.Fatal("stuck/2 handled before stuck/1 finished")
	}
	if got := committed(); got > 0 {
		t.Fatalf("committed offset %d while offset 0 is in flight", got)
	}
	close(release)
	testenv.WaitFor(t, 20*time.Second, "every record committed", func() bool { return committed() == 3 })
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(handled) != "[free/1 stuck/1 stuck/2]" {
		t.Errorf("handling order %v, want [free/1 stuck/1 stuck/2]", handled)
	}
}

// TestConcurrencyAcrossRounds: WORKER_CONCURRENCY bounds the handler
// goroutines of all rounds in flight together. With Concurrency 1, a
// record of another aggregate that arrives in a later round does not start
// while the first round's handler runs (with a semaphore per round it
// would), and runs once that handler returns.
func TestConcurrencyAcrossRounds(t *testing.T) {
	brokers, topic, produceRecs := oneTopic(t, "conc-")
	produce := func(agg string) { produceRecs(thingRecord(t, "", agg, 1, 1)) }
	var (
		mu      sync.Mutex
		started []string
		release = make(chan struct{})
	)
	h := HandlerFunc(func(ctx context.Context, rec *Record) (claim.Outcome, error) {
		mu.Lock()
		started = append(started, rec.Envelope.AggregateID)
		mu.Unlock()
		if rec.Envelope.AggregateID == "first" {
			select {
			case <-release:
			case <-ctx.Done():
				return claim.Outcome{}, ctx.Err()
			}
		}
		return claim.Applied(), nil
	})
	has := func(agg string) bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(started, agg)
	}
	reg := &fakeRegistry{attempts: map[string]int{}}
	startConsumer(t, brokers, topic, Config{Settings: Settings{Concurrency: 1}}, Deps{Registry: reg, Handler: h})
	produce("first")
	testenv.WaitFor(t, 20*time.Second, "the first handler running", func() bool { return has("first") })
	secondID := uuid.NewString()
	produceRecs(thingRecord(t, secondID, "second", 1, 1))
	// Evidence that a later round took "second" as far as it may: claimed,
	// and its handle parked on the shared slot (or, were the slots per
	// round, its handler started — caught below).
	testenv.WaitFor(t, 20*time.Second, "a later round claimed second and waits for a slot", func() bool {
		reg.mu.Lock()
		claimed := reg.attempts[secondID] > 0
		reg.mu.Unlock()
		return claimed && (has("second") || handleWaitsForSlot())
	})
	if has("second") {
		t.Fatal("a second handler started while the first held the only slot (Concurrency 1)")
	}
	close(release)
	testenv.WaitFor(t, 20*time.Second, "the second handler after the first", func() bool { return has("second") })
}

// handleWaitsForSlot reports whether a goroutine of this process is
// blocked in Consumer.handle on a channel send: a round waiting for a
// handler slot (the semaphore shared by the rounds in flight).
func handleWaitsForSlot() bool {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		header, _, _ := strings.Cut(g, "\n")
		if strings.Contains(header, "[chan send") && strings.Contains(g, "/worker.(*Consumer).handle(") {
			return true
		}
	}
	return false
}
