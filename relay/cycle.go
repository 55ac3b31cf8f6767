package relay

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore"
)

// The store's row states (eventstore.State*), plus the relay's own
// "missing" for a position below the head without any row (a rebuilt
// index).
const (
	stateReserved  = eventstore.StateReserved
	stateCommitted = eventstore.StateCommitted
	stateAbandoned = eventstore.StateAbandoned
	stateMissing   = "missing"
)

// item is one step of a cycle's walk in position order: a segment to
// publish, or a run of uncommitted positions (a gap).
type item struct {
	first int64
	seg   *fetch
	rows  []eventstore.IndexEntry
}

// fetch is one segment GET, started ahead of the walk (or by the previous
// cycle's prefetch). seg says what to read: over a store of more than one
// shard, with the byte range of the shard's lines when it is known
// (eventstore.ShardLog.ReadSegment: a ranged GET of them alone).
type fetch struct {
	key     string
	seg     eventstore.SegmentInfo
	started atomic.Bool
	done    chan struct{}
	evs     []eventstore.Event
	err     error
}

func newFetch(seg eventstore.SegmentInfo) *fetch {
	return &fetch{key: seg.Key, seg: seg, done: make(chan struct{})}
}

type plan struct {
	items     []item
	truncated bool  // more to do at once
	next      int64 // when truncated: where the next listing starts
	backlog   bool  // more to do at once, past an index plan's batch (no look-ahead)
	repair    bool  // reserved rows older than the append timeout: repair first
	// prefetched is the prefetch this plan used; it is cancelled when the
	// cycle ends.
	prefetched *prefetch
}

// endRun closes a run of index rows without a segment to read (in flight,
// abandoned, missing): the run becomes one item, resolved row by row by the
// walk.
func (pl *plan) endRun(run *[]eventstore.IndexEntry) {
	if len(*run) > 0 {
		pl.items = append(pl.items, item{first: (*run)[0].Position, rows: *run})
		*run = nil
	}
}

type aggKey struct{ typ, id string }

// cycle runs one pass: re-check pending gaps, list after the checkpoint,
// resolve holes through the index, GET segments in parallel and publish in
// position order, flushing and checkpointing every flush batch. more says
// there is more to do at once.
func (r *Relay) cycle(ctx context.Context, ls *leaderState) (more bool, err error) {
	// Whatever the plan, hints the checkpoint passed are dropped (they
	// would otherwise fill the map and turn fresh hints away).
	defer func() { r.hints.prune(ls.cp.Position) }()
	if items, last, ok := r.planFromHints(ctx, ls); ok {
		if _, err := r.walk(ctx, ls, items, time.Now()); err != nil {
			return false, err
		}
		head := max(r.lastHead(), last)
		r.noteProgress(head, ls.cp.Position)
		// More hinted blocks (continuing the checkpoint or not: this cycle
		// took their wake-ups), or the last full cycle saw positions above
		// it (events held back behind the position just published, blocks
		// committed before their hints were taken): the next cycle runs at
		// once, as a full one when no hint continues the checkpoint.
		return r.hints.pending(ls.cp.Position) || head > ls.cp.Position, nil
	}
	ls.lastFull = time.Now()
	head, now, err := r.headAndNow(ctx)
	if err != nil {
		return false, err
	}
	r.noteProgress(head, ls.cp.Position)
	r.refreshParkedGauge(ctx, ls)
	if err := r.watchCheckpoint(ctx, ls); err != nil {
		return false, err
	}
	if err := r.recheckGaps(ctx, ls, now); err != nil {
		return false, err
	}
	planned := time.Now()
	pl, err := r.plan(ctx, ls, head, now)
	if pl.prefetched != nil {
		defer pl.prefetched.cancel()
	}
	if err != nil {
		return false, err
	}
	if pl.repair {
		return r.repair(ctx, planned)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.startFetches(cctx, pl.items)
	if pl.truncated {
		// A backlog: list the next page and GET its first segments while
		// this cycle publishes.
		r.startPrefetch(ctx, ls, pl.next)
	}
	n, err := r.walk(ctx, ls, pl.items, now)
	return pl.truncated || pl.backlog || n > 0, err
}

// plan lists segments after the checkpoint and turns the holes between them
// into index lookups.
func (r *Relay) plan(ctx context.Context, ls *leaderState, head int64, now time.Time) (plan, error) {
	if pl, ok, err := r.planFromIndex(ctx, ls, head, now); err != nil || ok {
		return pl, err
	}
	r.m.plans.WithLabelValues("list").Inc()
	ls.lastList = time.Now()
	var pl plan
	pf := ls.takePrefetch(ls.cp.Position)
	pl.prefetched = pf
	segs, err := r.listAfter(ctx, ls, pf, &pl)
	if err != nil {
		return pl, err
	}
	listed := map[string]bool{}
	for _, s := range segs {
		listed[s.Key] = true
	}
	if err := r.planHoles(ctx, ls, pf, &pl, holesOf(segs, ls.cp.Position, head, pl.truncated), listed, now); err != nil || pl.repair {
		return pl, err
	}
	for _, s := range segs {
		if !allDone(ls, s) {
			pl.items = append(pl.items, item{first: s.First, seg: pf.fetchFor(&r.hints, s)})
		}
	}
	sort.SliceStable(pl.items, func(i, j int) bool {
		if pl.items[i].first != pl.items[j].first {
			return pl.items[i].first < pl.items[j].first
		}
		return pl.items[i].seg == nil && pl.items[j].seg != nil
	})
	return pl, nil
}

// listAfter lists the segments after the checkpoint (the prefetched page
// first), page by page, until a page is short, a batch of segments is to
// be fetched (pl.truncated, pl.next: a backlog) or a segment lies more than
// MaxWindow past the checkpoint. The segments come sorted by position.
func (r *Relay) listAfter(ctx context.Context, ls *leaderState, pf *prefetch, pl *plan) ([]eventstore.SegmentInfo, error) {
	base := ls.cp.Position
	batch := r.cfg.BatchSize
	var segs []eventstore.SegmentInfo
	after, toFetch := base, 0
listing:
	for {
		page, err := pf.listing(ctx, after)
		if page == nil && err == nil {
			page, err = r.segments(ctx, after, batch)
		}
		if err != nil {
			return nil, err
		}
		for _, s := range page {
			if s.Last <= base {
				continue
			}
			if len(segs) > 0 && s.First-base > r.cfg.MaxWindow {
				// Positions this far past the checkpoint wait until the
				// gap holding it back resolves (bounded memory).
				break listing
			}
			segs = append(segs, s)
			after = max(after, s.Last)
			if !allDone(ls, s) {
				toFetch++
			}
		}
		if len(page) < batch {
			break
		}
		if toFetch >= batch {
			pl.truncated, pl.next = true, after
			break
		}
	}
	sort.SliceStable(segs, func(i, j int) bool {
		if segs[i].First != segs[j].First {
			return segs[i].First < segs[j].First
		}
		return segs[i].Last < segs[j].Last
	})
	return segs, nil
}

// holesOf returns the position ranges after base that no segment of segs
// (sorted) covers, up to the head unless the listing was truncated.
func holesOf(segs []eventstore.SegmentInfo, base, head int64, truncated bool) [][2]int64 {
	c := base
	var holes [][2]int64
	for _, s := range segs {
		if s.First > c+1 {
			holes = append(holes, [2]int64{c + 1, s.First - 1})
		}
		c = max(c, s.Last)
	}
	if !truncated && head > c {
		holes = append(holes, [2]int64{c + 1, head})
	}
	return holes
}

// planHoles resolves the holes through the index by the hole rules
// (docs/relay.md#what-it-does-per-cycle): the segments of committed rows
// not listed become items read directly (rule 1), runs of other rows become
// items the walk resolves row by row (rules 2 and 4), and a reservation
// past the append timeout sets pl.repair (rule 3).
func (r *Relay) planHoles(ctx context.Context, ls *leaderState, pf *prefetch, pl *plan, holes [][2]int64, listed map[string]bool, now time.Time) error {
	// direct: the segments read by rule 1, each with the committed rows
	// of the holes that name it (the lines to read, eventstore.SegmentInfo.Add),
	// and the plan item that reads it.
	direct := map[string]*directRead{}
	var reads []*directRead
	directRows := 0
	for _, h := range holes {
		rows, err := r.indexRange(ctx, h[0], h[1])
		if err != nil {
			return err
		}
		var run []eventstore.IndexEntry
		exp := h[0]
		for _, row := range rows {
			for ; exp < row.Position; exp++ {
				run = append(run, eventstore.IndexEntry{Position: exp, State: stateMissing})
			}
			exp = row.Position + 1
			switch row.State {
			case stateCommitted:
				pl.endRun(&run)
				if !ls.isDone(row.Position) {
					directRows++
				}
				if listed[row.SegmentKey] {
					continue
				}
				if d := direct[row.SegmentKey]; d != nil {
					d.seg.Add(row)
					continue
				}
				first, err := r.firstOf(row)
				if err != nil {
					return err
				}
				d := &directRead{item: len(pl.items)}
				d.seg.Add(row)
				direct[row.SegmentKey] = d
				reads = append(reads, d)
				pl.items = append(pl.items, item{first: first})
			case stateReserved:
				if now.Sub(row.ReservedAt) >= r.cfg.AppendTimeout {
					pl.repair = true
				}
				run = append(run, row)
			default:
				run = append(run, row)
			}
		}
		for ; exp <= h[1]; exp++ {
			run = append(run, eventstore.IndexEntry{Position: exp, State: stateMissing})
		}
		pl.endRun(&run)
	}
	for _, d := range reads {
		pl.items[d.item].seg = pf.fetchFor(&r.hints, d.seg)
	}
	if directRows > 0 && !pl.repair {
		r.m.gaps.WithLabelValues("committed_direct").Add(float64(directRows))
		r.log.Debug("relay: committed positions missing from the listing; reading their segments directly", "positions", directRows, "segments", len(direct))
	}
	return nil
}

// directRead is a segment a plan reads for the committed rows of the
// index it found (hole rule 1, the index plan): seg spans those rows, so
// that over a store of more than one shard only the shard's lines among
// them are read (eventstore.ShardLog.ReadSegment); item is its plan item.
type directRead struct {
	seg  eventstore.SegmentInfo
	item int
}

// planFromIndex is the plan of a cycle that is close behind the head: when
// every position between the checkpoint and the head (at most one batch)
// is committed or in flight, the index names the committed positions'
// segments and they are read directly (hole rule 1 of docs/relay.md#what-it-does-per-cycle applied to the
// whole window), without the LIST; in-flight positions (reserved, younger
// than the append timeout: rule 2) become runs that hold their aggregates
// back, as the LIST plan's holes do. At low load the LIST is most of a
// cycle (on MinIO here p50 5 ms, p99 21 ms, against 0.4 ms for the index
// query), and every append waits for a cycle or two; with groups in flight
// committing out of order, a window with an in-flight position is common.
// In a store of one shard a short backlog (up to indexPlanBacklog batches
// past the checkpoint) is planned the same way, one batch of positions per
// cycle, when that batch is all committed: a relay that fell a little
// behind (a slow flush, a pause) catches up without listing, where the
// LIST, on the file backend a walk of every segment of the store, made
// each cycle slower the further behind it was.
// ok is false, and the cycle lists as usual, for a longer backlog (or one
// whose first batch holds a position in flight), a prefetch in
// progress, or any position of the window abandoned, missing or reserved
// past the append timeout (the LIST and the hole rules of docs/relay.md#what-it-does-per-cycle deal
// with those; an abandoned row past the head is passed over: no LIST
// resolves it before a commit follows it). Once per poll interval a store of one shard's window also
// takes the reservations past the head (whose segments a LIST would find)
// and looks for their segments (findWritten): a segment written but not
// yet committed — its writer died between PUT and commit — is published
// from it, as the LIST would; one whose GET finds nothing is in flight.
// That probe reads the in-flight segments by key, never a listing: on the
// file backend a LIST walks every segment of the store, so a cycle that
// listed once per poll interval cost the relay time proportional to the
// store's size (docs/relay.md#what-it-does-per-cycle). A store of more
// shards lists once per poll interval while positions are in flight, as
// before (its listing is the index: ShardLog.Segments). Between probes,
// segments written but not yet committed wait for their commit's
// notification.
func (r *Relay) planFromIndex(ctx context.Context, ls *leaderState, head int64, now time.Time) (pl plan, ok bool, err error) {
	base := ls.cp.Position
	n := head - base
	due := time.Since(ls.lastList) >= r.cfg.PollInterval
	probe := due && r.shards <= 1
	if n <= 0 && ls.prefetch == nil && !due {
		// Nothing committed past the checkpoint: the notification of the
		// next commit wakes us (probed at least once per poll interval).
		r.m.plans.WithLabelValues("idle").Inc()
		return plan{}, true, nil
	}
	window, backlog := r.backlogWindow(base, head)
	if (n <= 0 && !probe) || window < 0 || ls.prefetch != nil {
		return plan{}, false, nil
	}
	probe = probe && !backlog
	rows, ok, err := r.indexWindow(ctx, base, window, probe)
	if err != nil || !ok {
		return plan{}, false, err
	}
	seen := map[string]*directRead{}
	var reads []*directRead
	written := map[string]*fetch{}  // probed segments: nil when not written yet
	var run []eventstore.IndexEntry // reserved positions in flight, in order
	inFlight := false
	for _, row := range rows {
		switch {
		case row.State == stateReserved && now.Sub(row.ReservedAt) < r.cfg.AppendTimeout:
			// In flight: the walk holds its aggregate back, as the LIST
			// plan's hole would, unless the probe finds its segment written.
			f, err := r.findWritten(ctx, ls, row, probe, written)
			if err != nil {
				return plan{}, false, err
			}
			if f == nil {
				run = append(run, row)
				inFlight = true
				continue
			}
			pl.endRun(&run)
			if err := r.addWritten(&pl, seen, row, f); err != nil {
				return plan{}, false, err
			}
			continue
		case row.State != stateCommitted:
			return plan{}, false, nil // abandoned, or reserved past the timeout
		}
		pl.endRun(&run)
		if d := seen[row.SegmentKey]; d != nil {
			d.seg.Add(row)
			continue
		}
		if ls.isDone(row.Position) {
			continue
		}
		first, err := r.firstOf(row)
		if err != nil {
			return plan{}, false, err
		}
		d := &directRead{item: len(pl.items)}
		d.seg.Add(row)
		seen[row.SegmentKey] = d
		reads = append(reads, d)
		pl.items = append(pl.items, item{first: first})
	}
	pl.endRun(&run)
	for _, d := range reads {
		pl.items[d.item].seg = r.hints.fetchFor(d.seg)
	}
	if inFlight && (backlog || (due && !probe)) {
		// A backlog behind a position in flight is the LIST's (it
		// publishes past the batch); a store of more shards lists (through
		// its index) at least once per poll interval while positions are
		// in flight.
		return plan{}, false, nil
	}
	pl.backlog = backlog
	r.indexPlanned(ls, pl, probe, n)
	return pl, true, nil
}

// backlogWindow is the last position planFromIndex reads: the head when
// it is at most a batch past the checkpoint; the first batch of a short
// backlog (backlog true) of a store of one shard, read without the probe
// (which runs once caught up; a shard of a store of several finds its
// segments in the index whatever the plan: no LIST to save there); -1
// otherwise (the LIST plan).
func (r *Relay) backlogWindow(base, head int64) (window int64, backlog bool) {
	batch := int64(r.cfg.BatchSize)
	switch n := head - base; {
	case n <= batch:
		return head, false
	case n <= indexPlanBacklog*batch && r.shards <= 1:
		return base + batch, true
	}
	return -1, false
}

// indexPlanBacklog is how many batches (EVENT_PUBLISHER_BATCH_SIZE
// positions) past the checkpoint planFromIndex takes on in a store of one
// shard, one batch per cycle; a longer backlog is drained by the LIST
// plan, whose look-ahead lists and fetches the next page while a cycle
// publishes.
const indexPlanBacklog = 8

// indexPlanned counts an index plan (idle when nothing is committed past
// the checkpoint and it has nothing to walk) and notes the probe's time.
func (r *Relay) indexPlanned(ls *leaderState, pl plan, probe bool, n int64) {
	if probe {
		ls.lastList = time.Now()
	}
	if len(pl.items) == 0 && n <= 0 {
		r.m.plans.WithLabelValues("idle").Inc()
		return
	}
	r.m.plans.WithLabelValues("index").Inc()
}

// indexWindow reads the index rows of planFromIndex's window: the
// positions base+1..head, and with probe every row past base (the head's
// and the reservations past it, one more than a batch). ok is false when
// a position of it has no row or there are more rows than a batch: the
// cycle lists then.
func (r *Relay) indexWindow(ctx context.Context, base, head int64, probe bool) (rows []eventstore.IndexEntry, ok bool, err error) {
	n := head - base
	q := eventstore.IndexQuery{FromPosition: base + 1, ToPosition: head, Limit: int(n)}
	if probe {
		q.ToPosition, q.Limit = 0, r.cfg.BatchSize+1
	}
	rows, err = r.sl.Index(ctx, q)
	if err != nil {
		return nil, false, err
	}
	if int64(len(rows)) < n || len(rows) > r.cfg.BatchSize {
		return nil, false, nil
	}
	for i, row := range rows {
		if row.Position != base+1+int64(i) {
			return nil, false, nil
		}
	}
	if probe {
		// An abandoned row past the head has no commit after it yet: no
		// LIST resolves it before one (hole rule 4 does then, once the
		// window holds it), so the plan passes over it instead of listing.
		rows = slices.DeleteFunc(rows, func(row eventstore.IndexEntry) bool {
			return row.Position > head && row.State == stateAbandoned
		})
	}
	return rows, true, nil
}

// addWritten adds the item of a probed segment, written but not
// committed, read by f (findWritten), unless its segment has one.
func (r *Relay) addWritten(pl *plan, seen map[string]*directRead, row eventstore.IndexEntry, f *fetch) error {
	if seen[row.SegmentKey] != nil {
		return nil
	}
	first, err := r.firstOf(row)
	if err != nil {
		return err
	}
	seen[row.SegmentKey] = &directRead{item: len(pl.items)}
	pl.items = append(pl.items, item{first: first, seg: f})
	return nil
}

// findWritten returns the GET of the segment of row, an in-flight
// reservation, when the segment is written already, and nil when it is not
// (yet), when probe is off or the position is done. written memoises the
// GETs of one plan by key. The whole segment is read (an uncommitted row
// has no byte range); in a store of one shard that is its lines.
func (r *Relay) findWritten(ctx context.Context, ls *leaderState, row eventstore.IndexEntry, probe bool, written map[string]*fetch) (*fetch, error) {
	if !probe || ls.isDone(row.Position) {
		return nil, nil
	}
	key := row.SegmentKey
	if f, ok := written[key]; ok {
		return f, nil
	}
	seg := eventstore.SegmentInfo{Key: key}
	evs, err := r.readSegment(ctx, seg)
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		written[key] = nil
		return nil, nil
	case err != nil:
		return nil, err
	}
	f := newFetch(seg)
	f.started.Store(true)
	f.evs = evs
	close(f.done)
	written[key] = f
	return f, nil
}

// planFromHints is the plan of a cycle woken by commits that continue the
// checkpoint (hints.go): the hinted segments from checkpoint+1 on, read by
// the GETs their notifications started, when nothing above the checkpoint
// is done, held or resolved (so no index row can change what the walk
// does), a full cycle ran within the poll interval and no notification
// since the last cycle went without a hint. ok is false, and
// the cycle takes the usual path, otherwise or when a hinted segment
// cannot be read (its hint is dropped). last is the highest position of
// the plan.
func (r *Relay) planFromHints(ctx context.Context, ls *leaderState) (items []item, last int64, ok bool) {
	// A notification no hint covers came with the wake-ups this cycle took
	// (hints.go): the head is read. Taken first, whatever else decides.
	if r.hints.missed.Swap(false) || len(ls.done) > 0 || len(ls.abandoned) > 0 || ls.prefetch != nil || time.Since(ls.lastFull) >= r.cfg.PollInterval {
		return nil, 0, false
	}
	chain := r.hints.chain(ls.cp.Position + 1)
	if len(chain) == 0 {
		return nil, 0, false
	}
	items = itemsOf(chain)
	r.startFetches(ctx, items)
	for _, x := range chain {
		select {
		case <-x.f.done:
		case <-ctx.Done():
			return nil, 0, false
		}
		if x.f.err != nil {
			r.log.Debug("relay: hinted segment not readable; planning as usual", "segment", x.f.key, "err", x.f.err)
			r.hints.drop(x.first)
			return nil, 0, false
		}
	}
	r.m.plans.WithLabelValues("hint").Inc()
	return items, chain[len(chain)-1].last, true
}

// itemsOf returns the plan items of hinted segments.
func itemsOf(chain []*hint) []item {
	items := make([]item, len(chain))
	for i, x := range chain {
		items[i] = item{first: x.first, seg: x.f}
	}
	return items
}

// firstOf is where the segment a committed index row names begins, in
// this relay's positions (a plan item's place in the walk): the first
// position its key names in a store of one shard; in a store of more the
// key names its lowest shard's block, so the row's own position (the plans
// take a segment at the first row naming it, in position order, which is
// its block's first position in the window).
func (r *Relay) firstOf(row eventstore.IndexEntry) (int64, error) {
	if r.shards > 1 {
		return row.Position, nil
	}
	first, _, err := eventstore.ParseSegmentKey(row.SegmentKey)
	if err != nil {
		return 0, fmt.Errorf("relay: index row %d names segment %q: %w", row.Position, row.SegmentKey, err)
	}
	return first, nil
}

// allDone reports whether every position of s above the checkpoint is done.
func allDone(ls *leaderState, s eventstore.SegmentInfo) bool {
	if len(ls.done) == 0 {
		return s.Last <= ls.cp.Position
	}
	for p := max(s.First, ls.cp.Position+1); p <= s.Last; p++ {
		if _, ok := ls.done[p]; !ok {
			return false
		}
	}
	return true
}

// indexRange returns the index rows of first..last, paging.
func (r *Relay) indexRange(ctx context.Context, first, last int64) ([]eventstore.IndexEntry, error) {
	const page = 5000
	var out []eventstore.IndexEntry
	for from := first; from <= last; {
		rows, err := r.sl.Index(ctx, eventstore.IndexQuery{FromPosition: from, ToPosition: last, Limit: page})
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
		if len(rows) < page {
			break
		}
		from = rows[len(rows)-1].Position + 1
	}
	return out, nil
}

// startFetches GETs the plan's segments in order, at most ParallelGets at
// once (shared with the prefetch); fetches the prefetch started already
// are skipped. When every fetch is under way (a hint plan's, started at
// their notifications) no goroutine is started.
func (r *Relay) startFetches(ctx context.Context, items []item) {
	if !slices.ContainsFunc(items, func(it item) bool { return it.seg != nil && !it.seg.started.Load() }) {
		return
	}
	go func() {
		for i, it := range items {
			if it.seg == nil || it.seg.started.Load() {
				continue
			}
			select {
			case r.gets <- struct{}{}:
			case <-ctx.Done():
				for _, rest := range items[i:] {
					if rest.seg != nil && rest.seg.started.CompareAndSwap(false, true) {
						rest.seg.err = ctx.Err()
						close(rest.seg.done)
					}
				}
				return
			}
			r.runFetch(ctx, it.seg)
		}
	}()
}

// runFetch GETs f in the background unless it was started already; it
// holds one slot of r.gets, taken by the caller, until the GET is done.
func (r *Relay) runFetch(ctx context.Context, f *fetch) {
	if !f.started.CompareAndSwap(false, true) {
		<-r.gets
		return
	}
	go func() {
		defer func() { <-r.gets }()
		f.evs, f.err = r.readSegment(ctx, f.seg)
		close(f.done)
	}()
}

// prefetch is the next cycle's first listing page and the GETs of its
// first segments, started while a cycle publishes a backlog.
type prefetch struct {
	after   int64
	done    chan struct{} // closed when the listing is in
	segs    []eventstore.SegmentInfo
	err     error
	fetches map[string]*fetch // written before done closes
	cancel  context.CancelFunc
}

// startPrefetch lists the page after position after and starts the GETs of
// its first ParallelGets segments, replacing any earlier prefetch.
func (r *Relay) startPrefetch(ctx context.Context, ls *leaderState, after int64) {
	ls.dropPrefetch()
	pctx, cancel := context.WithCancel(ctx)
	pf := &prefetch{after: after, done: make(chan struct{}), fetches: map[string]*fetch{}, cancel: cancel}
	ls.prefetch = pf
	go func() {
		segs, err := r.segments(pctx, after, r.cfg.BatchSize)
		var start []*fetch
		for _, s := range segs {
			if len(start) == r.cfg.ParallelGets {
				break
			}
			if s.Last > after {
				f := newFetch(s)
				pf.fetches[s.Key] = f
				start = append(start, f)
			}
		}
		pf.segs, pf.err = segs, err
		close(pf.done)
		for _, f := range start {
			select {
			case r.gets <- struct{}{}:
			case <-pctx.Done():
				return // the cycle that takes f starts it (or f is dropped)
			}
			r.runFetch(pctx, f)
		}
	}()
}

// takePrefetch returns the prefetch of the listing after base, if any, and
// drops any other.
func (ls *leaderState) takePrefetch(base int64) *prefetch {
	pf := ls.prefetch
	ls.prefetch = nil
	if pf != nil && pf.after != base {
		pf.cancel()
		return nil
	}
	return pf
}

// dropPrefetch cancels the prefetch, if any.
func (ls *leaderState) dropPrefetch() {
	if pf := ls.prefetch; pf != nil {
		pf.cancel()
		ls.prefetch = nil
	}
}

// listing returns the prefetched page when after is where it starts; nil
// and no error otherwise (list it now). A prefetch that failed is listed
// again.
func (pf *prefetch) listing(ctx context.Context, after int64) ([]eventstore.SegmentInfo, error) {
	if pf == nil || after != pf.after {
		return nil, nil
	}
	select {
	case <-pf.done:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	if pf.err != nil || pf.segs == nil {
		return nil, nil
	}
	return pf.segs, nil
}

// fetchFor returns the prefetch's fetch of seg's key, else the hinted one
// (hints.go), else a new one reading seg.
func (pf *prefetch) fetchFor(h *hints, seg eventstore.SegmentInfo) *fetch {
	if pf != nil {
		select {
		case <-pf.done:
			if f, ok := pf.fetches[seg.Key]; ok {
				return f
			}
		default:
		}
	}
	return h.fetchFor(seg)
}

// walk publishes the plan in position order. Events of an aggregate named
// by a young reservation (or by an event already held) are held back;
// everything else is produced through the pipeline (pipeline.go). It
// returns the number of records produced; when it returns, every produced
// record was answered by Kafka and processed.
func (r *Relay) walk(ctx context.Context, ls *leaderState, items []item, now time.Time) (int, error) {
	w := walker{held: map[aggKey]struct{}{}, maxPos: ls.cp.Position}
	for _, it := range items {
		if it.seg == nil {
			r.walkRun(ls, &w, it.rows, now)
			continue
		}
		if err := r.walkSegment(ctx, ls, &w, it.seg); err != nil {
			return w.produced, errors.Join(err, r.drain(ctx, ls, &w.p))
		}
	}
	r.m.held.Set(float64(w.heldEvents))
	if w.heldEvents > 0 {
		// Normal under load (groups commit out of order), so not at info
		// level on every cycle: sluice_relay_held_events shows it, and a
		// reservation that outlives the append timeout is resolved with a
		// warning (hole rule 3, docs/relay.md#what-it-does-per-cycle).
		r.log.Debug("relay: events held back behind an in-flight reservation of their aggregate", "events", w.heldEvents, "aggregates", len(w.held), "checkpoint", ls.cp.Position)
	}
	if err := r.drain(ctx, ls, &w.p); err != nil {
		return w.produced, err
	}
	// Positions resolved without producing (abandoned, dedup-skipped) may
	// have moved the checkpoint too.
	ls.advance()
	return w.produced, r.maybeSave(ctx, ls)
}

// walker is the state of one walk: the aggregates held back, the highest
// position walked, the pipeline and its counts.
type walker struct {
	held                 map[aggKey]struct{}
	heldEvents, produced int
	maxPos               int64
	p                    pipe
}

// walkRun resolves a run of index rows without a segment: a young
// reservation holds its aggregate back (hole rule 2); an abandoned or
// missing position is resolved, so the checkpoint may pass it (rule 4),
// with a metric per position and a warning per range.
func (r *Relay) walkRun(ls *leaderState, w *walker, rows []eventstore.IndexEntry, now time.Time) {
	var runFirst, runLast int64
	var runState string
	logRun := func() {
		if runLast >= runFirst && runState != "" {
			r.log.Warn("relay: positions resolved without an event; the checkpoint may pass them (kept in pending_gaps for the lookback)",
				"first", runFirst, "last", runLast, "state", runState)
		}
		runState = ""
	}
	for _, row := range rows {
		p := row.Position
		w.maxPos = max(w.maxPos, p)
		if ls.isDone(p) {
			continue
		}
		if row.State == stateReserved {
			w.held[aggKey{row.AggregateType, row.AggregateID}] = struct{}{}
			continue
		}
		ls.addAbandoned(p, now)
		res := "abandoned"
		if row.State == stateMissing {
			res = "no_index_row"
		}
		r.m.gaps.WithLabelValues(res).Inc()
		if runState == row.State && p == runLast+1 {
			runLast = p
		} else {
			logRun()
			runFirst, runLast, runState = p, p, row.State
		}
	}
	logRun()
}

// walkSegment waits for the segment's GET and produces its events above
// the walk's position: an event published already (dedup) is done, an
// event of a held aggregate is held, an event whose topic is refused is
// parked.
func (r *Relay) walkSegment(ctx context.Context, ls *leaderState, w *walker, f *fetch) error {
	select {
	case <-f.done:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	if f.err != nil {
		return f.err
	}
	for _, ev := range f.evs {
		if ctx.Err() != nil {
			// Stopping: produce nothing more; what is in flight is
			// drained by the walk.
			return context.Cause(ctx)
		}
		pos := ev.Envelope.Position
		if pos <= w.maxPos || ls.isDone(pos) {
			continue
		}
		w.maxPos = pos
		id := ev.Envelope.EventID
		if ls.dedup.has(id) {
			ls.markDone(pos)
			r.m.dedupSkipped.Inc()
			continue
		}
		if _, ok := w.held[aggKey{ev.Envelope.AggregateType, ev.Envelope.AggregateID}]; ok {
			w.heldEvents++
			continue
		}
		rec := r.router.Record(ev, "")
		if err := r.topicReady(ctx, rec.Topic); err != nil {
			if perr := r.parkRefusedTopic(ctx, ls, err, rec, pos, id, f.key); perr != nil {
				return perr
			}
			continue
		}
		if err := r.produceRec(ctx, ls, &w.p, rec, pos, id, f.key, false); err != nil {
			return err
		}
		w.produced++
	}
	return nil
}

// recheckGaps re-checks pending gaps within the lookback (at most
// LookbackMaxKeys per pass, one pass per poll interval) and publishes the
// positions that got committed meanwhile, late, through the walk's
// pipeline (produceRec, finishBatch: the same acknowledgement, parking and
// crash-bound rules as every other record). Gaps older than the lookback
// leave the checkpoint (they stay visible as abandoned rows in `sluice
// relay gaps`). The pending gaps change, and the checkpoint is written,
// only once every late record was acknowledged or parked: a pass that
// fails leaves them for the next one.
func (r *Relay) recheckGaps(ctx context.Context, ls *leaderState, now time.Time) error {
	gaps := ls.cp.PendingGaps
	if len(gaps) == 0 || time.Since(ls.lastGapCheck) < r.cfg.PollInterval {
		return nil
	}
	ls.lastGapCheck = time.Now()
	keep := make([]Gap, 0, len(gaps))
	changed := false
	var lates []lateGap
	var p pipe
	start := ls.gapCursor % len(gaps)
	checked := 0
	for j := range gaps {
		g := gaps[(start+j)%len(gaps)]
		switch {
		case now.Sub(g.Since) > r.cfg.Lookback:
			r.expireGap(g)
			changed = true
		case checked >= r.cfg.LookbackMaxKeys:
			keep = append(keep, g)
		default:
			checked++
			rest, n, ch, err := r.recheckGap(ctx, ls, &p, g)
			if err != nil {
				return errors.Join(err, r.drain(ctx, ls, &p))
			}
			keep = append(keep, rest...)
			changed = changed || ch
			if n > 0 {
				lates = append(lates, lateGap{g, n})
			}
		}
	}
	ls.gapCursor = start + checked
	if err := r.drain(ctx, ls, &p); err != nil {
		return err
	}
	if !changed {
		return nil
	}
	for _, l := range lates {
		r.log.Warn("relay: published events of a pending gap late (their writer committed after the append timeout)",
			"first", l.g.First, "last", l.g.Last, "events", l.n, "since", l.g.Since)
	}
	sort.Slice(keep, func(i, j int) bool { return keep[i].First < keep[j].First })
	ls.cp.PendingGaps = keep
	ls.dirty = true
	return r.save(ctx, ls)
}

// lateGap is a pending gap with n events published (or parked) late.
type lateGap struct {
	g Gap
	n int
}

// expireGap drops g, which left the lookback, with a metric and a warning.
func (r *Relay) expireGap(g Gap) {
	r.m.gaps.WithLabelValues("expired").Add(float64(g.Last - g.First + 1))
	r.log.Warn("relay: pending gap left the lookback without being committed; no longer re-checked (see `sluice relay gaps`)",
		"first", g.First, "last", g.Last, "since", g.Since)
}

// recheckGap looks g up in the index and produces, through p, the events of
// the positions committed meanwhile. It returns what stays of g (still
// abandoned, or committed but not yet readable), the events produced or
// parked, and whether g changed.
func (r *Relay) recheckGap(ctx context.Context, ls *leaderState, p *pipe, g Gap) (rest []Gap, n int, changed bool, err error) {
	rows, err := r.indexRange(ctx, g.First, g.Last)
	if err != nil {
		return nil, 0, false, err
	}
	committed := map[int64]eventstore.IndexEntry{}
	keys := map[string]bool{}
	for _, row := range rows {
		if row.State == stateCommitted {
			committed[row.Position] = row
			keys[row.SegmentKey] = true
		}
	}
	// Positions without any index row left the gap for good: abandoned is
	// final, and a retry of their event deleted the abandoned row and
	// stored the event at a fresh position, published in order
	// (docs/eventstore.md, "Abandoned is final").
	moved := goneFrom(g, rows)
	if len(committed) == 0 {
		if len(moved) == 0 {
			return []Gap{g}, 0, false, nil
		}
		r.m.gaps.WithLabelValues("moved").Add(float64(len(moved)))
		return subtract(g, moved), 0, true, nil
	}
	for _, key := range slices.Sorted(maps.Keys(keys)) {
		k, err := r.publishLate(ctx, ls, p, key, committed)
		n += k
		if err != nil {
			return nil, n, false, err
		}
	}
	// Positions committed and found in their segment leave the gap; the
	// rest (still abandoned, or not yet readable) stay.
	pubs := moved
	for _, row := range rows {
		if _, left := committed[row.Position]; row.State == stateCommitted && !left {
			pubs = append(pubs, row.Position)
		}
	}
	slices.Sort(pubs)
	return subtract(g, pubs), n, true, nil
}

// publishLate reads segment key and produces, through p, its events at the
// positions of committed (the index rows of a pending gap whose event id
// matches), deleting each position it took from committed. An event the
// relay published already is skipped (dedup); one whose topic is refused
// is parked. It returns the events produced or parked.
func (r *Relay) publishLate(ctx context.Context, ls *leaderState, p *pipe, key string, committed map[int64]eventstore.IndexEntry) (int, error) {
	// The committed rows of the gap in this segment: over a store of more
	// than one shard, only their lines are read.
	var seg eventstore.SegmentInfo
	for _, row := range committed {
		if row.SegmentKey == key {
			seg.Add(row)
		}
	}
	evs, err := r.readSegment(ctx, seg)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, ev := range evs {
		pos, id := ev.Envelope.Position, ev.Envelope.EventID
		if row, ok := committed[pos]; !ok || row.EventID != id {
			continue
		}
		delete(committed, pos)
		if ls.dedup.has(id) {
			r.m.dedupSkipped.Inc()
			continue
		}
		rec := r.router.Record(ev, "")
		if err := r.topicReady(ctx, rec.Topic); err != nil {
			if perr := r.parkRefusedTopic(ctx, ls, err, rec, pos, id, key); perr != nil {
				return n, perr
			}
			n++
			continue
		}
		if err := r.produceRec(ctx, ls, p, rec, pos, id, key, true); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// goneFrom returns the positions of g (ascending) that have no index row.
func goneFrom(g Gap, rows []eventstore.IndexEntry) []int64 {
	has := make(map[int64]bool, len(rows))
	for _, row := range rows {
		has[row.Position] = true
	}
	var gone []int64
	for p := g.First; p <= g.Last; p++ {
		if !has[p] {
			gone = append(gone, p)
		}
	}
	return gone
}

// subtract removes the positions in drop (ascending) from g.
func subtract(g Gap, drop []int64) []Gap {
	var out []Gap
	cur := g.First
	for _, p := range drop {
		if p > cur {
			out = append(out, Gap{First: cur, Last: p - 1, Since: g.Since})
		}
		cur = p + 1
	}
	if cur <= g.Last {
		out = append(out, Gap{First: cur, Last: g.Last, Since: g.Since})
	}
	return out
}

// watchCheckpoint notices, once per poll interval, a checkpoint written by
// someone else: a newer leader (fenced) or an operator (adopt). A busy
// leader's own conditional writes do that job; the Stat is for idle ones.
func (r *Relay) watchCheckpoint(ctx context.Context, ls *leaderState) error {
	if time.Since(ls.lastStat) < r.cfg.PollInterval {
		return nil
	}
	if ls.inflight != nil || ls.lastSave.After(ls.lastStat) {
		// A conditional write since the last check (If-Match our ETag)
		// notices a foreign write as well, without a round trip here; an
		// in-flight one reports it when collected.
		ls.lastStat = time.Now()
		return nil
	}
	ls.lastStat = time.Now()
	oi, err := r.checkpointStat(ctx)
	if err != nil && !errors.Is(err, objstore.ErrNotFound) {
		return fmt.Errorf("relay: stat checkpoint: %w", err)
	}
	if err == nil && oi.ETag == ls.etag {
		return nil
	}
	cur, _, found, err := r.checkpointLoad(ctx)
	if err != nil {
		return err
	}
	if found && cur.RelayEpoch > ls.epoch {
		return fmt.Errorf("%w: checkpoint has epoch %d (holder %s), ours is %d", ErrFenced, cur.RelayEpoch, cur.Holder, ls.epoch)
	}
	return fmt.Errorf("%w: position now %d", ErrCheckpointMoved, cur.Position)
}
