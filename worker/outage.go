package worker

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/failure"
)

// DependencyRegistry is the dependency name of the processed-event
// registry's own outages (Postgres behind claim.ErrUnavailable): the
// metric label of sluice_worker_dependency_outage and the readiness check
// "<handler>:registry".
const DependencyRegistry = "registry"

// dependencyUnknown names the dependency of an outage a handler did not
// classify (an unclassified error that failure.Classify calls an outage,
// with no dependency-specific type in its chain).
const dependencyUnknown = "unknown"

// depOutage is the pause of one dependency.
type depOutage struct {
	since time.Time
	tries int       // outage answers since it began (the backoff exponent)
	next  time.Time // when the paused work may be tried again
	err   string    // the last outage error, for the readiness reason
}

// outages are the dependencies that are out. One mechanism serves the
// registry (claims, mark_done, mark_failed wait) and the dependencies of
// the handler (handler calls wait): each has its own capped backoff, its
// readiness check and its gauge.
type outages struct {
	mu   sync.Mutex
	deps map[string]*depOutage
	// checks are the readiness checks registered for handler dependencies
	// (removed when Run ends).
	checks map[string]bool
	// n is len(deps), read without mu (flowControl, InOutage).
	n atomic.Int32
}

// outageOf reports whether a handler's error is a dependency outage, and of
// which dependency: an *OutageError as the outermost classification, or an
// error the handler left unclassified that failure.Classify calls an outage
// (connection refused, reset, timeouts, HTTP 408/429/502/503/504). An error
// the handler classified as retryable or permanent is never an outage.
func outageOf(ctx context.Context, err error) (string, bool) {
	for e := err; e != nil; e = errors.Unwrap(e) {
		switch v := e.(type) {
		case *OutageError:
			if v.Dependency == "" {
				return dependencyUnknown, true
			}
			return v.Dependency, true
		case *PermanentError, *ConflictError, *RetryableError, *PanicError:
			return "", false
		}
	}
	if failure.Classify(ctx, err) == failure.Outage {
		if dep := failure.Dependency(err); dep != "" {
			return dep, true
		}
		return dependencyUnknown, true
	}
	return "", false
}

// enterOutage records an outage answer of dependency dep: the first one
// pauses the work that needs dep (the registry: claims and marks; any other:
// handler calls), turns readiness red and sets the gauge; every answer moves
// the next try out by a capped backoff (OutageBackoffCap), never giving up.
// It returns when the paused work may be tried again.
func (c *Consumer) enterOutage(dep string, err error) time.Time {
	now := time.Now()
	c.out.mu.Lock()
	d := c.out.deps[dep]
	first := d == nil
	if first {
		d = &depOutage{since: now}
		c.out.deps[dep] = d
		c.out.n.Store(int32(len(c.out.deps)))
	}
	d.tries++
	d.next = now.Add(backoffDelay(c.cfg.RetryBackoffBase, c.cfg.OutageBackoffCap, d.tries))
	d.err = errText(err)
	next := d.next
	register := first && dep != DependencyRegistry && c.deps.Health != nil && !c.out.checks[dep]
	if register {
		c.out.checks[dep] = true
	}
	c.out.mu.Unlock()
	if register {
		c.deps.Health.AddReadiness(c.cfg.HandlerName+":"+dep, func(context.Context) error { return c.outageErr(dep) })
	}
	if first {
		c.log(dep+" unavailable: pausing consumption", "dependency", dep, "err", err)
		c.m.depOutage.WithLabelValues(c.cfg.HandlerName, dep).Set(1)
		if dep == DependencyRegistry {
			c.m.outage.WithLabelValues(c.cfg.HandlerName).Set(1)
		}
	}
	c.m.retries.WithLabelValues(c.cfg.HandlerName, "outage").Inc()
	return next
}

// leaveOutage ends the outage of dep (a call that needed it succeeded).
func (c *Consumer) leaveOutage(dep string) {
	if c.out.n.Load() == 0 {
		return
	}
	c.out.mu.Lock()
	d := c.out.deps[dep]
	delete(c.out.deps, dep)
	c.out.n.Store(int32(len(c.out.deps)))
	c.out.mu.Unlock()
	if d == nil {
		return
	}
	c.log(dep+" available again: resuming consumption", "dependency", dep, "outage", time.Since(d.since).Round(time.Millisecond))
	c.m.depOutage.WithLabelValues(c.cfg.HandlerName, dep).Set(0)
	if dep == DependencyRegistry {
		c.m.outage.WithLabelValues(c.cfg.HandlerName).Set(0)
	}
}

// leaveHandlerOutages ends the outages of the handler's dependencies: a
// handler call succeeded.
func (c *Consumer) leaveHandlerOutages() {
	if c.out.n.Load() == 0 {
		return
	}
	for _, dep := range c.outDeps() {
		if dep != DependencyRegistry {
			c.leaveOutage(dep)
		}
	}
}

// probe counts, in sluice_worker_outage_probes_total, the dependencies in
// outage whose backoff has run out and that the round starting at now is
// about to call again: the handler's when it runs handler calls (held
// claims, or new ones when none is held), the registry's when it makes
// registry calls. Each such round is one probe; its answer ends the
// outage or moves the next try out.
func (c *Consumer) probe(now time.Time, handlerCalls, registryCalls bool) {
	if c.out.n.Load() == 0 || !handlerCalls && !registryCalls {
		return
	}
	c.out.mu.Lock()
	var due []string
	for dep, d := range c.out.deps {
		if now.Before(d.next) {
			continue
		}
		if dep == DependencyRegistry && registryCalls || dep != DependencyRegistry && handlerCalls {
			due = append(due, dep)
		}
	}
	c.out.mu.Unlock()
	for _, dep := range due {
		c.m.probes.WithLabelValues(c.cfg.HandlerName, dep).Inc()
	}
}

// outDeps returns the dependencies that are out, sorted.
func (c *Consumer) outDeps() []string {
	c.out.mu.Lock()
	defer c.out.mu.Unlock()
	out := make([]string, 0, len(c.out.deps))
	for dep := range c.out.deps {
		out = append(out, dep)
	}
	sort.Strings(out)
	return out
}

// outageErr is the readiness answer for dep: nil unless it is out.
func (c *Consumer) outageErr(dep string) error {
	c.out.mu.Lock()
	defer c.out.mu.Unlock()
	d := c.out.deps[dep]
	if d == nil {
		return nil
	}
	if dep == DependencyRegistry {
		return fmt.Errorf("registry unreachable: consumption paused for %s: %s", time.Since(d.since).Round(time.Second), d.err)
	}
	return fmt.Errorf("%s unavailable: consumption paused for %s: %s", dep, time.Since(d.since).Round(time.Second), d.err)
}

// outageUntil returns when the registry may be tried again (zero: now).
func (c *Consumer) outageUntil() time.Time {
	if c.out.n.Load() == 0 {
		return time.Time{}
	}
	c.out.mu.Lock()
	defer c.out.mu.Unlock()
	if d := c.out.deps[DependencyRegistry]; d != nil {
		return d.next
	}
	return time.Time{}
}

// handlerOutage reports whether a dependency of the handler is out, and
// when handler calls may be tried again (the latest next try of those
// dependencies).
func (c *Consumer) handlerOutage() (bool, time.Time) {
	if c.out.n.Load() == 0 {
		return false, time.Time{}
	}
	c.out.mu.Lock()
	defer c.out.mu.Unlock()
	var until time.Time
	out := false
	for dep, d := range c.out.deps {
		if dep == DependencyRegistry {
			continue
		}
		out = true
		if d.next.After(until) {
			until = d.next
		}
	}
	return out, until
}

// endOutages removes the readiness checks and gauges of a stopped consumer.
func (c *Consumer) endOutages() {
	c.out.mu.Lock()
	checks := make([]string, 0, len(c.out.checks))
	for dep := range c.out.checks {
		checks = append(checks, dep)
	}
	clear(c.out.checks)
	clear(c.out.deps)
	c.out.n.Store(0)
	c.out.mu.Unlock()
	for _, dep := range checks {
		if c.deps.Health != nil {
			c.deps.Health.Remove(c.cfg.HandlerName + ":" + dep)
		}
		c.m.depOutage.DeleteLabelValues(c.cfg.HandlerName, dep)
	}
	c.m.depOutage.DeleteLabelValues(c.cfg.HandlerName, DependencyRegistry)
	c.m.outage.DeleteLabelValues(c.cfg.HandlerName)
}

// parkLease keeps the item's lease alive (Registry.Hold heartbeats it) while the
// item waits out an outage, so that no other owner can take the claim and
// re-running it needs no new claim (no attempt is counted).
func (c *Consumer) parkLease(ctx context.Context, it *item) {
	if it.unpark != nil || it.lease.Token == "" {
		return
	}
	it.park, it.unpark = c.deps.Registry.Hold(ctx, it.lease)
}

// unparkLease stops the parked hold of it, if any; it reports whether a
// heartbeat found the lease lost while it was parked.
func (c *Consumer) unparkLease(it *item) (lost bool) {
	if it.unpark == nil {
		return false
	}
	lost = errors.Is(context.Cause(it.park), claim.ErrLeaseLost)
	it.unpark()
	it.park, it.unpark = nil, nil
	return lost
}
