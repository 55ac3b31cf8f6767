package projectionworker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/elastic/go-elasticsearch/v8"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/sluicehq/sluice/shared/kafka"
	"github.com/sluicehq/sluice/worker"
)

// ErrAlreadyLive refuses a rebuild of a version that is already live.
var ErrAlreadyLive = errors.New("projectionworker: version is already live")

// ErrNothingToRollBack: no older version to roll back to.
var ErrNothingToRollBack = errors.New("projectionworker: no older version to roll back to")

// Lag is a consumer group's position on a topic, summed over partitions.
type Lag struct {
	Committed int64 `json:"committed"`
	End       int64 `json:"end"`
	Lag       int64 `json:"lag"`
	// Partitions with lag > 0.
	Behind int `json:"behind"`
}

// GroupLag returns group's lag on topic: per partition end − committed
// (log start when nothing is committed), summed over worker.Lag.
func GroupLag(ctx context.Context, adm *kadm.Client, group, topic string) (Lag, error) {
	var l Lag
	gl, err := worker.Lag(ctx, adm, group, topic)
	if err != nil {
		return l, fmt.Errorf("projectionworker: %w", err)
	}
	for _, p := range gl.Partitions {
		c := p.Committed
		if c < 0 {
			c = p.Start
		}
		l.Committed += c
		l.End += p.End
		if p.Lag > 0 {
			l.Lag += p.Lag
			l.Behind++
		}
	}
	return l, nil
}

// Progress is reported while a rebuild or rollback runs (the admin API's
// jobs show it; Elapsed in nanoseconds).
type Progress struct {
	Phase      string        `json:"phase"` // catching_up, restoring_settings, swapping, settling, done
	Projection string        `json:"projection"`
	Version    int           `json:"version"`
	Lag        Lag           `json:"lag"`
	Elapsed    time.Duration `json:"elapsed_ns"`
}

func (p Progress) String() string {
	pct := 100.0
	if p.Lag.End > 0 {
		pct = 100 * float64(p.Lag.End-p.Lag.Lag) / float64(p.Lag.End)
	}
	return fmt.Sprintf("%s v%d %s: %d/%d records (%.1f%%), lag %d on %d partitions, %s",
		p.Projection, p.Version, p.Phase, p.Lag.End-p.Lag.Lag, p.Lag.End, pct, p.Lag.Lag, p.Lag.Behind, p.Elapsed.Round(time.Millisecond))
}

// SwitchOptions configure Rebuild and Rollback.
type SwitchOptions struct {
	// Config and Deps configure the Service the switch runs for the new
	// version (its Projections are the one being switched); Opts are its
	// test hooks, which the switch's own Kafka client takes too.
	Config     Config
	Deps       Deps
	Opts       []Option
	Projection Projection
	// Version to build (Rebuild; ≥ 1 and not live). Ignored by Rollback.
	Version int
	// Progress, when set, is called every ProgressEvery (default 1 s) and
	// at each phase.
	Progress      func(Progress)
	ProgressEvery time.Duration
	// Settle: after the swap the new version keeps consuming until it is
	// caught up again and at least this long (default 5 s), so events the
	// relay published around the swap land in it too.
	Settle time.Duration
}

// Summary is the result of a Rebuild or Rollback (the admin API's jobs
// show it; Elapsed in nanoseconds).
type Summary struct {
	Projection  string        `json:"projection"`
	From        int           `json:"from"`
	To          int           `json:"to"`
	Scopes      []string      `json:"scopes"`
	Lag         Lag           `json:"lag"`
	Elapsed     time.Duration `json:"elapsed_ns"`
	OldReplicas string        `json:"old_replicas"`
}

// Rebuild builds projection version o.Version blue/green (docs/projectionworker.md#rebuild-and-rollback-runbook):
// new concrete indices (refresh off, no replicas), a new consumer group
// and registry handler consuming the events topic from the beginning until
// the lag is 0 on every partition, settings restored, then the read and
// write aliases of every scope swapped atomically. The old indices stay
// for Rollback. A version that is live for any scope is refused
// (ErrAlreadyLive).
func Rebuild(ctx context.Context, o SwitchOptions) (Summary, error) {
	p := o.Projection
	prefix := o.Config.Elasticsearch.IndexPrefix
	if o.Version <= 0 {
		return Summary{}, fmt.Errorf("projectionworker: rebuild %s: --version must be ≥ 1", p.Name())
	}
	idx, err := Indices(ctx, o.Deps.ES, prefix, p.Name())
	if err != nil {
		return Summary{}, err
	}
	from, replicas := 0, ""
	for scope, v := range liveVersions(idx) {
		if v == o.Version {
			return Summary{}, fmt.Errorf("%w: %s v%d is live for %s", ErrAlreadyLive, p.Name(), v, scope)
		}
		from = max(from, v)
	}
	for _, i := range idx {
		if i.Live && i.Version == from {
			replicas = i.Replicas
		}
	}
	sum, err := switchTo(ctx, o, o.Version, Rebuilding, replicas)
	sum.From = from
	return sum, err
}

// RollbackPlan is what Rollback would switch: from the live version (the
// highest a write alias points at) to the highest version below it, with
// the projection's indices as they are now.
type RollbackPlan struct {
	Projection string      `json:"projection"`
	From       int         `json:"from"`
	To         int         `json:"to"`
	Indices    []IndexInfo `json:"indices"`
}

// PlanRollback returns the switch Rollback would make for projection name;
// it changes nothing. With no live version, or none below it, it wraps
// ErrNothingToRollBack (the plan still lists the indices). The admin API
// and `sluice projection rollback` both call it before they act, and
// Rollback itself switches to the plan's To.
func PlanRollback(ctx context.Context, es *elasticsearch.Client, prefix, name string) (RollbackPlan, error) {
	plan := RollbackPlan{Projection: name, Indices: []IndexInfo{}}
	idx, err := Indices(ctx, es, prefix, name)
	if err != nil {
		return plan, err
	}
	if idx != nil {
		plan.Indices = idx
	}
	for _, v := range liveVersions(idx) {
		plan.From = max(plan.From, v)
	}
	for _, i := range idx {
		if i.Version < plan.From {
			plan.To = max(plan.To, i.Version)
		}
	}
	if plan.From == 0 || plan.To == 0 {
		return plan, fmt.Errorf("%w: %s (live v%d)", ErrNothingToRollBack, name, plan.From)
	}
	return plan, nil
}

// Rollback points the aliases back at the highest version below the live
// one (PlanRollback): that version first catches up with its own consumer
// group (events that arrived after the swap), then the aliases swap
// atomically. The newer indices stay.
func Rollback(ctx context.Context, o SwitchOptions) (Summary, error) {
	p := o.Projection
	plan, err := PlanRollback(ctx, o.Deps.ES, o.Config.Elasticsearch.IndexPrefix, p.Name())
	if err != nil {
		return Summary{}, err
	}
	sum, err := switchTo(ctx, o, plan.To, Live, "")
	sum.From = plan.From
	return sum, err
}

// switchTo runs version's consumer until caught up, restores settings
// (Rebuild mode), swaps the aliases, settles, and stops the consumer.
func switchTo(ctx context.Context, o SwitchOptions, version int, mode Mode, replicas string) (Summary, error) {
	start := time.Now()
	p := o.Projection
	sum := Summary{Projection: p.Name(), To: version, OldReplicas: replicas}
	every := o.ProgressEvery
	if every <= 0 {
		every = time.Second
	}
	settle := o.Settle
	if settle <= 0 {
		settle = 5 * time.Second
	}
	report := func(phase string, l Lag) {
		if o.Progress != nil {
			o.Progress(Progress{Phase: phase, Projection: p.Name(), Version: version, Lag: l, Elapsed: time.Since(start)})
		}
	}
	cfg := o.Config
	cfg.Projections = []Spec{{Projection: p, Version: version, Mode: mode}}
	svc, err := New(cfg, o.Deps, o.Opts...)
	if err != nil {
		return sum, err
	}
	var h hooks
	for _, opt := range o.Opts {
		opt(&h)
	}
	cl, err := kafka.NewClient(o.Config.Kafka, h.kafkaOpts...)
	if err != nil {
		return sum, fmt.Errorf("projectionworker: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- svc.Run(runCtx) }()
	stopSvc := func() error {
		stop()
		return <-done
	}
	group, topic := o.Config.Kafka.Group(GroupName(p.Name(), version)), o.Config.Kafka.EventsTopic
	// waitCaughtUp polls until the lag is 0 on every partition (and, when
	// min > 0, at least that long).
	waitCaughtUp := func(phase string, minWait time.Duration) (Lag, error) {
		t0 := time.Now()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		last := time.Time{}
		for {
			select {
			case <-ctx.Done():
				return Lag{}, ctx.Err()
			case err := <-done:
				done <- err
				return Lag{}, fmt.Errorf("projectionworker: consumer stopped: %v", err)
			case <-tick.C:
			}
			l, err := GroupLag(ctx, adm, group, topic)
			if err != nil {
				continue // transient admin errors: keep polling
			}
			if time.Since(last) >= every {
				report(phase, l)
				last = time.Now()
			}
			if l.Lag == 0 && time.Since(t0) >= minWait {
				return l, nil
			}
		}
	}
	if _, err := waitCaughtUp("catching_up", 0); err != nil {
		_ = stopSvc()
		return sum, err
	}
	es, prefix := o.Deps.ES, o.Config.Elasticsearch.IndexPrefix
	if mode == Rebuilding {
		report("restoring_settings", Lag{})
		if err := RestoreSettings(ctx, es, prefix, p.Name(), version, replicas); err != nil {
			_ = stopSvc()
			return sum, err
		}
	}
	report("swapping", Lag{})
	scopes, err := SwapAliases(ctx, es, prefix, p, version)
	if err != nil {
		_ = stopSvc()
		return sum, err
	}
	sum.Scopes = scopes
	l, err := waitCaughtUp("settling", settle)
	if err != nil {
		_ = stopSvc()
		return sum, err
	}
	sum.Lag = l
	if err := stopSvc(); err != nil {
		return sum, err
	}
	// A scope first seen while the aliases swapped has its index of this
	// version created after the swap listed the indices (or during the
	// settle): swap again, now that this version's consumer has stopped
	// creating indices, so that no scope keeps its aliases on the old
	// version. (A scope first seen after this is claimed by the live
	// worker that follows the swap: claimAliases.)
	if mode == Rebuilding {
		if err := RestoreSettings(ctx, es, prefix, p.Name(), version, replicas); err != nil {
			return sum, err
		}
	}
	scopes, err = SwapAliases(ctx, es, prefix, p, version)
	if err != nil {
		return sum, err
	}
	sum.Scopes = scopes
	sum.Elapsed = time.Since(start)
	report("done", l)
	return sum, nil
}
