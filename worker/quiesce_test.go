package worker

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/failure"
)

// flagPause is a PauseSource an operator flips in memory.
type flagPause struct{ on atomic.Bool }

func (p *flagPause) Paused(context.Context, string) (bool, error) { return p.on.Load(), nil }

// TestPauseTakesEffectOnceFetchedRecordsAreDone: sluice_worker_paused (and
// Quiesced) turns 1 only once the pause has taken effect, not when the
// flag is read: while a record fetched before the pause is still being
// handled it stays 0 (turns of the loop after the flag was read show it
// had the chance to change); once that record is done and committed it
// turns 1, and from then on a record produced meanwhile is not handled
// (turns of the loop after it was produced show the worker went on
// polling). After the resume the gauge is 0 again and the held record is
// handled, once.
func TestPauseTakesEffectOnceFetchedRecordsAreDone(t *testing.T) {
	brokers, topic, produce := oneTopic(t, "quiesce-")
	var (
		mu      sync.Mutex
		applied = map[string]int{}
	)
	isApplied := func(id string) int {
		mu.Lock()
		defer mu.Unlock()
		return applied[id]
	}
	slowID := uuid.NewString()
	started, release := make(chan struct{}), make(chan struct{})
	h := HandlerFunc(func(_ context.Context, rec *Record) (claim.Outcome, error) {
		if rec.Envelope.EventID == slowID {
			close(started)
			<-release
		}
		mu.Lock()
		defer mu.Unlock()
		applied[rec.Envelope.EventID]++
		return claim.Applied(), nil
	})
	pause := &flagPause{}
	logs := newMsgCounter()
	c, _ := startConsumer(t, brokers, topic, Config{Settings: Settings{PausePoll: 20 * time.Millisecond}},
		Deps{Registry: &fakeRegistry{attempts: map[string]int{}}, Handler: h, Pause: pause, Logger: slog.New(logs)})
	unblock := sync.OnceFunc(func() { close(release) })
	t.Cleanup(unblock) // before the consumer's own cleanup: a failed test does not leave it in the handler
	gauge := func() float64 { return testutil.ToFloat64(c.m.paused.WithLabelValues("h")) }
	// turns waits for two more turns of the loop: the second began after
	// the first one's flow control, which ran after the call.
	turns := func(what string) {
		t.Helper()
		polls := logs.count("poll")
		testenv.WaitFor(t, 20*time.Second, "two more turns of the loop "+what, func() bool { return logs.count("poll") >= polls+2 })
	}

	first := uuid.NewString()
	produce(thingRecord(t, first, "a", 1, 1))
	testenv.WaitFor(t, 20*time.Second, "the first record committed", func() bool { return committedOffset(c, topic) == 1 })
	if g := gauge(); g != 0 || c.Quiesced() {
		t.Fatalf("before any pause: gauge %v, quiesced %t; want 0, false", g, c.Quiesced())
	}

	// A record in the handler when the pause is read.
	produce(thingRecord(t, slowID, "s", 1, 2))
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the slow record was never handled")
	}
	pause.on.Store(true)
	testenv.WaitFor(t, 20*time.Second, "the pause flag read", c.Paused)
	turns("after the flag was read")
	if g := gauge(); g != 0 || c.Quiesced() {
		t.Fatalf("pause read with a fetched record still in the handler: gauge %v, quiesced %t; want 0, false", g, c.Quiesced())
	}

	// The record done: the pause takes effect.
	unblock()
	testenv.WaitFor(t, 20*time.Second, "the pause taken effect", c.Quiesced)
	if g := gauge(); g != 1 {
		t.Errorf("quiesced, gauge %v; want 1", g)
	}
	if n, off := isApplied(slowID), committedOffset(c, topic); n != 1 || off != 2 {
		t.Fatalf("quiesced with the slow record applied %d times, committed offset %d; want 1, 2", n, off)
	}

	// Nothing more is handled while it is in effect.
	held := uuid.NewString()
	produce(thingRecord(t, held, "b", 1, 3))
	turns("after the held record was produced")
	if n := isApplied(held); n != 0 || !c.Quiesced() || gauge() != 1 {
		t.Fatalf("while paused: the held record applied %d times, quiesced %t, gauge %v; want 0, true, 1", n, c.Quiesced(), gauge())
	}

	// Resumed: the gauge drops and the held record is handled once.
	pause.on.Store(false)
	testenv.WaitFor(t, 20*time.Second, "the held record committed after the resume", func() bool { return committedOffset(c, topic) == 3 })
	if g := gauge(); g != 0 || c.Quiesced() {
		t.Errorf("after the resume: gauge %v, quiesced %t; want 0, false", g, c.Quiesced())
	}
	for _, id := range []string{first, slowID, held} {
		if n := isApplied(id); n != 1 {
			t.Errorf("record %s applied %d times, want 1", id, n)
		}
	}
}

// TestOutageProbesCounted: sluice_worker_outage_probes_total counts the
// tries of a dependency in outage after its backoff, one per round that
// calls it again: a single record whose handler answers outage 5 times and
// then succeeds was called 6 times, the first of which found the outage
// and the other 5 probed it (the last one ending it). No registry probe is
// counted: the registry never was out.
func TestOutageProbesCounted(t *testing.T) {
	brokers, topic, produce := oneTopic(t, "probes-")
	const outages = 5
	var calls atomic.Int32
	h := HandlerFunc(func(context.Context, *Record) (claim.Outcome, error) {
		if calls.Add(1) <= outages {
			return claim.Outcome{}, Outage(failure.Elasticsearch, refused())
		}
		return claim.Applied(), nil
	})
	produce(thingRecord(t, "", "a", 1, 1))
	c, _ := startConsumer(t, brokers, topic, Config{OutageBackoffCap: 20 * time.Millisecond},
		Deps{Registry: realRegistry(t, "w1", 10*time.Second), Handler: h})
	testenv.WaitFor(t, 20*time.Second, "the record committed after the outage", func() bool { return committedOffset(c, topic) == 1 })
	probes := func(dep string) float64 { return testutil.ToFloat64(c.m.probes.WithLabelValues("h", dep)) }
	if n, es, reg := calls.Load(), probes(failure.Elasticsearch), probes(DependencyRegistry); n != outages+1 || es != outages || reg != 0 {
		t.Errorf("handler calls %d, elasticsearch probes %v, registry probes %v; want %d, %d, 0", n, es, reg, outages+1, outages)
	}
	if c.InOutage() {
		t.Error("still in outage after the handler succeeded")
	}
}
