package eventstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/shared/failure"
)

// processGroup runs one group through docs/eventstore.md#append-protocol-group-commit: reserve, write the segment,
// commit, and settles every item (res, or requeue for the committer).
func (s *Store) processGroup(g *group) {
	// A group may outlive the append timeout: it then becomes a late writer
	// whose rows a relay may have abandoned; its commit leaves those alone
	// and appends their envelopes again (writeBlock). The bound only keeps
	// a hung request from holding a worker forever.
	ctx, cancel := context.WithTimeout(s.ctx, max(4*s.cfg.AppendTimeout, time.Minute))
	defer cancel()
	t0 := time.Now()
	accepted, blocks, err := s.reserve(ctx, g.items)
	s.reserved <- struct{}{}
	if err == nil && len(accepted) > 0 {
		s.stats.groups.Add(1)
		s.stats.events.Add(int64(len(accepted)))
		s.observeStage(&s.stats.gather, "gather", g.started.Sub(g.oldest))
		s.observeStage(&s.stats.reserve, "reserve", time.Since(t0))
		s.stats.inFlight.Add(int64(g.inFlight))
		s.m.events.Observe(float64(len(accepted)))
	}
	if err != nil {
		for _, it := range g.items {
			it.resetOutcome()
			it.res.Err = err
		}
		return
	}
	if len(accepted) > 0 {
		s.writeBlock(ctx, accepted, blocks)
	}
	var dups []*item
	for _, it := range g.items {
		switch {
		case it.stored != nil:
			dups = append(dups, it)
		case it.resolve != "":
			if _, _, err := s.resolveBlock(ctx, it.resolve, abandonMine); err != nil {
				it.requeue = false
				it.res.Err = err
			}
		}
	}
	if len(dups) > 0 {
		s.returnStored(ctx, dups)
	}
}

// writeBlock writes the accepted items' segment (step 4) and commits their
// rows (step 5). The segment is named after the block of the lowest shard
// (blocks[0]; for one shard, the block), its lines in the order of
// accepted: by shard, then position.
func (s *Store) writeBlock(ctx context.Context, accepted []*item, blocks []shardBlock) {
	name := segmentName{shards: s.shards, shard: blocks[0].shard, first: blocks[0].first, last: blocks[0].last}
	key := name.key()
	fail := func(err error) {
		for _, it := range accepted {
			it.res.Err = err
		}
	}
	if err := s.hooks.crash.At(ctx, CrashWorker, "after_reserve", key); err != nil {
		fail(&crashError{Point: "after reserve", Err: err})
		return
	}
	size := 0
	for _, it := range accepted {
		size += it.tmpl.size() + 1
	}
	body := make([]byte, 0, size)
	offsets := make([]int64, len(accepted))
	for j, it := range accepted {
		offsets[j] = int64(len(body))
		body = it.tmpl.appendLine(body, it.seq, it.pos)
		body = append(body, '\n')
	}
	t0 := time.Now()
	stored, err := s.createSegment(ctx, key, body)
	s.observeStage(&s.stats.put, "put", time.Since(t0))
	if err != nil {
		fail(err)
		return
	}
	if !bytes.Equal(stored, body) {
		// the key already held our events (an earlier attempt of this very
		// write, whose client saw it fail): the index must point at the bytes stored
		lines, err := parseBlock(name, key, stored)
		if err != nil {
			fail(err)
			return
		}
		if len(lines) != len(accepted) {
			fail(fmt.Errorf("%w: %s holds %d lines, the index reserved %d", ErrCorruptSegment, key, len(lines), len(accepted)))
			return
		}
		for j, l := range lines {
			if l.env.EventID != accepted[j].env.EventID || l.env.Position != accepted[j].pos {
				fail(fmt.Errorf("%w: %s holds event %s at position %d (line %d), the index reserved other lines",
					ErrCorruptSegment, key, l.env.EventID, l.env.Position, j+1))
				return
			}
			offsets[j] = l.offset
		}
		body = stored
	}
	if err := s.hooks.crash.At(ctx, CrashWorker, "after_put", key); err != nil {
		fail(&crashError{Point: "after put", Err: err})
		return
	}
	refs := make([]lineRef, len(accepted))
	for j, it := range accepted {
		end := offsets[j] + int64(bytes.IndexByte(body[offsets[j]:], '\n'))
		refs[j] = lineRef{shard: it.shard, position: it.pos, eventID: it.env.EventID, offset: offsets[j], length: end - offsets[j]}
	}
	t0 = time.Now()
	committed, err := s.commitRows(ctx, key, refs)
	s.observeStage(&s.stats.commit, "commit", time.Since(t0))
	if err != nil {
		fail(err)
		return
	}
	var late []string
	for j, it := range accepted {
		if !committed[shardPos{it.shard, it.pos}] {
			// A late writer: the relay (or Repair) abandoned this row
			// meanwhile, and may already be past its position — perhaps
			// past its lookback. The envelope is not acknowledged here:
			// it goes back to the committer and is reserved afresh, so it
			// is published in order like a new append (docs/architecture.md#no-lost-work).
			it.requeue, it.notBefore = true, time.Now()
			late = append(late, it.env.EventID)
			continue
		}
		e := it.env
		e.SequenceNumber, e.Position = it.seq, it.pos
		raw := body[refs[j].offset : refs[j].offset+refs[j].length : refs[j].offset+refs[j].length]
		it.res = Result{Event: Event{Envelope: e, Raw: raw, SegmentKey: key, Offset: refs[j].offset, Shard: it.shard}}
	}
	if len(late) > 0 {
		s.log.Warn("eventstore: late writer: rows abandoned while the segment was written; appending those envelopes again at fresh positions",
			"segment_key", key, "rows", len(late), "event_ids", late)
	}
}

// createSegment conditionally creates key and returns the bytes stored
// under it. When the key exists already (an earlier attempt of the same
// write that the client saw fail) the existing bytes are returned for the
// caller to verify.
//
// A failed write settles the block's reservation by what is known of it
// (issue 26): definitely not written (objstore.ErrNotWritten: refused, or
// answered with an error) → the block's reserved rows are marked abandoned
// at once, so the relay passes their positions without waiting for
// EVENT_STORE_APPEND_TIMEOUT and the appends behind them are published
// without delay; outcome unknown (a timeout after the request was sent, a
// reset) → the object is looked for once, unless the call ran out of time
// (the store is hung: a look-up would hang as long), and if it is not
// there the rows stay reserved for the relay's rule 3 and Repair — the PUT
// may still land. Object-storage failures are returned as
// *UnavailableError.
func (s *Store) createSegment(ctx context.Context, key string, body []byte) ([]byte, error) {
	_, cerr := s.bucket.Create(ctx, key, body)
	if cerr == nil {
		return body, nil
	}
	if errors.Is(cerr, objstore.ErrNotWritten) {
		s.abandonBlock(ctx, key, cerr)
		return nil, s.objectError(fmt.Errorf("eventstore: write segment %s (not written; its positions were released): %w", key, cerr), true)
	}
	if !errors.Is(cerr, context.DeadlineExceeded) || errors.Is(cerr, objstore.ErrPreconditionFailed) {
		existing, _, gerr := s.bucket.Get(ctx, key)
		if gerr == nil {
			return existing, nil
		}
	}
	return nil, s.objectError(fmt.Errorf("eventstore: write segment %s: %w", key, cerr), false)
}

// abandonBlock marks this writer's reserved rows of key abandoned after a
// write that definitely did not happen.
func (s *Store) abandonBlock(ctx context.Context, key string, cause error) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var n, lo, hi int64
	if err := s.pool.QueryRow(actx, sqlAbandonMine, key, s.cfg.WriterID, s.shards > 1).Scan(&n, &lo, &hi, nil); err != nil {
		s.log.Warn("eventstore: could not mark a failed block abandoned; the relay will after the append timeout",
			"segment_key", key, "error", err)
		return
	}
	if n > 0 {
		s.m.settled.Add(float64(n))
		s.log.Warn("eventstore: segment not written; its reserved rows are abandoned at once",
			"segment_key", key, "rows", n, "first", lo, "last", hi, "error", cause)
	}
}

// objectError wraps an object-storage failure: *UnavailableError when the
// store could not be reached or did not answer in time.
func (s *Store) objectError(err error, notWritten bool) error {
	if !errors.Is(err, objstore.ErrUnavailable) {
		return err
	}
	return &UnavailableError{Dependency: failure.ObjectStore, NotWritten: notWritten, RetryAfter: retryAfterUnavailable, Err: err}
}

const sqlAbandonMine = `
WITH upd AS (
  UPDATE sluice.appends a SET state = '` + StateAbandoned + `'
    FROM sluice.appends_open o
  WHERE o.segment_key = $1 AND a.shard = o.shard AND a.position BETWEEN o.first AND o.last
    AND a.segment_key = $1 AND a.state = '` + StateReserved + `' AND a.writer_id = $2
  RETURNING a.shard, a.position
)` + sqlAbandonedNotify

// sqlAbandonedNotify counts the rows upd abandoned, their lowest and
// highest position, and NOTIFYs them (blockNotify's payload: "abandoned
// FIRST LAST" for one shard, $3 false; "abandoned S:FIRST-LAST …" for
// more).
const sqlAbandonedNotify = `, per AS (
  SELECT shard, count(*) AS n, min(position) AS lo, max(position) AS hi FROM upd GROUP BY shard
)
SELECT coalesce(sum(n), 0)::bigint, coalesce(min(lo), 0), coalesce(max(hi), 0),
       CASE WHEN count(*) > 0 THEN pg_notify('` + NotifyChannel + `', CASE WHEN $3::boolean
         THEN '` + StateAbandoned + `' || string_agg(' ' || shard || ':' || lo || '-' || hi, '' ORDER BY shard)
         ELSE '` + StateAbandoned + ` ' || min(lo) || ' ' || max(hi) END) END
FROM per`

// returnStored fills the results of idempotent hits with the stored events.
func (s *Store) returnStored(ctx context.Context, dups []*item) {
	rows := make([]indexRow, len(dups))
	for j, it := range dups {
		rows[j] = *it.stored
	}
	evs, err := s.fetch(ctx, rows)
	for j, it := range dups {
		if err != nil {
			it.res = Result{Err: err}
			continue
		}
		it.res = Result{Event: evs[j], Duplicate: true, Mismatch: it.mismatch}
	}
}
