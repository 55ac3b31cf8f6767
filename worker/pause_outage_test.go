package worker

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/shared/claim"
)

// countingPause is a PauseSource that counts its answers and errors.
type countingPause struct {
	src       PauseSource
	oks, errs atomic.Int64
}

func (p *countingPause) Paused(ctx context.Context, group string) (bool, error) {
	v, err := p.src.Paused(ctx, group)
	if err != nil {
		p.errs.Add(1)
	} else {
		p.oks.Add(1)
	}
	return v, err
}

// pauseWatch samples a consumer's pause state and counts its changes.
type pauseWatch struct {
	mu      sync.Mutex
	changes []string
}

func watchPaused(t *testing.T, c *Consumer) *pauseWatch {
	w := &pauseWatch{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		last := c.Paused()
		tk := time.NewTicker(2 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
				if now := c.Paused(); now != last {
					w.mu.Lock()
					w.changes = append(w.changes, fmt.Sprintf("%s paused=%t", time.Now().Format("15:04:05.000"), now))
					w.mu.Unlock()
					last = now
				}
			}
		}
	}()
	return w
}

func (w *pauseWatch) count() (int, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.changes), append([]string(nil), w.changes...)
}

// TestPauseSurvivesRegistryOutage: the pause flag is read from the
// registry (Postgres, here through a proxy that can be cut). While the
// registry is out, a worker keeps the state it last read: a running group
// keeps processing and a paused one stays paused, even when the flag is
// changed meanwhile (it cannot be read); no outage pauses or resumes it,
// and its state changes exactly when an operator's change is read.
func TestPauseSurvivesRegistryOutage(t *testing.T) {
	brokers, topic, produce := oneTopic(t, "pause-outage-")
	claims := realRegistry(t, "w1", 2*time.Second) // claims stay up: only the flag is cut
	dbURL, pool := testenv.NewMigratedDatabase(t)
	proxy := testenv.NewPGProxy(t, dbURL)
	ppool, err := pgxpool.NewWithConfig(context.Background(), proxy.PoolConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ppool.Close)
	viaProxy, err := registry.New(registry.Config{Owner: "w1"}, registry.Deps{Pool: ppool})
	if err != nil {
		t.Fatal(err)
	}
	operator, err := registry.New(registry.Config{Owner: "operator"}, registry.Deps{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	src := &countingPause{src: viaProxy}

	var mu sync.Mutex
	applied := map[string]int{}
	isApplied := func(id string) int {
		mu.Lock()
		defer mu.Unlock()
		return applied[id]
	}
	h := HandlerFunc(func(_ context.Context, rec *Record) (claim.Outcome, error) {
		mu.Lock()
		defer mu.Unlock()
		applied[rec.Envelope.EventID]++
		return claim.Applied(), nil
	})
	const poll = 50 * time.Millisecond
	c, _ := startConsumer(t, brokers, topic, Config{Settings: Settings{PausePoll: poll}}, Deps{Registry: claims, Handler: h, Pause: src})
	group := topic + "-g"
	ctx := context.Background()
	watch := watchPaused(t, c)
	pos := int64(0)
	send := func() string {
		t.Helper()
		pos++
		id := uuid.NewString()
		produce(thingRecord(t, id, fmt.Sprintf("a%d", pos), 1, pos))
		return id
	}
	// failedReads waits for n more failed reads of the flag.
	failedReads := func(n int64, what string) {
		t.Helper()
		from := src.errs.Load()
		testenv.WaitFor(t, 20*time.Second, fmt.Sprintf("%d failed reads of the pause flag (%s)", n, what), func() bool { return src.errs.Load() >= from+n })
	}
	okReads := func(what string) {
		t.Helper()
		from := src.oks.Load()
		testenv.WaitFor(t, 20*time.Second, "the pause flag read again ("+what+")", func() bool { return src.oks.Load() >= from+2 })
	}
	changes := func(want int, when string) {
		t.Helper()
		if n, list := watch.count(); n != want {
			t.Fatalf("%s: the pause state changed %d times, want %d: %v", when, n, want, list)
		}
	}
	setPaused := func(p bool) {
		t.Helper()
		if _, err := operator.SetGroupPaused(ctx, group, p, "operator", "test", false); err != nil {
			t.Fatal(err)
		}
	}

	first := send()
	testenv.WaitFor(t, 20*time.Second, "the first record applied", func() bool { return isApplied(first) == 1 })
	okReads("before the outage")

	// A running group, the registry out: it keeps running.
	proxy.Stop()
	failedReads(5, "running")
	during := send()
	testenv.WaitFor(t, 20*time.Second, "a record sent during the outage applied", func() bool { return isApplied(during) == 1 })
	failedReads(10, "running")
	if c.Paused() {
		t.Fatal("a registry outage paused a running group")
	}
	changes(0, "running through an outage")
	proxy.Start()
	okReads("after the first outage")

	// Paused by an operator: seen once the flag is read.
	setPaused(true)
	testenv.WaitFor(t, 20*time.Second, "the worker paused", c.Paused)
	changes(1, "after the pause")
	// Positive evidence that fetching stopped, not a sleep: the pause has
	// taken effect (sluice_worker_paused): the client fetches nothing of
	// the topic and what was fetched before the pause is done.
	testenv.WaitFor(t, 20*time.Second, "the pause taken effect", c.Quiesced)
	held := send()

	// A paused group, the registry out: it stays paused, and a resume it
	// cannot read changes nothing until the registry is back.
	proxy.Stop()
	failedReads(10, "paused")
	if !c.Paused() {
		t.Fatal("a registry outage resumed a paused group")
	}
	setPaused(false) // written directly; the worker cannot see it yet
	failedReads(10, "paused, resumed meanwhile")
	if !c.Paused() || isApplied(held) != 0 {
		t.Fatalf("during the outage: paused %t, held record applied %d times; want still paused, not applied", c.Paused(), isApplied(held))
	}
	changes(1, "paused through an outage")

	// The registry back: the resume is read, the held record applied once.
	proxy.Start()
	testenv.WaitFor(t, 20*time.Second, "the worker resumed", func() bool { return !c.Paused() })
	testenv.WaitFor(t, 20*time.Second, "the held record applied", func() bool { return isApplied(held) == 1 })
	okReads("after the resume") // the flag read again: a spurious change would show now
	changes(2, "at the end")
	for _, id := range []string{first, during, held} {
		if n := isApplied(id); n != 1 {
			t.Errorf("record %s applied %d times, want 1", id, n)
		}
	}
}
