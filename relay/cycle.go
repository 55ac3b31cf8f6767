package relay

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore"
)

// Index row states (sluice.appends.state), plus the relay's own "missing"
// for a position below the head without any row (a rebuilt index).
const (
	stateReserved  = "reserved"
	stateCommitted = "committed"
	stateAbandoned = "abandoned"
	stateMissing   = "missing"
)

// item is one step of a cycle's walk in position order: a segment to
// publish, or a run of uncommitted positions (a gap).
type item struct {
	first int64
	seg   *fetch
	rows  []eventstore.IndexEntry
}

// fetch is one segment GET, started ahead of the walk.
type fetch struct {
	key  string
	done chan struct{}
	evs  []eventstore.Event
	err  error
}

type plan struct {
	items     []item
	truncated bool // more to do at once
	repair    bool // reserved rows older than the append timeout: repair first
}

type aggKey struct{ typ, id string }

// cycle runs one pass: re-check pending gaps, list after the checkpoint,
// resolve holes through the index, GET segments in parallel and publish in
// position order, flushing and checkpointing every flush batch. more says
// there is more to do at once.
func (r *Relay) cycle(ctx context.Context, ls *leaderState) (more bool, err error) {
	head, now, err := r.headAndNow(ctx)
	if err != nil {
		return false, err
	}
	r.noteProgress(head, ls.cp.Position)
	if err := r.watchCheckpoint(ctx, ls); err != nil {
		return false, err
	}
	if err := r.recheckGaps(ctx, ls, now); err != nil {
		return false, err
	}
	pl, err := r.plan(ctx, ls, head, now)
	if err != nil {
		return false, err
	}
	if pl.repair {
		rep, err := r.store.Repair(ctx, r.s.AppendTimeout)
		if err != nil {
			return false, fmt.Errorf("relay: repair: %w", err)
		}
		r.m.gaps.WithLabelValues("repaired_committed").Add(float64(rep.Committed))
		r.log.Warn("relay: resolved reservations older than the append timeout (SPEC §6.3 rule 3)",
			"committed_from_segment", rep.Committed, "abandoned", rep.Abandoned, "still_in_flight", rep.InFlight, "blocks", rep.Blocks)
		return rep.Committed+rep.Abandoned > 0, nil
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.startFetches(cctx, pl.items)
	n, err := r.walk(ctx, ls, pl.items, now)
	return pl.truncated || n > 0, err
}

// plan lists segments after the checkpoint and turns the holes between them
// into index lookups.
func (r *Relay) plan(ctx context.Context, ls *leaderState, head int64, now time.Time) (plan, error) {
	var pl plan
	base := ls.cp.Position
	batch := r.s.Config.BatchSize
	var segs []eventstore.SegmentInfo
	after, toFetch := base, 0
listing:
	for {
		page, err := r.store.Segments(ctx, after, batch)
		if err != nil {
			return pl, err
		}
		for _, s := range page {
			if s.Last <= base {
				continue
			}
			if len(segs) > 0 && s.First-base > r.s.MaxWindow {
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
			pl.truncated = true
			break
		}
	}
	sort.SliceStable(segs, func(i, j int) bool {
		if segs[i].First != segs[j].First {
			return segs[i].First < segs[j].First
		}
		return segs[i].Last < segs[j].Last
	})
	listed := map[string]bool{}
	c := base
	var holes [][2]int64
	for _, s := range segs {
		listed[s.Key] = true
		if s.First > c+1 {
			holes = append(holes, [2]int64{c + 1, s.First - 1})
		}
		c = max(c, s.Last)
	}
	if !pl.truncated && head > c {
		holes = append(holes, [2]int64{c + 1, head})
	}
	direct := map[string]bool{}
	directRows := 0
	for _, h := range holes {
		rows, err := r.indexRange(ctx, h[0], h[1])
		if err != nil {
			return pl, err
		}
		var run []eventstore.IndexEntry
		endRun := func() {
			if len(run) > 0 {
				pl.items = append(pl.items, item{first: run[0].Position, rows: run})
				run = nil
			}
		}
		exp := h[0]
		for _, row := range rows {
			for ; exp < row.Position; exp++ {
				run = append(run, eventstore.IndexEntry{Position: exp, State: stateMissing})
			}
			exp = row.Position + 1
			switch row.State {
			case stateCommitted:
				endRun()
				if !ls.isDone(row.Position) {
					directRows++
				}
				if listed[row.SegmentKey] || direct[row.SegmentKey] {
					continue
				}
				first, _, err := eventstore.ParseSegmentKey(row.SegmentKey)
				if err != nil {
					return pl, fmt.Errorf("relay: index row %d names segment %q: %w", row.Position, row.SegmentKey, err)
				}
				direct[row.SegmentKey] = true
				pl.items = append(pl.items, item{first: first, seg: &fetch{key: row.SegmentKey, done: make(chan struct{})}})
			case stateReserved:
				if now.Sub(row.ReservedAt) >= r.s.AppendTimeout {
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
		endRun()
	}
	if pl.repair {
		return pl, nil
	}
	if directRows > 0 {
		r.m.gaps.WithLabelValues("committed_direct").Add(float64(directRows))
		r.log.Debug("relay: committed positions missing from the listing; reading their segments directly", "positions", directRows, "segments", len(direct))
	}
	for _, s := range segs {
		if !allDone(ls, s) {
			pl.items = append(pl.items, item{first: s.First, seg: &fetch{key: s.Key, done: make(chan struct{})}})
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
		rows, err := r.store.Index(ctx, eventstore.IndexQuery{FromPosition: from, ToPosition: last, Limit: page})
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
// once.
func (r *Relay) startFetches(ctx context.Context, items []item) {
	sem := make(chan struct{}, r.s.Config.ParallelGets)
	go func() {
		for i, it := range items {
			if it.seg == nil {
				continue
			}
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				for _, rest := range items[i:] {
					if rest.seg != nil {
						rest.seg.err = ctx.Err()
						close(rest.seg.done)
					}
				}
				return
			}
			go func(f *fetch) {
				defer func() { <-sem }()
				f.evs, f.err = r.store.ReadSegment(ctx, f.key)
				close(f.done)
			}(it.seg)
		}
	}()
}

// walk publishes the plan in position order. Events of an aggregate named
// by a young reservation (or by an event already held) are held back;
// everything else is produced. It returns the number of records produced.
func (r *Relay) walk(ctx context.Context, ls *leaderState, items []item, now time.Time) (int, error) {
	held := map[aggKey]struct{}{}
	heldEvents, produced := 0, 0
	maxPos := ls.cp.Position
	b := r.newBatch()
	fail := func(err error) (int, error) {
		if ferr := r.flushAndSave(ctx, ls, b); ferr != nil {
			return produced, errors.Join(err, ferr)
		}
		return produced, err
	}
	for _, it := range items {
		if it.seg == nil {
			var runFirst, runLast int64
			var runState string
			logRun := func() {
				if runLast >= runFirst && runState != "" {
					r.log.Warn("relay: positions resolved without an event; the checkpoint may pass them (kept in pending_gaps for the lookback)",
						"first", runFirst, "last", runLast, "state", runState)
				}
				runState = ""
			}
			for _, row := range it.rows {
				p := row.Position
				maxPos = max(maxPos, p)
				if ls.isDone(p) {
					continue
				}
				switch row.State {
				case stateReserved:
					held[aggKey{row.AggregateType, row.AggregateID}] = struct{}{}
				default:
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
			}
			logRun()
			continue
		}
		select {
		case <-it.seg.done:
		case <-ctx.Done():
			return fail(context.Cause(ctx))
		}
		if it.seg.err != nil {
			return fail(it.seg.err)
		}
		for _, ev := range it.seg.evs {
			p := ev.Envelope.Position
			if p <= maxPos || ls.isDone(p) {
				continue
			}
			maxPos = p
			id := ev.Envelope.EventID
			if ls.dedup.has(id) {
				ls.markDone(p)
				r.m.dedupSkipped.Inc()
				continue
			}
			k := aggKey{ev.Envelope.AggregateType, ev.Envelope.AggregateID}
			if _, ok := held[k]; ok {
				heldEvents++
				continue
			}
			rec := r.router.Record(ev, "")
			if err := r.topicReady(ctx, rec.Topic); err != nil {
				return fail(err)
			}
			b.produce(ctx, r.client, rec, p, id, false)
			produced++
			if b.len() >= r.s.flushBatch {
				if err := r.flushAndSave(ctx, ls, b); err != nil {
					return produced, err
				}
				b = r.newBatch()
			}
		}
	}
	r.m.held.Set(float64(heldEvents))
	if heldEvents > 0 {
		r.log.Info("relay: events held back behind an in-flight reservation of their aggregate", "events", heldEvents, "aggregates", len(held), "checkpoint", ls.cp.Position)
	}
	return produced, r.flushAndSave(ctx, ls, b)
}

// batch is the records produced since the last flush.
type batch struct {
	mu   sync.Mutex
	recs []pendingRec
}

type pendingRec struct {
	pos   int64
	id    string
	topic string
	late  bool
	err   error
}

func (r *Relay) newBatch() *batch { return &batch{recs: make([]pendingRec, 0, r.s.flushBatch)} }

func (b *batch) len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.recs)
}

// produce hands rec to the producer; its outcome lands in the batch.
func (b *batch) produce(ctx context.Context, cl *kgo.Client, rec *kgo.Record, pos int64, id string, late bool) {
	b.mu.Lock()
	i := len(b.recs)
	b.recs = append(b.recs, pendingRec{pos: pos, id: id, topic: rec.Topic, late: late})
	b.mu.Unlock()
	cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
		if err != nil {
			b.mu.Lock()
			b.recs[i].err = err
			b.mu.Unlock()
		}
	})
}

// flushAndSave waits for Kafka to acknowledge the batch (pausing, never
// skipping, while Kafka is out), marks the acknowledged positions done,
// advances the checkpoint over the contiguous done prefix and writes it.
func (r *Relay) flushAndSave(ctx context.Context, ls *leaderState, b *batch) error {
	var failed error
	if b.len() > 0 {
		if err := r.flush(ctx); err != nil {
			return err
		}
		b.mu.Lock()
		recs := b.recs
		b.mu.Unlock()
		var acked []string
		var late int
		missingTopics := map[string]bool{}
		for _, pr := range recs {
			if pr.err != nil {
				r.m.produceErrs.Inc()
				if failed == nil {
					failed = fmt.Errorf("relay: kafka did not acknowledge position %d (topic %s): %w", pr.pos, pr.topic, pr.err)
				}
				if errors.Is(pr.err, kerr.UnknownTopicOrPartition) {
					missingTopics[pr.topic] = true
				}
				continue
			}
			ls.markDone(pr.pos)
			ls.dedup.add(pr.id)
			r.m.published.WithLabelValues(pr.topic).Inc()
			acked = append(acked, pr.id)
			if pr.late {
				late++
			}
		}
		if len(acked) > 0 {
			ls.dirty = true
		}
		if late > 0 {
			r.m.late.Add(float64(late))
			r.m.gaps.WithLabelValues("late_published").Add(float64(late))
		}
		if h := r.s.ackHook; h != nil {
			h(acked, time.Now())
		}
		r.s.Crasher.Hit("relay", "after_produce")
		if failed != nil {
			r.setKafkaErr(failed)
			for t := range missingTopics {
				r.log.Warn("relay: topic missing; creating it", "topic", t)
				if err := r.ensureTopics(ctx, t); err != nil {
					failed = errors.Join(failed, err)
				}
			}
		} else {
			r.setKafkaErr(nil)
		}
	}
	ls.advance()
	if ls.dirty {
		r.s.Crasher.Hit("relay", "before_checkpoint")
		if err := r.save(ctx, ls); err != nil {
			return errors.Join(failed, err)
		}
	}
	return failed
}

// flush waits until Kafka acknowledged every buffered record. While it
// cannot (outage) it marks Kafka unready and keeps waiting.
func (r *Relay) flush(ctx context.Context) error {
	start := time.Now()
	for {
		fctx, cancel := context.WithTimeout(ctx, r.s.Config.KafkaFlushTimeout)
		err := r.client.Flush(fctx)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		kerr := fmt.Errorf("%d records not acknowledged after %s", r.client.BufferedProduceRecords(), time.Since(start).Round(time.Millisecond))
		r.setKafkaErr(kerr)
		r.log.Warn("relay: kafka is not acknowledging; waiting (the checkpoint does not move)", "err", kerr)
		r.hb.Beat()
	}
	r.m.flush.Observe(time.Since(start).Seconds())
	return nil
}

// save writes the checkpoint over the version this leader last wrote. A
// lost race means a newer leader (fenced) or an operator (adopt).
func (r *Relay) save(ctx context.Context, ls *leaderState) error {
	ls.cp.RecentEventIDs = ls.dedup.recent(r.s.Config.DedupCheckpointMaxEvents)
	ls.cp.UpdatedAt = time.Now().UTC()
	tag, err := r.cps.Save(ctx, ls.cp, ls.etag)
	if errors.Is(err, objstore.ErrPreconditionFailed) {
		cur, _, found, lerr := r.cps.Load(ctx)
		if lerr != nil {
			return errors.Join(err, lerr)
		}
		if found && cur.RelayEpoch > ls.epoch {
			return fmt.Errorf("%w: checkpoint has epoch %d (holder %s), ours is %d", ErrFenced, cur.RelayEpoch, cur.Holder, ls.epoch)
		}
		return fmt.Errorf("%w: position now %d", ErrCheckpointMoved, cur.Position)
	}
	if err != nil {
		return err
	}
	ls.etag = tag
	ls.dirty = false
	r.noteProgress(-1, ls.cp.Position)
	r.m.pendingGaps.Set(float64(len(ls.cp.PendingGaps)))
	return nil
}

// recheckGaps re-checks pending gaps within the lookback (at most
// LookbackMaxKeys per pass, one pass per poll interval) and publishes the
// positions that got committed meanwhile, late. Gaps older than the
// lookback leave the checkpoint (they stay visible as abandoned rows in
// `sluice relay gaps`).
func (r *Relay) recheckGaps(ctx context.Context, ls *leaderState, now time.Time) error {
	gaps := ls.cp.PendingGaps
	if len(gaps) == 0 || time.Since(ls.lastGapCheck) < r.s.Config.PollInterval {
		return nil
	}
	ls.lastGapCheck = time.Now()
	keep := make([]Gap, 0, len(gaps))
	changed := false
	b := r.newBatch()
	type lateGap struct {
		g Gap
		n int
	}
	var lates []lateGap
	start := ls.gapCursor % len(gaps)
	checked := 0
	for j := range gaps {
		i := (start + j) % len(gaps)
		g := gaps[i]
		if now.Sub(g.Since) > r.s.Config.Lookback {
			n := g.Last - g.First + 1
			r.m.gaps.WithLabelValues("expired").Add(float64(n))
			r.log.Warn("relay: pending gap left the lookback without being committed; no longer re-checked (see `sluice relay gaps`)",
				"first", g.First, "last", g.Last, "since", g.Since)
			changed = true
			continue
		}
		if checked >= r.s.Config.LookbackMaxKeys {
			keep = append(keep, g)
			continue
		}
		checked++
		rows, err := r.indexRange(ctx, g.First, g.Last)
		if err != nil {
			return err
		}
		committed := map[int64]eventstore.IndexEntry{}
		keys := map[string]bool{}
		for _, row := range rows {
			if row.State == stateCommitted {
				committed[row.Position] = row
				keys[row.SegmentKey] = true
			}
		}
		if len(committed) == 0 {
			keep = append(keep, g)
			continue
		}
		n := 0
		for key := range keys {
			evs, err := r.store.ReadSegment(ctx, key)
			if err != nil {
				return err
			}
			for _, ev := range evs {
				p := ev.Envelope.Position
				row, ok := committed[p]
				if !ok || row.EventID != ev.Envelope.EventID {
					continue
				}
				delete(committed, p)
				if ls.dedup.has(ev.Envelope.EventID) {
					r.m.dedupSkipped.Inc()
					continue
				}
				rec := r.router.Record(ev, "")
				if err := r.topicReady(ctx, rec.Topic); err != nil {
					return err
				}
				b.produce(ctx, r.client, rec, p, ev.Envelope.EventID, true)
				n++
			}
		}
		// Positions committed and found in their segment leave the gap;
		// the rest (still abandoned, or not yet readable) stay.
		var pubs []int64
		for _, row := range rows {
			if _, left := committed[row.Position]; row.State == stateCommitted && !left {
				pubs = append(pubs, row.Position)
			}
		}
		keep = append(keep, subtract(g, pubs)...)
		lates = append(lates, lateGap{g, n})
		changed = true
	}
	ls.gapCursor = start + checked
	if !changed {
		return nil
	}
	if b.len() > 0 {
		if err := r.flush(ctx); err != nil {
			return err
		}
		b.mu.Lock()
		recs := b.recs
		b.mu.Unlock()
		for _, pr := range recs {
			if pr.err != nil {
				r.m.produceErrs.Inc()
				r.setKafkaErr(pr.err)
				return fmt.Errorf("relay: late publication of position %d: %w", pr.pos, pr.err)
			}
		}
		for _, pr := range recs {
			ls.dedup.add(pr.id)
			r.m.published.WithLabelValues(pr.topic).Inc()
		}
		r.m.late.Add(float64(len(recs)))
		r.m.gaps.WithLabelValues("late_published").Add(float64(len(recs)))
		for _, l := range lates {
			if l.n > 0 {
				r.log.Warn("relay: published events of a pending gap late (their writer committed after the append timeout)",
					"first", l.g.First, "last", l.g.Last, "events", l.n, "since", l.g.Since)
			}
		}
	}
	sort.Slice(keep, func(i, j int) bool { return keep[i].First < keep[j].First })
	ls.cp.PendingGaps = keep
	ls.dirty = true
	return r.save(ctx, ls)
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
// someone else: a newer leader (fenced) or an operator (adopt).
func (r *Relay) watchCheckpoint(ctx context.Context, ls *leaderState) error {
	if time.Since(ls.lastStat) < r.s.Config.PollInterval {
		return nil
	}
	ls.lastStat = time.Now()
	oi, err := r.cps.bucket.Stat(ctx, r.cps.key)
	if err != nil && !errors.Is(err, objstore.ErrNotFound) {
		return fmt.Errorf("relay: stat checkpoint: %w", err)
	}
	if err == nil && oi.ETag == ls.etag {
		return nil
	}
	cur, _, found, err := r.cps.Load(ctx)
	if err != nil {
		return err
	}
	if found && cur.RelayEpoch > ls.epoch {
		return fmt.Errorf("%w: checkpoint has epoch %d (holder %s), ours is %d", ErrFenced, cur.RelayEpoch, cur.Holder, ls.epoch)
	}
	return fmt.Errorf("%w: position now %d", ErrCheckpointMoved, cur.Position)
}
