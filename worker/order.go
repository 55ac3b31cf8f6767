package worker

// This file holds per-aggregate ordering and the commit prefix: which
// records a round may select, finishing a record (and waking the waiting
// records of its aggregate) and committing each partition's contiguous
// finished prefix.

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// selectRunnable picks the runnable items of this round: per aggregate the records
// in offset order up to and including the first one that is not in WAIT
// (a waiting record does not block its successors, which may be its
// predecessors in sequence); an item not yet due blocks its aggregate unless
// it is waiting.
func (c *Consumer) selectRunnable(now time.Time) []*item {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*item
	c.eachSelectable(func(it *item) bool {
		if !now.Before(it.notBefore) {
			out = append(out, it)
		}
		return len(out) < c.cfg.MaxPollRecords
	})
	return out
}

// eachSelectable calls fn, in partition and offset order, for every record
// a round may select once it is due: not done, not of an aggregate a round
// in flight holds, and not behind a record of its aggregate that is not
// waiting (a WAIT does not block its successors, which may be its missing
// predecessors). fn returns false to stop. Callers hold mu.
//
// The loop calls it up to three times a turn (pollWait, lingerUntil,
// selectRunnable) over every unfinished and uncommitted record, so it
// allocates nothing once warm: the two key sets are the Consumer's, cleared
// and reused, and finished records are passed over before any key is
// looked at.
func (c *Consumer) eachSelectable(fn func(it *item) bool) {
	busy, blocked := c.selBusy, c.selBlocked
	if busy == nil {
		busy, blocked = map[string]struct{}{}, map[string]struct{}{}
		c.selBusy, c.selBlocked = busy, blocked
	}
	clear(busy)
	clear(blocked)
	parts := c.allParts()
	for _, ps := range parts {
		for _, it := range ps.queue {
			if it.busy {
				busy[it.key] = struct{}{} // the aggregates of the rounds in flight
			}
		}
	}
	for _, ps := range parts {
		for _, it := range ps.queue {
			if it.busy || it.st == stDone { // busy first: a busy record's state is its round's
				continue
			}
			if _, ok := busy[it.key]; ok {
				continue
			}
			if _, ok := blocked[it.key]; ok {
				continue
			}
			if it.st != stWait {
				blocked[it.key] = struct{}{}
			}
			if !fn(it) {
				return
			}
		}
	}
}

// finish marks an item done, wakes waiting records of its aggregate, and
// counts it.
func (c *Consumer) finish(it *item, outcome string) {
	it.st = stDone
	c.m.records.WithLabelValues(c.cfg.HandlerName, outcome).Inc()
	c.m.stage.WithLabelValues(c.cfg.HandlerName, "end_to_end").Observe(time.Since(it.polledAt).Seconds())
	if at := it.view.Envelope.OccurredAt; outcome == "applied" && !at.IsZero() && it.parseErr == nil {
		c.m.age.WithLabelValues(c.cfg.HandlerName).Observe(max(time.Since(at.Time()), 0).Seconds())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending--
	if !it.part.mayWait.Load() {
		return
	}
	for _, o := range it.part.queue {
		if o.key == it.key && o.st == stWait { // key first: other aggregates may belong to another round
			o.notBefore, o.tries = time.Time{}, 0
		}
	}
}

// commit commits, per partition, the offset after the highest contiguous
// finished record; only partitions in only (all when nil). Unless force is
// set, it commits at most once per Settings.CommitInterval
// (docs/worker-runtime.md#commit-interval): a prefix that may not be
// committed yet sets commitAt, when pollWait ends the poll for it.
func (c *Consumer) commit(ctx context.Context, only map[string][]int32, force bool) {
	c.mu.Lock()
	offsets := map[string]map[int32]kgo.EpochOffset{}
	type adv struct {
		ps   *partState
		n    int
		next int64
	}
	var advs []adv
	for _, ps := range c.allParts() {
		if only != nil && !hasPartition(only, ps.topic, ps.partition) {
			continue
		}
		// A busy record's state belongs to its round in flight (written
		// without mu): the prefix ends there.
		n := 0
		for n < len(ps.queue) && !ps.queue[n].busy && ps.queue[n].st == stDone {
			n++
		}
		if n == 0 {
			continue
		}
		last := ps.queue[n-1].rec
		if offsets[ps.topic] == nil {
			offsets[ps.topic] = map[int32]kgo.EpochOffset{}
		}
		offsets[ps.topic][ps.partition] = kgo.EpochOffset{Epoch: last.LeaderEpoch, Offset: last.Offset + 1}
		advs = append(advs, adv{ps, n, last.Offset + 1})
	}
	if len(advs) == 0 {
		if only == nil {
			c.commitAt = time.Time{} // nothing waits (a revoked partition's prefix went with it)
		}
		c.mu.Unlock()
		return
	}
	now := time.Now()
	if due := c.lastCommit.Add(c.cfg.CommitInterval); !force && now.Before(due) {
		c.commitAt = due
		c.mu.Unlock()
		return
	}
	c.lastCommit, c.commitAt = now, time.Time{}
	c.mu.Unlock()
	c.hit(PointBeforeCommit)
	start := time.Now()
	var cerr error
	c.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			cerr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if e := kerrFor(p.ErrorCode); e != nil && cerr == nil {
					cerr = e
				}
			}
		}
	})
	c.m.stage.WithLabelValues(c.cfg.HandlerName, "commit").Observe(time.Since(start).Seconds())
	if c.tracer != nil {
		c.mu.Lock()
		for _, a := range advs {
			c.traceCommit(a.ps.queue[:a.n], start, cerr)
		}
		c.mu.Unlock()
	}
	if cerr != nil {
		c.log("offset commit failed; will retry", "err", cerr)
		return
	}
	c.m.commits.WithLabelValues(c.cfg.HandlerName).Inc()
	c.mu.Lock()
	for _, a := range advs {
		a.ps.queue = a.ps.queue[a.n:]
		a.ps.committed = a.next
		if a.ps.mayWait.Load() {
			waiting := false
			for _, it := range a.ps.queue {
				if it.busy || it.st == stWait { // a busy record may still answer WAIT
					waiting = true
					break
				}
			}
			a.ps.mayWait.Store(waiting)
		}
		if a.ps.hwm > 0 {
			c.m.lag.WithLabelValues(c.cfg.HandlerName, a.ps.topic, strconv.Itoa(int(a.ps.partition))).Set(float64(max(a.ps.hwm-a.next, 0)))
		}
	}
	c.mu.Unlock()
}

func kerrFor(code int16) error {
	if code == 0 {
		return nil
	}
	return fmt.Errorf("offset commit: kafka error code %d", code)
}

func hasPartition(m map[string][]int32, topic string, p int32) bool {
	for _, q := range m[topic] {
		if q == p {
			return true
		}
	}
	return false
}
