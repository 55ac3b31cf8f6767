package worker

// This file holds the operator pause of a group (Options.Pause): a flag
// read every PausePoll that flowControl honours like backpressure.

import (
	"context"
	"time"
)

// Paused reports whether the consumer honours an operator pause of its
// group now (as last read from Options.Pause).
func (c *Consumer) Paused() bool { return c.opPaused.Load() }

// watchPause reads the pause flag every PausePoll until ctx ends.
func (c *Consumer) watchPause(ctx context.Context) {
	t := time.NewTicker(c.o.PausePoll)
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
	rctx, cancel := context.WithTimeout(ctx, max(c.o.PausePoll, time.Second))
	defer cancel()
	paused, err := c.o.Pause.Paused(rctx, c.o.Group)
	if err != nil {
		if ctx.Err() == nil {
			c.o.Logger.Debug("pause flag unreadable; keeping the last known state", "handler", c.o.HandlerName,
				"group", c.o.Group, "paused", c.opPaused.Load(), "err", err)
		}
		return
	}
	if c.opPaused.Swap(paused) == paused {
		return
	}
	if paused {
		c.m.paused.WithLabelValues(c.o.HandlerName).Set(1)
		c.o.Logger.Info("group paused by an operator: fetching stops once in-flight records are committed",
			"handler", c.o.HandlerName, "group", c.o.Group)
	} else {
		c.m.paused.WithLabelValues(c.o.HandlerName).Set(0)
		c.o.Logger.Info("group resumed by an operator: fetching restarts", "handler", c.o.HandlerName, "group", c.o.Group)
	}
}
