package worker

// This file holds the operator pause of a group (Deps.Pause): a flag
// read every PausePoll that flowControl honours like backpressure, and the
// moment the pause has taken effect (sluice_worker_paused).

import (
	"context"
	"slices"
	"time"
)

// Paused reports whether the consumer honours an operator pause of its
// group now (as last read from Deps.Pause). Records fetched before the
// flag was read may still be running: Quiesced says when they are done.
func (c *Consumer) Paused() bool { return c.opPaused.Load() }

// Quiesced reports whether an operator pause has taken effect
// (sluice_worker_paused is 1): the flag is set, the Kafka client fetches
// nothing of the topic, no round is in flight and every record fetched
// before is finished (handled, dead-lettered or handed back) with its
// offset committed. From then on the consumer handles nothing until the
// group is resumed; it is false again once fetching restarts.
func (c *Consumer) Quiesced() bool { return c.quiesced.Load() }

// watchPause reads the pause flag every PausePoll until ctx ends.
func (c *Consumer) watchPause(ctx context.Context) {
	t := time.NewTicker(c.cfg.PausePoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.readPause(ctx)
		}
	}
}

// readPause reads the flag once. An error (the registry out) keeps the
// last known state: an outage neither pauses nor resumes the group.
func (c *Consumer) readPause(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, max(c.cfg.PausePoll, time.Second))
	defer cancel()
	paused, err := c.deps.Pause.Paused(rctx, c.cfg.Group)
	if err != nil {
		if ctx.Err() == nil {
			c.deps.Logger.Debug("pause flag unreadable; keeping the last known state", "handler", c.cfg.HandlerName,
				"group", c.cfg.Group, "paused", c.opPaused.Load(), "err", err)
		}
		return
	}
	if c.opPaused.Swap(paused) == paused {
		return
	}
	if paused {
		c.deps.Logger.Info("group paused by an operator: fetching stops once in-flight records are committed",
			"handler", c.cfg.HandlerName, "group", c.cfg.Group)
	} else {
		c.deps.Logger.Info("group resumed by an operator: fetching restarts", "handler", c.cfg.HandlerName, "group", c.cfg.Group)
	}
}

// quiesce sets Quiesced and sluice_worker_paused from the consumer's
// state. The loop calls it after each turn's flow control: it is the only
// goroutine that polls, and franz-go drops what it had buffered of a topic
// once the topic is paused, so no record of the topic reaches the runtime
// after the client lists it as paused. The client's own list is asked (not
// the runtime's intent): a pause that did not reach the client is not
// reported as taken.
func (c *Consumer) quiesce() {
	quiet := c.opPaused.Load() && len(c.inflight) == 0 && slices.Contains(c.cl.PauseFetchTopics(), c.cfg.Topic) && c.drained()
	if c.quiesced.Swap(quiet) == quiet {
		return
	}
	if quiet {
		c.m.paused.WithLabelValues(c.cfg.HandlerName).Set(1)
		c.deps.Logger.Info("group paused: fetching stopped, every record fetched before is finished and committed",
			"handler", c.cfg.HandlerName, "group", c.cfg.Group)
	} else {
		c.m.paused.WithLabelValues(c.cfg.HandlerName).Set(0)
	}
}

// drained reports whether no fetched record is left: every one finished
// and its offset committed (the commit trims the queues), or handed back
// with its partition.
func (c *Consumer) drained() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending > 0 {
		return false
	}
	for _, m := range c.parts {
		for _, ps := range m {
			if len(ps.queue) > 0 {
				return false
			}
		}
	}
	return true
}
