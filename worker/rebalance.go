package worker

// This file holds flow control and what happens when partitions are
// revoked or lost and when Run drains.

import (
	"context"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// flowControl pauses fetching while too much is unfinished or the registry
// is unreachable, and resumes it afterwards.
func (c *Consumer) flowControl() {
	c.mu.Lock()
	idle := c.pending == 0
	c.mu.Unlock()
	if idle {
		// Nothing waits for a dependency of the handler any more (the
		// records it held were revoked): no outage to report; the next
		// record finds out again.
		c.leaveHandlerOutages()
	}
	c.mu.Lock()
	pause := c.pending >= c.cfg.MaxPending || c.InOutage() || c.opPaused.Load()
	was := c.paused
	c.paused = pause
	c.mu.Unlock()
	if pause && !was {
		c.cl.PauseFetchTopics(c.cfg.Topic)
	} else if !pause && was {
		c.cl.ResumeFetchTopics(c.cfg.Topic)
	}
	c.quiesce()
}

// onRevoked hands back the claims held on the revoked partitions (see
// handBack), commits their done prefix and forgets their records (the next
// owner starts at the committed offset and claims at once: no lease of
// ours is left for it to wait out). With BlockRebalanceOnPoll it never runs
// while a round is in flight.
func (c *Consumer) onRevoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	c.waitRounds() // none in flight but for a corner of franz-go's polling; see onLost
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drainGrace)
	defer cancel()
	c.handBack(hctx, revoked)
	c.commit(ctx, revoked, true)
	c.forget(revoked)
}

// onLost is onRevoked without the commit (the partitions are no longer
// ours to commit): the registry claims are handed back all the same.
func (c *Consumer) onLost(ctx context.Context, _ *kgo.Client, lost map[string][]int32) {
	// The loop joins every round before it allows a rebalance, but a poll
	// that returns nothing may not hold off rebalances (franz-go), and a
	// round of due retries can start after it: wait for the rounds, which
	// never wait for these callbacks.
	c.waitRounds()
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drainGrace)
	defer cancel()
	c.handBack(hctx, lost)
	c.forget(lost)
}

// waitRounds waits until no round is being started or in flight.
func (c *Consumer) waitRounds() {
	c.roundMu.Lock()
	defer c.roundMu.Unlock()
	c.rounds.Wait()
}

func (c *Consumer) forget(tps map[string][]int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for t, ps := range tps {
		for _, p := range ps {
			if st := c.parts[t][p]; st != nil {
				for _, it := range st.queue {
					if it.st != stDone {
						c.pending--
					}
				}
				delete(c.parts[t], p)
				c.partList = nil
				c.m.lag.DeleteLabelValues(c.cfg.HandlerName, t, strconv.Itoa(int(p)))
			}
		}
	}
}

// drainGrace bounds the drain's bookkeeping when SHUTDOWN_TIMEOUT has
// already run out.
const drainGrace = 5 * time.Second

// drain finishes what can be finished after the Run context ended (see
// handBack) and makes the final commit of the done prefix.
func (c *Consumer) drain(ctx context.Context) {
	c.handBack(ctx, nil)
	c.commit(ctx, nil, true)
}
