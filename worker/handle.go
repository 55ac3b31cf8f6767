package worker

// This file runs the handler for claimed records (one goroutine per
// aggregate, or one HandleBatch call) under the leases' holds.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"
)

// handle runs the handler for claimed items (and heals for waiting ones):
// one goroutine per aggregate, at most Concurrency at once, each running
// its aggregate's items in offset order.
func (c *Consumer) handle(ctx context.Context, items []*item) {
	if len(items) == 0 {
		return
	}
	groups := map[string][]*item{}
	var order []string
	for _, it := range items {
		if _, ok := groups[it.key]; !ok {
			order = append(order, it.key)
		}
		groups[it.key] = append(groups[it.key], it)
	}
	sem := c.sem // shared by the rounds in flight
	var wg sync.WaitGroup
	for _, k := range order {
		g := groups[k]
		sort.SliceStable(g, func(i, j int) bool { return g[i].rec.Offset < g[j].rec.Offset })
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			for _, it := range g {
				if it.st == stWait {
					c.heal(ctx, it)
					continue
				}
				c.handleOne(ctx, it)
			}
		}()
	}
	wg.Wait()
}

// errBatchAborted cancels a batch whose handler must stop because the hold
// of one of its leases ended (lease lost, registry unreachable).
var errBatchAborted = errors.New("consumer: batch aborted: a lease of the batch was lost")

// handleBatch is handle for a BatchHandler: heals of waiting items run as in
// handle (first: a waiting item precedes its aggregate's claimed one), then
// the claimed items go to one HandleBatch call in offset order per
// partition, each under its own Hold, and every answer is settled as
// handleOne settles a single one. When a hold ends early the batch context
// is cancelled; items whose own lease is still fine and that did not
// finish are released and claimed again.
func (c *Consumer) handleBatch(ctx context.Context, items []*item) {
	var waits, run []*item
	for _, it := range items {
		switch {
		case it.st == stWait:
			waits = append(waits, it)
		case c.unparkLease(it):
			c.leaseLostParked(it)
		default:
			run = append(run, it)
		}
	}
	c.handle(ctx, waits)
	if len(run) == 0 {
		return
	}
	sort.SliceStable(run, func(i, j int) bool {
		a, b := run[i].rec, run[j].rec
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		if a.Partition != b.Partition {
			return a.Partition < b.Partition
		}
		return a.Offset < b.Offset
	})
	start := time.Now()
	bctx, abort := context.WithCancelCause(ctx)
	defer abort(nil)
	hctxs := make([]context.Context, len(run))
	unwatches := make([]func() bool, len(run))
	stops := make([]func(), len(run))
	recs := make([]*Record, len(run))
	// One function for the batch, not a closure per record.
	lost := func() { abort(errBatchAborted) }
	for i, it := range run {
		hctx, stop := c.deps.Registry.Hold(bctx, it.lease)
		unwatches[i] = context.AfterFunc(hctx, lost)
		hctxs[i], recs[i], stops[i] = hctx, &it.view, stop
	}
	res := c.h.HandleBatch(bctx, recs)
	aborted := bctx.Err() != nil
	// Read the causes before stopping the holds (stop cancels hctx too).
	causes := make([]error, len(run))
	for i := range run {
		causes[i] = context.Cause(hctxs[i])
	}
	for i, stop := range stops {
		unwatches[i]()
		stop()
	}
	c.m.stage.WithLabelValues(c.cfg.HandlerName, "handle").Observe(time.Since(start).Seconds())
	if len(res) != len(run) {
		err := fmt.Errorf("consumer: HandleBatch returned %d results for %d records", len(res), len(run))
		c.log("batch handler", "err", err)
		res = make([]BatchResult, len(run))
		for i := range res {
			res[i].Err = err
		}
	}
	for i, it := range run {
		r := res[i]
		if r.Err != nil && aborted && ctx.Err() == nil && errors.Is(causes[i], errBatchAborted) {
			// Another lease of the batch ended: this one is still ours, but
			// the handler stopped early. Hand it back and claim it again.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			_ = c.deps.Registry.Release(rctx, it.lease)
			cancel()
			it.st = stClaim
			c.retryLater(it, "batch_aborted", backoffDelay(c.cfg.RetryBackoffBase, c.cfg.RetryBackoffCap, it.tries))
			continue
		}
		c.settle(ctx, causes[i], it, r.Outcome, r.Err)
	}
}

func (c *Consumer) handleOne(ctx context.Context, it *item) {
	if c.unparkLease(it) {
		c.leaseLostParked(it)
		return
	}
	start := time.Now()
	hctx, stop := c.deps.Registry.Hold(ctx, it.lease)
	out, err := c.h.Handle(hctx, &it.view)
	stop()
	c.m.stage.WithLabelValues(c.cfg.HandlerName, "handle").Observe(time.Since(start).Seconds())
	c.settle(ctx, context.Cause(hctx), it, out, err)
}
