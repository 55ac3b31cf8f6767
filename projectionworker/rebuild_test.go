package projectionworker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/shared/envelope"
)

// TestRebuildAndRollback rebuilds instances to v2 while events keep
// flowing (a live v1 worker keeps v1 current), polling reads through the
// read alias the whole time: v2 catches up, the aliases swap atomically and
// no read ever misses a document; the live worker follows the swap to v2
// without a restart; a second rebuild of v2 is refused; rollback restores
// v1, and the worker follows it back.
func TestRebuildAndRollback(t *testing.T) {
	e := newEnv(t, 3)
	const n = 10
	seqs := make([]int64, n)
	var evs []envelope.Envelope
	for i := range n {
		seqs[i] = 1
		evs = append(evs, e.event(projectionworker.InstanceCreated, "rb", "things", fmt.Sprint(i), 1, map[string]any{"v": 1}))
	}
	deleted := e.event(projectionworker.InstanceCreated, "rb", "things", "gone", 1, nil)
	evs = append(evs, deleted, e.event(projectionworker.InstanceDeleted, "rb", "things", "gone", 2, nil))
	e.publish(evs...)
	svc, _ := e.startInProcess(nil, nil, spec("instances"))
	testenv.WaitFor(t, 30*time.Second, "v1 caught up", e.caughtUp("projection-instances-v1"))

	// Events keep flowing during the rebuild (until the swap, at most 300).
	var stopProducing atomic.Bool
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for k := 0; !stopProducing.Load() && k < 300; k++ { // bounded: a slow (-race) rebuild still catches up
			i := k % n
			seqs[i]++
			e.publish(e.event(projectionworker.InstanceUpdated, "rb", "things", fmt.Sprint(i), seqs[i], map[string]any{"v": seqs[i]}))
			time.Sleep(5 * time.Millisecond)
		}
	}()
	// Reads through the alias never miss a document.
	var reads, misses atomic.Int64
	stopReading := make(chan struct{})
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stopReading:
				return
			default:
			}
			if got := len(e.search("sluice_rb_instances", map[string]any{"match_all": map[string]any{}})); got != n {
				misses.Add(1)
				t.Errorf("read through the alias saw %d documents, want %d", got, n)
			}
			reads.Add(1)
		}
	}()
	cfg := e.config(nil)
	d, closePool := e.deps(nil)
	defer closePool()
	var phases []string
	sum, err := projectionworker.Rebuild(ctxT(t), projectionworker.SwitchOptions{Config: cfg.ProjectionWorker(), Deps: d, Opts: e.opts(),
		Projection: projectionworker.Instances{}, Version: 2, Settle: 2 * time.Second, ProgressEvery: 200 * time.Millisecond,
		Progress: func(p projectionworker.Progress) {
			t.Log(p.String())
			if len(phases) == 0 || phases[len(phases)-1] != p.Phase {
				phases = append(phases, p.Phase)
			}
			if p.Phase == "settling" {
				stopProducing.Store(true)
			}
		}})
	stopProducing.Store(true)
	close(stopReading)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rebuild: %+v, phases %v, %d reads through the alias, %d misses", sum, phases, reads.Load(), misses.Load())
	if sum.From != 1 || sum.To != 2 || len(sum.Scopes) != 1 {
		t.Errorf("summary %+v", sum)
	}
	if v, err := projectionworker.LiveVersion(ctxT(t), e.esc, "sluice_", "instances"); err != nil || v != 2 {
		t.Errorf("live version %d (%v), want 2", v, err)
	}
	// v2 is live and complete. v1 is kept for a rollback but no longer
	// maintained: the live worker moves to v2 (below), and a rollback
	// catches v1 up first.
	testenv.WaitFor(t, 30*time.Second, "v2 complete", func() bool {
		for i := range n {
			if v2 := e.instance("rb", "things", fmt.Sprint(i), 2); v2.Version != seqs[i] || v2.Source["v"] != float64(seqs[i]) {
				return false
			}
		}
		return true
	})
	if g := e.instance("rb", "things", "gone", 2); g.Version != 2 || g.Source["deleted"] != true {
		t.Errorf("tombstone in v2: %+v", g)
	}
	// The running worker follows the swap without a restart: new events
	// reach v2, the version reads go through.
	testenv.WaitFor(t, 30*time.Second, "the live worker switched to v2", func() bool { return svc.Version("instances") == 2 })
	seqs[0]++
	e.publish(e.event(projectionworker.InstanceUpdated, "rb", "things", "0", seqs[0], map[string]any{"v": seqs[0]}))
	testenv.WaitFor(t, 30*time.Second, "a new event in v2", func() bool { return e.instance("rb", "things", "0", 2).Version == seqs[0] })
	idx, err := projectionworker.Indices(ctxT(t), e.esc, "sluice_", "instances")
	if err != nil || len(idx) != 2 || idx[1].RefreshInterval == "-1" || idx[0].Live || !idx[1].Live || !idx[1].ReadAlias {
		t.Errorf("indices after rebuild %+v (%v)", idx, err)
	}
	if _, err := projectionworker.Rebuild(ctxT(t), projectionworker.SwitchOptions{Config: cfg.ProjectionWorker(), Deps: d, Opts: e.opts(),
		Projection: projectionworker.Instances{}, Version: 2}); !errors.Is(err, projectionworker.ErrAlreadyLive) {
		t.Errorf("rebuilding the live version: %v, want ErrAlreadyLive", err)
	}
	rsum, err := projectionworker.Rollback(context.Background(), projectionworker.SwitchOptions{Config: cfg.ProjectionWorker(), Deps: d, Opts: e.opts(),
		Projection: projectionworker.Instances{}, Settle: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if rsum.From != 2 || rsum.To != 1 {
		t.Errorf("rollback summary %+v", rsum)
	}
	if v, _ := projectionworker.LiveVersion(ctxT(t), e.esc, "sluice_", "instances"); v != 1 {
		t.Errorf("live version after rollback %d, want 1", v)
	}
	if got := len(e.search("sluice_rb_instances", map[string]any{"match_all": map[string]any{}})); got != n {
		t.Errorf("after rollback the alias shows %d documents", got)
	}
	// And back: the worker follows the rollback, and v1 catches up with
	// what only v2 had seen.
	testenv.WaitFor(t, 30*time.Second, "the live worker switched back to v1", func() bool { return svc.Version("instances") == 1 })
	seqs[1]++
	e.publish(e.event(projectionworker.InstanceUpdated, "rb", "things", "1", seqs[1], map[string]any{"v": seqs[1]}))
	testenv.WaitFor(t, 30*time.Second, "v1 current again", func() bool {
		for i := range n {
			if e.instance("rb", "things", fmt.Sprint(i), 1).Version != seqs[i] {
				return false
			}
		}
		return true
	})
	if _, err := projectionworker.Rollback(ctxT(t), projectionworker.SwitchOptions{Config: cfg.ProjectionWorker(), Deps: d, Opts: e.opts(),
		Projection: projectionworker.Instances{}}); !errors.Is(err, projectionworker.ErrNothingToRollBack) {
		t.Errorf("second rollback: %v, want ErrNothingToRollBack", err)
	}
}
