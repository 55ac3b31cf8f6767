package worker

// This file holds retries: backoff, settling a handler's answer into a
// retry, a mark_done or a dead letter, and recording the final failure.

import (
	"context"
	"errors"
	"time"

	"github.com/sluicehq/sluice/shared/backoff"
	"github.com/sluicehq/sluice/shared/claim"
)

// backoffDelay is min(limit, base·2^n) scaled by a random factor in
// [0.5, 1) (shared/backoff).
func backoffDelay(base, limit time.Duration, n int) time.Duration {
	return backoff.Policy{Base: base, Cap: limit, Jitter: true}.Delay(n)
}

func (c *Consumer) retryLater(it *item, reason string, d time.Duration) {
	it.notBefore = time.Now().Add(d)
	it.tries++
	c.m.retries.WithLabelValues(c.cfg.HandlerName, reason).Inc()
}

// settle moves a handled item on according to the handler's answer: to
// mark_done (success, conflict), to a later claim (retryable failure, lease
// lost, shutdown) or to the DLQ (permanent or exhausted failure). cause is
// the cancellation cause of the context the handler ran with (it tells a
// lost lease or a registry outage).
func (c *Consumer) settle(ctx context.Context, cause error, it *item, out claim.Outcome, err error) {
	if err == nil {
		c.leaveHandlerOutages()
		it.st, it.outcome = stMarkDone, out
		return
	}
	switch {
	case isLeaseLost(cause, err):
		it.st = stClaim
		c.retryLater(it, "lease_lost", backoffDelay(c.cfg.RetryBackoffBase, c.cfg.RetryBackoffCap, it.tries))
		return
	case errors.Is(err, claim.ErrUnavailable) || errors.Is(cause, claim.ErrUnavailable):
		c.enterOutage(DependencyRegistry, err) // keep the lease: run again when Postgres is back
		c.parkLease(ctx, it)
		c.retryLater(it, "outage", backoffDelay(c.cfg.RetryBackoffBase, c.cfg.OutageBackoffCap, it.tries))
		return
	case ctx.Err() != nil:
		// Shutdown ran out of time: hand the claim back.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		_ = c.deps.Registry.Release(rctx, it.lease)
		cancel()
		it.st = stClaim
		return
	}
	if dep, ok := outageOf(ctx, err); ok {
		// A dependency of the handler is out: not the record's fault. No
		// attempt is spent (no MarkFailed, no dead letter); the lease is
		// kept alive and the same claim runs again after the outage's
		// backoff, which has no cap on total time.
		c.parkLease(ctx, it)
		it.notBefore = c.enterOutage(dep, err)
		it.tries++
		c.deps.Logger.Debug("dependency outage, will retry", "handler", c.cfg.HandlerName, "dependency", dep,
			"event_id", it.view.Envelope.EventID, "retry_at", it.notBefore, "err", err)
		return
	}
	// The dependencies answered (not an outage): the handler's outage, if
	// any, is over, whatever the record's own fate.
	c.leaveHandlerOutages()
	class := Classify(err)
	if class == ClassConflict {
		var ce *ConflictError
		errors.As(err, &ce)
		it.st, it.outcome = stMarkDone, claim.Conflict(ce.Reason)
		return
	}
	f := claim.Failure{Err: err, Retryable: class == ClassRetryable, MaxAttempts: c.cfg.MaxAttempts}
	if f.Retryable && it.lease.Attempt < c.cfg.MaxAttempts {
		fr, ferr := c.deps.Registry.MarkFailed(ctx, it.lease, f)
		if ferr != nil {
			if isOutage(ctx, ferr) {
				c.enterOutage(DependencyRegistry, ferr)
				c.retryLater(it, "outage", backoffDelay(c.cfg.RetryBackoffBase, c.cfg.OutageBackoffCap, it.tries))
				return
			}
			it.st = stClaim // lease lost: whoever holds it now finishes it
			c.retryLater(it, "lease_lost", backoffDelay(c.cfg.RetryBackoffBase, c.cfg.RetryBackoffCap, it.tries))
			return
		}
		c.deps.Logger.Info("attempt failed, will retry", "handler", c.cfg.HandlerName, "event_id", it.view.Envelope.EventID,
			"attempt", fr.Attempt, "retry_in", fr.RetryIn, "err", err)
		it.st = stClaim
		c.retryLater(it, "failed", max(fr.RetryIn, time.Millisecond))
		return
	}
	// Dead: the DLQ record is produced and acknowledged first, then the row
	// becomes dead, then the offset moves (a crash in between re-runs the
	// attempt rather than losing the dead letter).
	it.failure = &f
	it.st, it.errText, it.errClass, it.attempts = stDLQ, err.Error(), class, it.lease.Attempt
	if row, gerr := c.deps.Registry.GetRow(ctx, c.cfg.HandlerName, it.view.Envelope.EventID); gerr == nil && !row.FirstFailedAt.IsZero() {
		it.firstFail = row.FirstFailedAt
	} else {
		it.firstFail = time.Now()
	}
}

// markFailed records the final failure of dead-lettered items.
func (c *Consumer) markFailed(ctx context.Context, items []*item) {
	for _, it := range items {
		if it.st != stMarkFailed {
			continue
		}
		_, err := c.deps.Registry.MarkFailed(ctx, it.lease, *it.failure)
		switch {
		case err == nil:
			c.finish(it, "dead")
		case isOutage(ctx, err):
			c.enterOutage(DependencyRegistry, err)
			c.retryLater(it, "outage", backoffDelay(c.cfg.RetryBackoffBase, c.cfg.OutageBackoffCap, it.tries))
			return
		case errors.Is(err, claim.ErrLeaseLost):
			// Another owner holds it now (its own attempt decides); the DLQ
			// record exists — acknowledge by claiming again.
			it.st, it.failure = stClaim, nil
			c.retryLater(it, "lease_lost", backoffDelay(c.cfg.RetryBackoffBase, c.cfg.RetryBackoffCap, it.tries))
		default:
			c.log("mark failed", "err", err)
			c.retryLater(it, "mark_failed", backoffDelay(c.cfg.RetryBackoffBase, c.cfg.RetryBackoffCap, it.tries))
		}
	}
}
