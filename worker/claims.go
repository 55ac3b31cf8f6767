package worker

// This file holds the registry side of a record: claiming in batches,
// healing a waiting record, marking done and handing claims back.

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/sluicehq/sluice/shared/claim"
)

// claim claims items in one batch and sorts them by result; it returns the
// claimed items and the waiting items due for healing.
func (c *Consumer) claim(ctx context.Context, items []*item) (claimed, heal []*item, outage bool) {
	reqs := make([]claim.Request, len(items))
	for i, it := range items {
		e := it.view.Envelope
		reqs[i] = claim.Request{Handler: c.cfg.HandlerName, EventID: e.EventID, AggregateID: it.key, Seq: e.SequenceNumber, Policy: c.cfg.Policy}
	}
	start := time.Now()
	res, err := c.deps.Registry.ClaimBatch(ctx, reqs)
	c.m.stage.WithLabelValues(c.cfg.HandlerName, "claim").Observe(time.Since(start).Seconds())
	if c.tracer != nil {
		c.traceStage(items, "registry claim", start, err)
	}
	if err != nil {
		if isOutage(ctx, err) {
			c.enterOutage(DependencyRegistry, err)
			return nil, nil, true
		}
		var re *claim.RequestError
		if errors.As(err, &re) && re.Index >= 0 && re.Index < len(items) {
			// One bad request fails the batch: dead-letter it, retry the rest.
			it := items[re.Index]
			it.st, it.errText, it.errClass, it.attempts, it.firstFail = stDLQ, "registry: "+err.Error(), ClassPermanent, 1, time.Now()
			c.m.retries.WithLabelValues(c.cfg.HandlerName, "batch_invalid").Inc()
			return nil, nil, false
		}
		c.log("claim failed", "err", err)
		for _, it := range items {
			c.retryLater(it, "claim_error", backoffDelay(c.cfg.RetryBackoffBase, c.cfg.RetryBackoffCap, it.tries))
		}
		return nil, nil, false
	}
	c.leaveOutage(DependencyRegistry)
	for i, it := range items {
		r := res[i]
		switch r.Kind {
		case claim.Claimed:
			it.st, it.lease, it.tries, it.wait = stHandle, r.Lease, 0, nil
			it.view.Attempt = r.Lease.Attempt
			claimed = append(claimed, it)
		case claim.DuplicateDone:
			c.finish(it, "duplicate")
		case claim.Stale:
			c.finish(it, "stale")
		case claim.Dead:
			// The DLQ record was acknowledged before the row became dead.
			c.finish(it, "dead")
		case claim.InProgress:
			it.st = stClaim
			d := backoffDelay(c.cfg.RetryBackoffBase, c.cfg.RetryBackoffCap, it.tries)
			if r.RetryIn > 0 && r.RetryIn < d {
				d = r.RetryIn
			}
			c.retryLater(it, "in_progress", d)
		case claim.RetryLater:
			it.st = stClaim
			c.retryLater(it, "retry_later", max(r.RetryIn, time.Millisecond))
		case claim.Wait:
			it.st = stWait
			it.part.mayWait.Store(true)
			w := r
			it.wait = &w
			if r.HealDue {
				if c.h.healer != nil {
					heal = append(heal, it)
					continue
				}
			}
			c.retryLater(it, "wait", backoffDelay(c.cfg.RetryBackoffBase, c.cfg.RetryBackoffCap, it.tries))
		}
	}
	if len(claimed) > 0 {
		return claimed, heal, false
	}
	return nil, heal, false
}

// heal runs the Healer for a waiting item whose heal is due. A Heal that
// fails on an outage pauses like a handler call (nothing counted); a
// permanent failure, or MaxAttempts retryable ones (*RetryableError,
// panics), dead-letters the waiting record with the reason instead of
// retrying it forever; an unclassified failure (such as a predecessor that
// another worker still holds) is retried with backoff.
func (c *Consumer) heal(ctx context.Context, it *item) {
	err := c.h.Heal(ctx, &it.view, *it.wait)
	if err == nil {
		c.leaveHandlerOutages()
		it.notBefore, it.healFails = time.Time{}, 0
		return
	}
	switch {
	case ctx.Err() != nil:
		c.retryLater(it, "wait", backoffDelay(c.cfg.RetryBackoffBase, c.cfg.RetryBackoffCap, it.tries))
		return
	case isOutage(ctx, err):
		c.enterOutage(DependencyRegistry, err)
		c.retryLater(it, "outage", backoffDelay(c.cfg.RetryBackoffBase, c.cfg.OutageBackoffCap, it.tries))
		return
	}
	if dep, ok := outageOf(ctx, err); ok {
		it.notBefore = c.enterOutage(dep, err)
		it.tries++
		return
	}
	c.leaveHandlerOutages()
	class := Classify(err)
	var re *RetryableError
	var pe *PanicError
	counted := class == ClassPermanent || errors.As(err, &re) || errors.As(err, &pe)
	if counted {
		it.healFails++
		if it.firstFail.IsZero() {
			it.firstFail = time.Now()
		}
	}
	if class == ClassPermanent || (counted && it.healFails >= c.cfg.MaxAttempts) {
		// Dead-letter the waiting record (it has no registry row: its
		// claim answered WAIT); the offset moves on and the DLQ record
		// says why the gap could not be healed.
		c.log("heal failed for good: dead-lettering the waiting record", "event_id", it.view.Envelope.EventID, "err", err)
		it.st, it.failure, it.wait = stDLQ, nil, nil
		it.errText, it.errClass, it.attempts = "heal: "+err.Error(), class, max(it.healFails, 1)
		return
	}
	c.log("heal failed", "event_id", it.view.Envelope.EventID, "err", err)
	c.retryLater(it, "wait", backoffDelay(c.cfg.RetryBackoffBase, c.cfg.RetryBackoffCap, it.tries))
}

// leaseLostParked moves on an item whose lease was lost while it waited out
// an outage: whoever holds it now finishes it.
func (c *Consumer) leaseLostParked(it *item) {
	it.st = stClaim
	c.retryLater(it, "lease_lost", backoffDelay(c.cfg.RetryBackoffBase, c.cfg.RetryBackoffCap, it.tries))
}

// markDone records the outcomes of handled items in one batch.
func (c *Consumer) markDone(ctx context.Context, items []*item) {
	done := make([]claim.Done, len(items))
	for i, it := range items {
		done[i] = claim.Done{Lease: it.lease, Outcome: it.outcome}
	}
	start := time.Now()
	errs, err := c.deps.Registry.MarkDoneBatch(ctx, done)
	c.m.stage.WithLabelValues(c.cfg.HandlerName, "mark_done").Observe(time.Since(start).Seconds())
	if c.tracer != nil {
		c.traceStage(items, "registry mark_done", start, err)
	}
	if err != nil {
		if isOutage(ctx, err) {
			c.enterOutage(DependencyRegistry, err)
		} else {
			c.log("mark done failed", "err", err)
		}
		for _, it := range items {
			c.retryLater(it, "outage", backoffDelay(c.cfg.RetryBackoffBase, c.cfg.OutageBackoffCap, it.tries))
		}
		return
	}
	c.leaveOutage(DependencyRegistry)
	for i, it := range items {
		if errs[i] != nil {
			it.st = stClaim // lease lost: claim again (DUPLICATE_DONE if the other owner finished it)
			c.retryLater(it, "lease_lost", backoffDelay(c.cfg.RetryBackoffBase, c.cfg.RetryBackoffCap, it.tries))
			continue
		}
		c.finish(it, string(it.outcome.Result))
	}
}

// handBack settles the registry claims held, outside any round, on the
// partitions in only (all when nil): outcomes still to be marked are marked
// done; dead letters already acknowledged are marked failed, so that the
// next owner does not run the record again and write a second dead letter;
// every other claim (held, or parked in an outage) is released without
// counting an attempt, so that the next owner claims it at once instead of
// waiting out the lease. Callers make sure no round is in flight.
func (c *Consumer) handBack(ctx context.Context, only map[string][]int32) {
	c.mu.Lock()
	var marks, fails, held []*item
	for _, ps := range c.allParts() {
		if only != nil && !hasPartition(only, ps.topic, ps.partition) {
			continue
		}
		for _, it := range ps.queue {
			c.unparkLease(it)
			switch it.st {
			case stMarkDone:
				marks = append(marks, it)
			case stMarkFailed:
				fails = append(fails, it)
			case stHandle:
				held = append(held, it)
			}
		}
	}
	c.mu.Unlock()
	if len(marks) > 0 {
		c.markDone(ctx, marks)
	}
	if len(fails) > 0 {
		c.markFailed(ctx, fails)
	}
	for _, it := range slices.Concat(held, marks, fails) {
		switch it.st {
		case stHandle, stMarkDone, stMarkFailed: // not settled above
			_ = c.deps.Registry.Release(ctx, it.lease)
			it.st, it.lease, it.failure = stClaim, claim.Lease{}, nil
		}
	}
}
