package worker

// This file holds the loop: one poll per turn and the overlapping rounds
// (select and claim, then handle, dead-letter and mark in the background).

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// DefaultRoundsInFlight is the default of Config.RoundsInFlight.
const DefaultRoundsInFlight = 4

// maxBlocked bounds how long the loop keeps rebalances blocked while it
// overlaps rounds (a waiting rebalance is also signalled by franz-go, see
// OnPartitionsCallbackBlocked; this is the backstop).
const maxBlocked = 2 * time.Second

// turn is one poll and one round of processing, with rebalances blocked
// (BlockRebalanceOnPoll). Rounds overlap: a round's first half (select,
// claim) runs here, its second half (handler, dead letters, mark_done) in
// the background while the next turns poll, parse, claim and launch the
// next rounds, up to Config.RoundsInFlight at once. A record that arrives
// while rounds are in flight so starts at the next turn instead of waiting
// for them. The records of a round in flight are busy: no later round
// selects them or any record of their aggregates, so per-aggregate order is
// kept. Commits happen only here and cover only the contiguous done prefix,
// which ends at the first record of a round in flight. Before rebalances
// are allowed every round in flight is joined and committed, so a
// rebalance never sees in-flight work.
func (c *Consumer) turn(ctx, work context.Context) error {
	wait, wake := c.pollWait()
	pctx, cancel := context.WithTimeout(ctx, wait)
	if len(c.inflight) > 0 {
		// Poll until records arrive or a round in flight finishes.
		go func() {
			select {
			case <-wake:
				cancel()
			case <-pctx.Done():
			}
		}()
	}
	fetches := c.cl.PollRecords(pctx, c.cfg.MaxPollRecords)
	cancel()
	if fetches.IsClientClosed() {
		return errors.New("consumer: kafka client closed")
	}
	fetches.EachError(func(t string, p int32, err error) {
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			c.log("fetch error", "topic", t, "partition", p, "err", err)
		}
	})
	now := time.Now()
	type polled struct {
		p   kgo.FetchTopicPartition
		its []*item
	}
	var ps []polled
	var all []*item
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		its := make([]*item, len(p.Records))
		for i, r := range p.Records {
			its[i] = &item{rec: r, polledAt: now}
		}
		ps = append(ps, polled{p, its})
		all = append(all, its...)
	})
	c.parseAll(all)
	c.mu.Lock()
	for _, pp := range ps {
		part := c.part(pp.p.Topic, pp.p.Partition)
		part.hwm = pp.p.HighWatermark
		for _, it := range pp.its {
			it.part = part
		}
		part.queue = append(part.queue, pp.its...)
		c.pending += len(pp.its)
		// The lag from the first uncommitted record, at every poll: a
		// consumer that never commits (a stuck rebuild) shows it too.
		if part.hwm > 0 && len(part.queue) > 0 {
			c.m.lag.WithLabelValues(c.cfg.HandlerName, part.topic, strconv.Itoa(int(part.partition))).Set(float64(max(part.hwm-part.queue[0].rec.Offset, 0)))
		}
	}
	pending := c.pending
	c.mu.Unlock()
	c.deps.Logger.Debug("poll", "records", fetches.NumRecords(), "pending", pending, "wait", wait)
	// A free slot before claiming: leases are not held until the round is
	// launched.
	c.reap()
	for len(c.inflight) >= c.cfg.RoundsInFlight {
		<-c.inflight[0]
		c.reap()
	}
	c.lingerEnd = c.lingerUntil(time.Now())
	if ctx.Err() == nil && c.lingerEnd.IsZero() { // after SIGTERM nothing new is claimed: the drain finishes what is held
		c.roundMu.Lock()
		if next := c.roundStart(work); next != nil {
			c.launch(work, next)
		}
		c.roundMu.Unlock()
	}
	c.reap()
	// The commit waits for its interval but for a waiting rebalance, the
	// drain and an operator pause (Quiesced needs every offset committed).
	c.commit(work, nil, c.rebalance.Load() || ctx.Err() != nil || c.opPaused.Load())
	if len(c.inflight) == 0 || c.rebalance.Load() || time.Since(c.allowedAt) > maxBlocked || ctx.Err() != nil {
		c.join()
		c.commit(work, nil, c.rebalance.Load() || ctx.Err() != nil || c.opPaused.Load())
		c.rebalance.Store(false)
		c.allowedAt = time.Now()
		c.cl.AllowRebalance()
	}
	c.flowControl()
	return nil
}

// reap forgets the rounds in flight that finished.
func (c *Consumer) reap() {
	live := c.inflight[:0]
	for _, done := range c.inflight {
		select {
		case <-done:
		default:
			live = append(live, done)
		}
	}
	clear(c.inflight[len(live):])
	c.inflight = live
}

// join waits for every round in flight.
func (c *Consumer) join() {
	for _, done := range c.inflight {
		<-done
	}
	clear(c.inflight)
	c.inflight = c.inflight[:0]
}

// pollWait is how long a poll may block: until the earliest due retry of
// an aggregate that no round in flight holds (those wait for the round's
// wake-up, which it returns too).
func (c *Consumer) pollWait() (time.Duration, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	wait := time.Second
	now := time.Now()
	c.eachSelectable(func(it *item) bool {
		wait = min(wait, it.notBefore.Sub(now))
		return true
	})
	if until := c.outageUntil().Sub(now); until > wait {
		wait = min(until, time.Second)
	}
	if wait < 5*time.Millisecond {
		wait = 5 * time.Millisecond
	}
	if !c.commitAt.IsZero() {
		// A finished prefix waits for its commit (commit).
		wait = max(min(wait, c.commitAt.Sub(now)), time.Millisecond)
	}
	if !c.lingerEnd.IsZero() {
		// A round waits for more records (lingerUntil): poll until its
		// linger ends, or records arrive, or a round in flight finishes.
		wait = max(min(wait, c.lingerEnd.Sub(now)), time.Millisecond)
	}
	return wait, c.wake
}

// lingerUntil is the round linger (Settings.RoundLinger,
// docs/worker-runtime.md#round-linger): while a round is in flight, the
// next one waits until its oldest record has waited RoundLinger since it
// was polled, so that records arriving one by one (a paced load) share a
// round, that is one claim, one handler batch and one mark_done, instead
// of one round each. A worker with no round in flight starts at once (as
// the event store's group commit does: waiting would only add latency),
// and so does a round that is full (MaxPollRecords). It returns when the
// linger ends, or zero when a round may start now. Only the loop
// goroutine calls it.
func (c *Consumer) lingerUntil(now time.Time) time.Time {
	if c.cfg.RoundLinger <= 0 || len(c.inflight) == 0 {
		return time.Time{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	var oldest time.Time
	c.eachSelectable(func(it *item) bool {
		if now.Before(it.notBefore) {
			return true
		}
		n++
		if oldest.IsZero() || it.polledAt.Before(oldest) {
			oldest = it.polledAt
		}
		return n < c.cfg.MaxPollRecords
	})
	if n == 0 || n >= c.cfg.MaxPollRecords {
		return time.Time{}
	}
	if until := oldest.Add(c.cfg.RoundLinger); now.Before(until) {
		return until
	}
	return time.Time{}
}

// roundWork is a round between its two halves: the items it selected, by
// what is left to do for them.
type roundWork struct {
	dlq, handles, marks, fails []*item
}

// roundStart is the first half of a round: it selects the runnable records,
// dead-letters parse errors and claims in one batch. It returns what the
// second half (roundFinish) does, or nil when nothing is left this round.
func (c *Consumer) roundStart(ctx context.Context) *roundWork {
	now := time.Now()
	items := c.selectRunnable(now)
	if len(items) == 0 {
		return nil
	}
	registryOK := !now.Before(c.outageUntil())
	w := &roundWork{}
	var claims []*item
	for _, it := range items {
		switch it.st {
		case stDLQ:
			w.dlq = append(w.dlq, it)
		case stClaim, stWait:
			claims = append(claims, it)
		case stHandle:
			w.handles = append(w.handles, it)
		case stMarkDone:
			w.marks = append(w.marks, it)
		case stMarkFailed:
			w.fails = append(w.fails, it)
		}
	}
	c.produceDLQ(ctx, w.dlq)
	if !registryOK {
		// Outage: only Kafka-side work (DLQ of parse errors) may go on.
		return nil
	}
	if out, until := c.handlerOutage(); out {
		// A dependency of the handler is out: its calls wait for the next
		// try; then the claims already held probe it (new claims only when
		// none is held, so an outage does not claim the whole backlog).
		if now.Before(until) {
			w.handles, claims = nil, nil
		} else if len(w.handles) > 0 {
			claims = nil
		}
		if len(w.handles)+len(claims)+len(w.marks)+len(w.fails) == 0 {
			return nil
		}
	}
	c.probe(now, len(w.handles)+len(claims) > 0, len(w.dlq)+len(w.handles)+len(claims)+len(w.marks)+len(w.fails) > 0)
	if len(claims) > 0 {
		claimed, heal, outage := c.claim(ctx, claims)
		if outage {
			return nil
		}
		w.handles = append(w.handles, claimed...)
		w.handles = append(w.handles, heal...)
	}
	// after_claim: the claim is recorded, nothing else has happened.
	if len(w.handles) > 0 {
		c.hit(PointAfterClaim)
	}
	return w
}

// launch runs the second half of round w in the background; the items it
// works on are busy until it finished (those the claim finished or put off
// are not: the commit may pass the finished ones at once).
func (c *Consumer) launch(ctx context.Context, w *roundWork) {
	touched := slices.Concat(w.dlq, w.handles, w.marks, w.fails)
	c.mu.Lock()
	for _, it := range touched {
		it.busy = true
	}
	c.mu.Unlock()
	done := make(chan struct{})
	c.inflight = append(c.inflight, done)
	c.rounds.Add(1)
	go func() {
		defer c.rounds.Done()
		c.roundFinish(ctx, w)
		c.mu.Lock()
		for _, it := range touched {
			it.busy = false
		}
		close(c.wake)
		c.wake = make(chan struct{})
		c.mu.Unlock()
		close(done)
	}()
}

// roundFinish is the second half of a round: the handlers, the dead
// letters of failed records, MarkFailed and one MarkDoneBatch.
func (c *Consumer) roundFinish(ctx context.Context, w *roundWork) {
	handles, marks, fails := w.handles, w.marks, w.fails
	if c.h.batch != nil {
		c.handleBatch(ctx, handles)
	} else {
		c.handle(ctx, handles)
	}
	var dead []*item
	for _, it := range handles {
		switch it.st {
		case stMarkDone:
			marks = append(marks, it)
		case stDLQ:
			dead = append(dead, it)
		}
	}
	c.produceDLQ(ctx, dead)
	for _, it := range append(w.dlq, dead...) {
		if it.st == stMarkFailed && !contains(fails, it) {
			fails = append(fails, it)
		}
	}
	c.markFailed(ctx, fails)
	if len(marks) > 0 {
		c.hit(PointBeforeMarkDone)
		c.markDone(ctx, marks)
	}
}

func contains(items []*item, x *item) bool {
	for _, it := range items {
		if it == x {
			return true
		}
	}
	return false
}
