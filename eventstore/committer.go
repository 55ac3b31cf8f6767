package eventstore

import (
	"time"
)

// group is one unit of group commit: the leaders the worker processes.
type group struct {
	items    []*item
	oldest   time.Time // arrival of the group's oldest item
	started  time.Time // when the committer dispatched it
	inFlight int       // groups in flight when it started, itself included
}

// committer state, owned by the run goroutine.
type committer struct {
	s         *Store
	pending   []*item
	leaders   map[string]*item    // event_id → the item carrying it (in a group in flight)
	slots     map[string]struct{} // slot keys in flight
	inFlight  int
	reserving int // groups in their reservation transaction
	// lastArrival is when the previous appends arrived (hooks.gapNow): an
	// append that follows it within GroupCommitLinger is part of a steady
	// stream (item.stream).
	lastArrival time.Time
}

// run is the committer: it gathers pending appends into groups of up to
// GroupCommitMaxEvents, waiting at most GroupCommitMaxWait after the oldest
// one arrived (gather), and hands each group to a worker; at most
// MaxInFlightGroups run at once. Only this goroutine touches the pending list, the in-flight
// maps and item followers; workers hand groups back on groupDone.
func (s *Store) run() {
	defer close(s.exited)
	c := &committer{s: s, leaders: map[string]*item{}, slots: map[string]struct{}{}}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	quit := s.quit
	quitting := false
	for {
		select {
		case batch := <-s.in:
			now := time.Now()
			stream := c.arrival()
			for _, it := range batch {
				it.arrived, it.stream = now, stream
			}
			c.pending = append(c.pending, batch...)
		case <-s.reserved:
			c.reserving--
		case g := <-s.groupDone:
			c.finish(g)
		case <-timer.C:
		case <-quit:
			quitting, quit = true, nil
		}
		if quitting {
			// Take what is still queued without blocking: Close only
			// closes quit once no Append is between its check and send.
			for drained := false; !drained; {
				select {
				case batch := <-s.in:
					c.pending = append(c.pending, batch...)
				default:
					drained = true
				}
			}
		}
		wake := c.dispatch(time.Now(), quitting)
		if quitting && c.inFlight == 0 && !c.anyDispatchable(time.Now()) {
			for _, it := range c.pending {
				it.res = Result{Err: ErrClosed}
				c.complete(it)
			}
			return
		}
		if !wake.IsZero() {
			timer.Reset(max(time.Until(wake), 0))
		}
	}
}

// dispatch starts a group when one is due, fewer than MaxReservingGroups
// are in their reservation round trip and fewer than MaxInFlightGroups are
// between reservation and commit. With the default of one reservation at a
// time (they serialise on log_head anyway) segment writes and commits still
// overlap, and appends arriving during a reservation make the next group
// larger. It returns when the committer should wake up next (zero: no timer
// needed).
func (c *committer) dispatch(now time.Time, quitting bool) time.Time {
	cfg := c.s.cfg
	for c.reserving < cfg.MaxReservingGroups && c.inFlight < cfg.MaxInFlightGroups {
		ready, oldest, stream := 0, time.Time{}, false
		for _, it := range c.pending {
			if it.notBefore.After(now) {
				continue
			}
			if oldest.IsZero() || it.arrived.Before(oldest) {
				oldest, stream = it.arrived, it.stream
			}
			ready++
		}
		if ready == 0 {
			break
		}
		if ready < cfg.GroupCommitMaxEvents && !quitting && now.Before(oldest.Add(c.gather(stream))) {
			break
		}
		g := c.form(now)
		if len(g.items) == 0 {
			break // everything ready waits for a group in flight
		}
		c.inFlight++
		c.reserving++
		g.started, g.inFlight = now, c.inFlight
		go func() {
			c.s.processGroup(g)
			c.s.groupDone <- g
		}()
	}
	var wake time.Time
	for _, it := range c.pending {
		t := it.notBefore
		if !t.After(now) {
			if c.reserving >= cfg.MaxReservingGroups || c.inFlight >= cfg.MaxInFlightGroups {
				continue // the reservation or a finishing group wakes us
			}
			if c.blocked(it) {
				continue
			}
			t = it.arrived.Add(c.gather(it.stream))
		}
		if wake.IsZero() || t.Before(wake) {
			wake = t
		}
	}
	return wake
}

// gather is how long the oldest ready append waits for others to join its
// group (docs/eventstore.md#append-protocol-group-commit): GroupCommitMaxWait
// while a group is in flight. An idle committer starts at once — waiting
// would only add latency to a lone append, and appends arriving during this
// group's reservation gather for the next one — unless the append came in
// a steady stream (within GroupCommitLinger of the appends before it):
// then it waits GroupCommitLinger (at most GroupCommitMaxWait), so that a
// paced load shares a group's reservation, segment, commit and
// notification as a burst does, instead of paying one of each per append.
func (c *committer) gather(stream bool) time.Duration {
	cfg := c.s.cfg
	switch {
	case c.inFlight > 0:
		return cfg.GroupCommitMaxWait
	case stream:
		return min(cfg.GroupCommitLinger, cfg.GroupCommitMaxWait)
	}
	return 0
}

// arrival notes that appends arrived (on the hooks.gapNow clock) and
// reports whether they follow the previous ones within GroupCommitLinger.
func (c *committer) arrival() bool {
	l := c.s.cfg.GroupCommitLinger
	t := c.s.hooks.gapNow()
	stream := l > 0 && !c.lastArrival.IsZero() && t.Sub(c.lastArrival) < l
	c.lastArrival = t
	return stream
}

func (c *committer) blocked(it *item) bool {
	if _, ok := c.leaders[it.env.EventID]; ok {
		return true
	}
	if it.slotKey != "" {
		if _, ok := c.slots[it.slotKey]; ok {
			return true
		}
	}
	return false
}

func (c *committer) anyDispatchable(now time.Time) bool {
	for _, it := range c.pending {
		if !it.notBefore.After(now) && !c.blocked(it) {
			return true
		}
	}
	return false
}

// form takes the next group from pending. An append of an event_id already
// in flight joins that one as a follower when its content is identical, and
// otherwise waits for it to finish (it then meets the stored row); so do
// appends to a slot in flight.
func (c *committer) form(now time.Time) *group {
	g := &group{}
	units := c.unitsReady(now)
	rest := c.pending[:0]
	for _, it := range c.pending {
		if it.ctx.Err() != nil {
			if it = c.abandonCaller(it); it == nil {
				continue
			}
		}
		if u := it.unit; u != nil {
			// An atomic batch goes into one group whole: when all its
			// members may go, and (unless the group is empty) they fit.
			st := units[u]
			if !st.decided {
				st.decided = true
				st.take = st.ready && (len(g.items) == 0 || len(g.items)+st.n <= c.s.cfg.GroupCommitMaxEvents)
				units[u] = st
			}
			if !st.take {
				rest = append(rest, it)
				continue
			}
			c.leaders[it.env.EventID] = it
			if g.oldest.IsZero() || it.arrived.Before(g.oldest) {
				g.oldest = it.arrived
			}
			g.items = append(g.items, it)
			continue
		}
		if len(g.items) >= c.s.cfg.GroupCommitMaxEvents || it.notBefore.After(now) {
			rest = append(rest, it)
			continue
		}
		if l, ok := c.leaders[it.env.EventID]; ok {
			if l.unit == nil && it.hashWithTime(l.env.OccurredAt) == l.hash {
				l.followers = append(l.followers, it)
			} else {
				rest = append(rest, it)
			}
			continue
		}
		if it.slotKey != "" {
			if _, ok := c.slots[it.slotKey]; ok {
				rest = append(rest, it)
				continue
			}
			c.slots[it.slotKey] = struct{}{}
		}
		c.leaders[it.env.EventID] = it
		if g.oldest.IsZero() || it.arrived.Before(g.oldest) {
			g.oldest = it.arrived
		}
		g.items = append(g.items, it)
	}
	clear(c.pending[len(rest):])
	c.pending = rest
	return g
}

// unitState is what form knows of an atomic batch in pending.
type unitState struct {
	n             int  // members pending
	ready         bool // every pending member may go now
	decided, take bool
}

// unitsReady looks at the atomic batches in pending: a batch may go when
// none of its members waits (notBefore) or has an event_id in flight.
func (c *committer) unitsReady(now time.Time) map[*unit]unitState {
	var out map[*unit]unitState
	for _, it := range c.pending {
		u := it.unit
		if u == nil {
			continue
		}
		if out == nil {
			out = map[*unit]unitState{}
		}
		st, seen := out[u]
		if !seen {
			st.ready = true
		}
		st.n++
		if it.notBefore.After(now) || it.ctx.Err() != nil {
			st.ready = false
		}
		if _, ok := c.leaders[it.env.EventID]; ok {
			st.ready = false
		}
		out[u] = st
	}
	return out
}

// finish takes a group back from its worker: requeued items go back to
// pending (keeping their followers), the others complete.
func (c *committer) finish(g *group) {
	c.inFlight--
	for _, it := range g.items {
		if c.leaders[it.env.EventID] == it {
			delete(c.leaders, it.env.EventID)
		}
		if it.slotKey != "" {
			delete(c.slots, it.slotKey)
		}
		switch {
		case it.requeue && it.ctx.Err() != nil:
			if next := c.abandonCaller(it); next != nil {
				c.pending = append(c.pending, next)
			}
		case it.requeue:
			it.requeue = false
			c.pending = append(c.pending, it)
		default:
			c.complete(it)
		}
	}
}

// abandonCaller completes an item whose caller is gone (its context is
// done) and returns the follower that takes its place, or nil.
func (c *committer) abandonCaller(it *item) *item {
	fs := it.followers
	it.followers = nil
	it.res = Result{Err: it.ctx.Err()}
	c.complete(it)
	for len(fs) > 0 && fs[0].ctx.Err() != nil {
		fs[0].res = Result{Err: fs[0].ctx.Err()}
		close(fs[0].done)
		fs = fs[1:]
	}
	if len(fs) == 0 {
		return nil
	}
	next := fs[0]
	next.followers = fs[1:]
	next.requeue, next.notBefore = false, time.Time{}
	return next
}

// complete hands an item's result to its caller and its followers.
func (c *committer) complete(it *item) {
	for _, f := range it.followers {
		f.res = it.res
		if f.res.Err == nil {
			f.res.Duplicate = true
		}
		close(f.done)
	}
	it.followers = nil
	close(it.done)
}
