package relay

import "time"

// leaderState is what a leader knows beyond the durable checkpoint.
type leaderState struct {
	epoch int64
	cp    Checkpoint
	etag  string
	// done holds positions above cp.Position that Kafka acknowledged or
	// that were resolved as abandoned; the checkpoint advances over them
	// once the positions below are done too.
	done map[int64]struct{}
	// abandoned are resolved ranges above cp.Position; they move into
	// cp.PendingGaps when the checkpoint passes them.
	abandoned []Gap
	dedup     *idSet
	dirty     bool
	// lastGapCheck and gapCursor pace the lookback re-checks.
	lastGapCheck time.Time
	gapCursor    int
	// lastStat paces the check for checkpoints written by others.
	lastStat time.Time

	// The pipeline's counters (pipeline.go): records handed to the
	// producer, records whose outcome was processed, the processed count
	// at the snapshot of the last started write and of the last durable
	// one. produced - durable is what a crash may re-publish.
	produced, processed, snapSeq, durable int64
	// inflight is the background checkpoint write, nil when none.
	inflight *saveOp
	// lastSave is when the last write started.
	lastSave time.Time
	// prefetch is the next cycle's listing and first GETs (backlog).
	prefetch *prefetch
	// lastList is when a cycle last listed segments or probed the
	// in-flight ones (planFromIndex probes at most once per poll interval).
	lastList time.Time
	// lastFull is when the last cycle with the head query started (a
	// cycle planned from commit hints skips it; hints.go).
	lastFull time.Time
	// lastParkedCount is when sluice_relay_parked_records was last read from the
	// table (parking.go).
	lastParkedCount time.Time
}

func newLeaderState(epoch int64, cp Checkpoint, etag string, dedupMax int) *leaderState {
	ls := &leaderState{epoch: epoch, cp: cp, etag: etag, done: map[int64]struct{}{}, dedup: newIDSet(dedupMax), lastSave: time.Now()}
	for _, id := range cp.RecentEventIDs {
		ls.dedup.add(id)
	}
	return ls
}

// markDone records position p as acknowledged or resolved.
func (ls *leaderState) markDone(p int64) {
	if p > ls.cp.Position {
		ls.done[p] = struct{}{}
	}
}

func (ls *leaderState) isDone(p int64) bool {
	if p <= ls.cp.Position {
		return true
	}
	_, ok := ls.done[p]
	return ok
}

// advance moves the checkpoint over the contiguous done prefix and the
// abandoned ranges it passes into the pending gaps. It reports whether the
// position moved.
func (ls *leaderState) advance() bool {
	start := ls.cp.Position
	for {
		if _, ok := ls.done[ls.cp.Position+1]; !ok {
			break
		}
		delete(ls.done, ls.cp.Position+1)
		ls.cp.Position++
	}
	keep := ls.abandoned[:0]
	for _, g := range ls.abandoned {
		if g.Last <= ls.cp.Position {
			ls.cp.PendingGaps = appendGap(ls.cp.PendingGaps, g)
			ls.dirty = true
		} else {
			keep = append(keep, g)
		}
	}
	ls.abandoned = keep
	if ls.cp.Position != start {
		ls.dirty = true
		return true
	}
	return false
}

// addAbandoned records position p as resolved-abandoned at time at.
func (ls *leaderState) addAbandoned(p int64, at time.Time) {
	ls.markDone(p)
	ls.abandoned = appendGap(ls.abandoned, Gap{First: p, Last: p, Since: at})
}

// appendGap appends g, merging it into the last gap when adjacent.
func appendGap(gaps []Gap, g Gap) []Gap {
	if n := len(gaps); n > 0 && gaps[n-1].Last+1 == g.First {
		gaps[n-1].Last = g.Last
		return gaps
	}
	return append(gaps, g)
}

// idSet is a bounded set of event ids that forgets the oldest first.
type idSet struct {
	max   int
	ids   map[string]struct{}
	order []string
	start int
}

func newIDSet(max int) *idSet {
	return &idSet{max: max, ids: make(map[string]struct{}, min(max, 1<<16))}
}

func (s *idSet) has(id string) bool {
	_, ok := s.ids[id]
	return ok
}

func (s *idSet) add(id string) {
	if _, ok := s.ids[id]; ok {
		return
	}
	s.ids[id] = struct{}{}
	s.order = append(s.order, id)
	for len(s.ids) > s.max {
		delete(s.ids, s.order[s.start])
		s.order[s.start] = ""
		s.start++
	}
	if s.start > 1024 && s.start > len(s.order)/2 {
		s.order = append([]string(nil), s.order[s.start:]...)
		s.start = 0
	}
}

// recent returns up to n of the newest ids, oldest first.
func (s *idSet) recent(n int) []string {
	live := s.order[s.start:]
	if len(live) > n {
		live = live[len(live)-n:]
	}
	return append([]string(nil), live...)
}

func (s *idSet) len() int { return len(s.ids) }
