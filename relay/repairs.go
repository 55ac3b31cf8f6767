package relay

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice/eventstore"
)

// repairs runs Store.Repair (hole rule 3, docs/relay.md#what-it-does-per-cycle)
// for the leaders of one relay process. A repair is store-wide: one run
// resolves the stale reservations of every shard. Over a store of N shards
// one replica leads up to N shards, and each of their leaders that meets a
// stale reservation needs a repair; without this they ran N repairs, each
// reading every stale block and GETting its segment. So a leader that
// needs one joins the repair running in the process, or takes the report
// of one that ended after its plan read the index (that run saw every
// reservation the plan found stale), and runs one itself only otherwise.
// Replicas in other processes may repair the same blocks meanwhile: every
// step of a repair is conditional on the row's state (Store.Repair), so
// that costs work, never correctness.
type repairs struct {
	mu      sync.Mutex
	running *repairRun
	last    *repairRun
}

// repairRun is one Store.Repair of the process.
type repairRun struct {
	done  chan struct{} // closed when rep and err are set
	ended time.Time
	rep   eventstore.RepairReport
	err   error
}

// run returns a repair's report for a plan that read the index at planned:
// the repair running now (joined), one that ended after planned, or one it
// runs itself with do (ran true; only then is the report this caller's to
// count and log). A joined repair that fails returns its error with ran
// false: the caller plans again, and runs one itself if it must.
func (p *repairs) run(ctx context.Context, planned time.Time, do func(context.Context) (eventstore.RepairReport, error)) (rep eventstore.RepairReport, ran bool, err error) {
	p.mu.Lock()
	if cur := p.running; cur != nil {
		p.mu.Unlock()
		select {
		case <-cur.done:
			return cur.rep, false, cur.err
		case <-ctx.Done():
			return rep, false, context.Cause(ctx)
		}
	}
	if last := p.last; last != nil && last.err == nil && last.ended.After(planned) {
		p.mu.Unlock()
		return last.rep, false, nil
	}
	cur := &repairRun{done: make(chan struct{})}
	p.running = cur
	p.mu.Unlock()
	cur.rep, cur.err = do(ctx)
	p.mu.Lock()
	cur.ended = time.Now()
	p.running, p.last = nil, cur
	p.mu.Unlock()
	close(cur.done)
	return cur.rep, true, cur.err
}

// repair resolves the reservations older than the append timeout that the
// cycle's plan (made at planned) met, by Store.Repair, once for the
// process's leaders (repairs). The leader that ran it counts and logs
// what it resolved (every shard's, on its own shard's series); one that
// joined plans again at once. more says a cycle should follow at once.
func (r *Relay) repair(ctx context.Context, planned time.Time) (more bool, err error) {
	if f := r.hooks.repair; f != nil {
		f(r.shard, false)
	}
	rep, ran, err := r.repairs.run(ctx, planned, func(ctx context.Context) (eventstore.RepairReport, error) {
		if f := r.hooks.repair; f != nil {
			f(r.shard, true)
		}
		return r.store.Repair(ctx, r.cfg.AppendTimeout)
	})
	if !ran {
		// Another leader of this process repaired (or failed to): the next
		// cycle sees what it resolved, or needs a repair of its own.
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("relay: repair: %w", err)
	}
	r.m.gaps.WithLabelValues("repaired_committed").Add(float64(rep.Committed))
	r.log.Warn("relay: resolved reservations older than the append timeout (hole rule 3)",
		"committed_from_segment", rep.Committed, "abandoned", rep.Abandoned, "still_in_flight", rep.InFlight, "blocks", rep.Blocks)
	return rep.Committed+rep.Abandoned > 0, nil
}
