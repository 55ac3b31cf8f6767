package relay

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/sluicehq/sluice/eventstore"
)

// Commit hints: the event store's commit notification names the block it
// committed (a Committed notification of eventstore.Subscribe), and a
// block's segment key follows from its positions. The relay uses that in
// two ways, both only shortcuts of what a cycle would find anyway:
//
//   - the segment's GET starts when the notification arrives, while the
//     loop may still be busy with the previous cycle, and the cycle that
//     plans the segment takes the running fetch;
//   - when the hinted blocks continue the checkpoint (the first hinted
//     position is checkpoint+1) and nothing above the checkpoint is done or
//     held, the cycle publishes them without the head and index queries:
//     positions cp+1..LAST are committed, so there is no gap to resolve and
//     no aggregate to hold back (planFromHints).
//
// A hint is never trusted beyond that: a segment that cannot be read or
// does not carry exactly the hinted positions sends the cycle down the
// usual path, and a full cycle (head, gap re-checks, checkpoint watch)
// still runs at least once per poll interval.
//
// A cycle takes the wake-ups left before it starts (relay.go, lead), so
// what their notifications announced must be covered by that cycle. A
// hint cycle covers only the hinted blocks it publishes: a notification
// that leaves no hint behind (a Resync after the stream dropped some, an
// abandonment, a hint turned away because maxHints are held) marks the
// hints missed, and the next cycle reads the head instead; a hint left
// behind a hint cycle (not continuing the checkpoint) makes it say there
// is more.

// maxHints bounds the hinted segments held (each at most
// EVENT_STORE_GROUP_COMMIT_MAX_EVENTS envelopes): hints far ahead of the
// checkpoint (a backlog) are dropped, and the usual plan reads those
// segments when it gets there.
const maxHints = 16

// hints are the fetches started for commit notifications, by first
// position. The listener adds; the leader's loop takes and prunes.
type hints struct {
	mu      sync.Mutex
	ctx     context.Context // the leadership's; nil while not leading
	byFirst map[int64]*hint
	// floor is the checkpoint at the last prune: a hint ending at or below
	// it names positions already published (a repair's or a revival's
	// notification) and is not taken.
	floor int64
	// missed is set by a notification no hint covers (see above) and
	// taken by the next cycle, which then reads the head.
	missed atomic.Bool
}

type hint struct {
	first, last int64
	f           *fetch
}

// lead starts accepting hints for a leadership (ctx) and returns the
// function that ends it.
func (h *hints) lead(ctx context.Context) (end func()) {
	h.mu.Lock()
	h.ctx, h.byFirst, h.floor = ctx, map[int64]*hint{}, 0
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		h.ctx, h.byFirst = nil, nil
		h.mu.Unlock()
	}
}

// addHint records a hint and starts its segment's GET (taking a slot of
// gets only when one is free: a busy relay reads the segment in its
// cycle). It reports false when it turned the hint away (maxHints are
// held): then only a cycle that reads the head finds the block.
func (r *Relay) addHint(first, last int64) bool {
	h := &r.hints
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ctx == nil || last <= h.floor {
		return true // not leading (the first cycle is a full one), or published
	}
	if x := h.byFirst[first]; x != nil {
		if x.last == last && !x.f.failed() {
			return true // a repeated notification
		}
		delete(h.byFirst, first) // a failed GET, or another block there
	}
	if len(h.byFirst) >= maxHints {
		return false
	}
	f := newFetch(eventstore.SegmentInfo{Key: eventstore.SegmentKey(first, last), First: first, Last: last})
	h.byFirst[first] = &hint{first: first, last: last, f: f}
	select {
	case r.gets <- struct{}{}:
		r.runFetch(h.ctx, f)
	default:
	}
	return true
}

// fetchFor returns the hinted fetch of seg's key (a store of one shard:
// the whole segment either way), or a new one reading seg. A hinted fetch
// that failed is dropped (the new one reads the segment again).
func (h *hints) fetchFor(seg eventstore.SegmentInfo) *fetch {
	first, _, err := eventstore.ParseSegmentKey(seg.Key)
	if err == nil {
		h.mu.Lock()
		defer h.mu.Unlock()
		if x := h.byFirst[first]; x != nil && x.f.key == seg.Key {
			if !x.f.failed() {
				return x.f
			}
			delete(h.byFirst, first)
		}
	}
	return newFetch(seg)
}

// prune drops the hints the checkpoint cp has passed and those whose GET
// failed, and turns away later hints at or below cp.
func (h *hints) prune(cp int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pruneLocked(cp)
}

func (h *hints) pruneLocked(cp int64) {
	h.floor = cp
	for first, x := range h.byFirst {
		if x.last <= cp || x.f.failed() {
			delete(h.byFirst, first)
		}
	}
}

// chain returns the hinted fetches of the blocks from..X that follow each
// other without a hole, dropping hints the checkpoint (from-1) has passed.
func (h *hints) chain(from int64) []*hint {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pruneLocked(from - 1)
	var out []*hint
	for next := from; ; {
		x := h.byFirst[next]
		if x == nil {
			return out
		}
		out = append(out, x)
		next = x.last + 1
	}
}

// pending reports whether a hint past cp is held (after dropping those cp
// has passed): a block committed and notified that a cycle has still to
// publish.
func (h *hints) pending(cp int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pruneLocked(cp)
	return len(h.byFirst) > 0
}

// drop forgets the hint of the block starting at first.
func (h *hints) drop(first int64) {
	h.mu.Lock()
	delete(h.byFirst, first)
	h.mu.Unlock()
}

// failed reports whether f is done with an error.
func (f *fetch) failed() bool {
	select {
	case <-f.done:
		return f.err != nil
	default:
		return false
	}
}
