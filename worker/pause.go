package worker

// This file holds the operator pause of a group (Deps.Pause): a flag
// read every PausePoll that flowControl honours like backpressure.

import (
	"context"
	"time"
)

// Paused reports whether the consumer honours an operator pause of its
// group now (as last read from Deps.Pause).
func (c *Consumer) Paused() bool { return c.opPaused.Load() }

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
		c.m.paused.WithLabelValues(c.cfg.HandlerName).Set(1)
		c.deps.Logger.Info("group paused by an operator: fetching stops once in-flight records are committed",
			"handler", c.cfg.HandlerName, "group", c.cfg.Group)
	} else {
		c.m.paused.WithLabelValues(c.cfg.HandlerName).Set(0)
		c.deps.Logger.Info("group resumed by an operator: fetching restarts", "handler", c.cfg.HandlerName, "group", c.cfg.Group)
	}
}
