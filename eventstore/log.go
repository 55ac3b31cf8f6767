package eventstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/shared/pgarray"
)

// LogQuery selects a page of the log (Store.Log).
type LogQuery struct {
	// After is the position the page starts after in a store of one shard
	// (0: the beginning); Cursor, when set, takes its place.
	After int64
	// Cursor is where the page starts after, a position per shard
	// (docs/eventstore.md#reading-the-log-across-shards). The zero Cursor
	// with After 0 is the beginning of every shard. A cursor of another
	// number of shards than the store's, or After > 0 on a store of more
	// than one shard, is a *CursorShardsError.
	Cursor Cursor
	// Limit bounds the events returned (default 100).
	Limit int
	// AggregateType, when set, returns only that aggregate type's events
	// (the page still advances over the others).
	AggregateType string
}

// LogPage is a page of the log.
type LogPage struct {
	// Events are committed events after the page's start. In a store of
	// one shard, in position order (After < position <= Through). In a
	// store of several, merged over the shards: each shard's events in
	// position order — hence each aggregate's in its order — and the
	// shards interleaved by when each event became readable at the cursor
	// (the latest commit time of it and of its shard's events before it
	// in the page), ties by shard then position.
	Events []Event
	// Through is, in a store of one shard, the position the next page
	// starts after (Next's one position). Every position up to it is
	// settled (committed or abandoned, never to change), so a reader that
	// resumes after Through misses nothing and sees nothing twice. It
	// stops short of a position still reserved (an append in flight, or a
	// writer that died: then until Repair or the relay abandons it, after
	// EVENT_STORE_APPEND_TIMEOUT). 0 in a store of several shards.
	Through int64
	// Next is the cursor the next page starts after: per shard what
	// Through is for one, so it never passes a position of a shard that
	// is still reserved, whatever the other shards do. The cursor after
	// any event of the page is also safe to resume from: the start cursor
	// with each shard advanced to the position of its last event up to
	// and including that one (Cursor.With(ev.Shard, ev.Envelope.Position)
	// applied in page order).
	Next Cursor
}

const sqlLogBound = `
SELECT least((SELECT next_position - 1 FROM sluice.log_head WHERE shard = 0),
             coalesce((SELECT min(a.position) - 1 FROM sluice.appends_open o
                        JOIN sluice.appends a ON a.shard = o.shard AND a.position BETWEEN o.first AND o.last
                       WHERE o.shard = 0 AND o.last > $1 AND a.position > $1 AND a.state = '` + StateReserved + `'), 9223372036854775807))`

// Log reads the log after a cursor (a store of one shard: after a
// position): the events every consumer of the store sees, with the cursor
// up to which the log is final (LogPage.Next). The bounds and the rows
// come from one snapshot.
func (s *Store) Log(ctx context.Context, q LogQuery) (LogPage, error) {
	if err := s.layoutChecked(); err != nil {
		return LogPage{Through: q.After, Next: q.Cursor}, err
	}
	if q.Limit <= 0 {
		q.Limit = 100
	}
	if s.shards > 1 {
		return s.logShards(ctx, q)
	}
	if !q.Cursor.IsZero() {
		c, err := q.Cursor.ForStore(1)
		if err != nil {
			return LogPage{Through: q.After, Next: q.Cursor}, err
		}
		q.After = c.Position(0)
	}
	if q.After < 0 {
		q.After = 0
	}
	page, err := s.logOne(ctx, q)
	page.Next = CursorOf(page.Through)
	return page, err
}

// logOne is Log for a store of one shard (the log as before shards).
func (s *Store) logOne(ctx context.Context, q LogQuery) (LogPage, error) {
	page := LogPage{Through: q.After}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return page, fmt.Errorf("eventstore: log: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var bound int64
	if err := tx.QueryRow(ctx, sqlLogBound, Replan, q.After).Scan(&bound); err != nil {
		return page, fmt.Errorf("eventstore: log: %w", err)
	}
	if bound <= q.After {
		return page, nil
	}
	rows, err := tx.Query(ctx, `SELECT `+indexColumns+` FROM sluice.appends
		WHERE shard = 0 AND position > $1 AND position <= $2 AND state = 'committed' AND ($3 = '' OR aggregate_type = $3)
		ORDER BY position LIMIT $4`, Replan, q.After, bound, q.AggregateType, q.Limit)
	if err != nil {
		return page, fmt.Errorf("eventstore: log: %w", err)
	}
	var idx []indexRow
	for rows.Next() {
		r, err := scanIndexRow(rows)
		if err != nil {
			rows.Close()
			return page, fmt.Errorf("eventstore: log: %w", err)
		}
		idx = append(idx, r)
	}
	if err := rows.Err(); err != nil {
		return page, fmt.Errorf("eventstore: log: %w", err)
	}
	_ = tx.Rollback(ctx)
	page.Through = bound
	if len(idx) == q.Limit {
		page.Through = idx[len(idx)-1].position
	}
	if len(idx) == 0 {
		return page, nil
	}
	evs, err := s.fetch(ctx, idx)
	if err != nil {
		return LogPage{Through: q.After}, err
	}
	page.Events = evs
	return page, nil
}

// sqlLogBounds reads, for every shard, the position up to which it is
// settled after the cursor's position: its last reserved position
// (next_position - 1), or just below its lowest position still reserved
// above the cursor — whichever is lower. $1 holds the cursor's positions,
// shard 0 first.
const sqlLogBounds = `
SELECT h.shard, least(h.next_position - 1,
       coalesce((SELECT min(a.position) - 1 FROM sluice.appends_open o
                   JOIN sluice.appends a ON a.shard = o.shard AND a.position BETWEEN o.first AND o.last
                  WHERE o.shard = h.shard AND o.last > c.lo AND a.position > c.lo
                    AND a.state = '` + StateReserved + `'), 9223372036854775807))
  FROM unnest($1::bigint[]) WITH ORDINALITY AS c(lo, n)
  JOIN sluice.log_head h ON h.shard = c.n - 1
 ORDER BY h.shard`

// sqlLogPrefix reads, for every shard with something settled after the
// cursor, the first $5 committed events (of the type $4, when set) in
// (after, bound], in position order: the only candidates of a page of $5
// events, whatever the merge. Only positions and commit times: the rows
// of the page are read afterwards.
const sqlLogPrefix = `
SELECT c.shard, p.position, p.committed_at
  FROM unnest($1::int[], $2::bigint[], $3::bigint[]) AS c(shard, lo, hi)
  CROSS JOIN LATERAL (SELECT a.position, a.committed_at FROM sluice.appends a
                       WHERE a.shard = c.shard AND a.position > c.lo AND a.position <= c.hi
                         AND a.state = '` + StateCommitted + `' AND ($4 = '' OR a.aggregate_type = $4)
                       ORDER BY a.position LIMIT $5) p
 ORDER BY c.shard, p.position`

// sqlLogRows reads the index rows of the page's events.
const sqlLogRows = `SELECT ` + indexColumns + ` FROM sluice.appends
  JOIN unnest($1::int[], $2::bigint[]) AS k(shard, position) USING (shard, position)`

// logCandidate is one event of a shard's prefix (sqlLogPrefix).
type logCandidate struct {
	shard    int
	position int64
	// ready is when the event became readable at the cursor: the latest
	// commit time of it and of its shard's candidates before it.
	ready time.Time
}

// mergeCandidates orders the shards' candidates into a page of at most
// limit events: by ready, then shard, then position. ready never goes down
// along a shard's positions, so each shard keeps its position order and
// the page is a prefix of a merge of the shards. cands is in shard, then
// position order, with ready still the row's own commit time.
func mergeCandidates(cands []logCandidate, limit int) []logCandidate {
	for i := 1; i < len(cands); i++ {
		if cands[i].shard == cands[i-1].shard && cands[i].ready.Before(cands[i-1].ready) {
			cands[i].ready = cands[i-1].ready
		}
	}
	slices.SortFunc(cands, func(a, b logCandidate) int {
		return cmp.Or(a.ready.Compare(b.ready), cmp.Compare(a.shard, b.shard), cmp.Compare(a.position, b.position))
	})
	return cands[:min(len(cands), limit)]
}

// nextCursor is the cursor after a page: a shard whose candidates all made
// the page (and were fewer than limit, so there are no more) advances to
// its bound, one that had candidates left out to its last event in the
// page, the others stay.
func nextCursor(from Cursor, bounds []int64, cands, page []logCandidate, limit int) Cursor {
	n := from.Shards()
	offered, taken, last := make([]int, n), make([]int, n), make([]int64, n)
	for _, c := range cands {
		offered[c.shard]++
	}
	for _, c := range page {
		taken[c.shard]++
		last[c.shard] = c.position
	}
	next := from.Positions()
	for s := range n {
		switch {
		case taken[s] == offered[s] && offered[s] < limit:
			next[s] = max(next[s], bounds[s])
		case taken[s] > 0:
			next[s] = last[s]
		}
	}
	return Cursor{pos: next}
}

// logBounds sets, for each shard this store's server holds, the position
// up to which a reader after from may read (what is settled: nothing
// reserved at or below it) in bounds (one per shard of the store).
func (s *Store) logBounds(ctx context.Context, tx pgx.Tx, from Cursor, bounds []int64) error {
	rows, err := tx.Query(ctx, sqlLogBounds, Replan, from.pos)
	if err != nil {
		return fmt.Errorf("eventstore: log: %w", err)
	}
	defer rows.Close()
	seen := 0
	for rows.Next() {
		var shard int
		var bound int64
		if err := rows.Scan(&shard, &bound); err != nil {
			return fmt.Errorf("eventstore: log: %w", err)
		}
		if shard < 0 || shard >= len(bounds) || !s.holds(shard) {
			return fmt.Errorf("eventstore: log: head row of shard %d on the server of %s", shard, shardRanges(s.heldShards()))
		}
		bounds[shard] = bound
		seen++
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("eventstore: log: %w", err)
	}
	if held := len(s.heldShards()); seen != held {
		return fmt.Errorf("eventstore: log: %d head rows for %d shards", seen, held)
	}
	return nil
}

// logPageRows reads the index rows of the picked events, in page order.
func logPageRows(ctx context.Context, tx pgx.Tx, picked []logCandidate) ([]indexRow, error) {
	keyShards, keyPositions := make(pgarray.Int4, len(picked)), make(pgarray.Int8, len(picked))
	at := make(map[[2]int64]int, len(picked))
	for i, c := range picked {
		keyShards[i], keyPositions[i] = int32(c.shard), c.position
		at[[2]int64{int64(c.shard), c.position}] = i
	}
	rows, err := tx.Query(ctx, sqlLogRows, Replan, keyShards, keyPositions)
	if err != nil {
		return nil, fmt.Errorf("eventstore: log: %w", err)
	}
	defer rows.Close()
	idx := make([]indexRow, len(picked))
	got := 0
	for rows.Next() {
		r, err := scanIndexRow(rows)
		if err != nil {
			return nil, fmt.Errorf("eventstore: log: %w", err)
		}
		i, ok := at[[2]int64{int64(r.shard), r.position}]
		if !ok {
			return nil, fmt.Errorf("eventstore: log: unexpected row (%d, %d)", r.shard, r.position)
		}
		idx[i] = r
		got++
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("eventstore: log: %w", err)
	}
	if got != len(picked) {
		return nil, fmt.Errorf("eventstore: log: read %d of the page's %d rows", got, len(picked))
	}
	return idx, nil
}

// logShards is Log for a store of several shards. Each server of a store
// spread over several (EVENT_STORE_SHARD_MAP) gives its shards' bounds,
// candidates and rows from one snapshot of its own; a shard is wholly on
// one server, so every shard's part of the page is read from one
// snapshot, as on one server.
func (s *Store) logShards(ctx context.Context, q LogQuery) (LogPage, error) {
	if q.Cursor.IsZero() && q.After > 0 {
		return LogPage{Through: q.After}, &CursorShardsError{Cursor: 1, Store: s.shards}
	}
	from, err := q.Cursor.ForStore(s.shards)
	if err != nil {
		return LogPage{Next: q.Cursor}, err
	}
	page := LogPage{Next: from}
	servers := s.servers()
	txs := make([]pgx.Tx, len(servers))
	defer func() {
		for _, tx := range txs {
			if tx != nil {
				_ = tx.Rollback(context.WithoutCancel(ctx))
			}
		}
	}()
	bounds := make([]int64, s.shards)
	var cands []logCandidate
	for i, p := range servers {
		if err := p.layoutChecked(); err != nil {
			return page, p.serverErr("", err)
		}
		tx, err := p.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
		if err != nil {
			return page, p.serverErr("log", err)
		}
		txs[i] = tx
		pc, err := p.logPrefix(ctx, tx, from, bounds, q)
		if err != nil {
			return page, p.serverErr("", err)
		}
		cands = append(cands, pc...) // each server's in shard, then position order, its shards its own
	}
	picked := mergeCandidates(cands, q.Limit) // sorts cands: the same events, in page order
	next := nextCursor(from, bounds, cands, picked, q.Limit)
	if len(picked) == 0 {
		page.Next = next
		return page, nil
	}
	idx := make([]indexRow, len(picked))
	for i, p := range servers {
		var mine []logCandidate
		var at []int
		for k, c := range picked {
			if s.serverIndex(c.shard) == i {
				mine, at = append(mine, c), append(at, k)
			}
		}
		if len(mine) == 0 {
			continue
		}
		rows, err := logPageRows(ctx, txs[i], mine)
		if err != nil {
			return page, p.serverErr("", err)
		}
		for k, r := range rows {
			idx[at[k]] = r
		}
		_ = txs[i].Rollback(ctx)
	}
	evs, err := s.fetch(ctx, idx)
	if err != nil {
		return page, err
	}
	page.Events, page.Next = evs, next
	return page, nil
}

// logPrefix reads, on this store's server, its shards' bounds into bounds
// and the candidates of a page of q.Limit after from (sqlLogPrefix).
func (s *Store) logPrefix(ctx context.Context, tx pgx.Tx, from Cursor, bounds []int64, q LogQuery) ([]logCandidate, error) {
	if err := s.logBounds(ctx, tx, from, bounds); err != nil {
		return nil, err
	}
	var shards []int32
	var afters, ends []int64
	for _, sh := range s.heldShards() {
		if bounds[sh] > from.pos[sh] {
			shards, afters, ends = append(shards, int32(sh)), append(afters, from.pos[sh]), append(ends, bounds[sh])
		}
	}
	if len(shards) == 0 {
		return nil, nil
	}
	rows, err := tx.Query(ctx, sqlLogPrefix, Replan, shards, afters, ends, q.AggregateType, q.Limit)
	if err != nil {
		return nil, fmt.Errorf("eventstore: log: %w", err)
	}
	cands, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (logCandidate, error) {
		var c logCandidate
		err := r.Scan(&c.shard, &c.position, &c.ready)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("eventstore: log: %w", err)
	}
	return cands, nil
}

// LogTail is the cursor of a reader that starts now: per shard the
// position up to which the shard is settled (its last reserved position,
// or just below the lowest one still reserved). A reader that starts
// after it reads every event committed from now on — including one whose
// position was reserved before it started — and perhaps a few committed
// just before. (A subscription to a store of one shard starts after Head
// instead, as before shards.)
func (s *Store) LogTail(ctx context.Context) (Cursor, error) {
	if err := s.layoutChecked(); err != nil {
		return Cursor{}, err
	}
	out := StartCursor(s.shards)
	for _, p := range s.servers() {
		if err := p.logTail(ctx, out.pos); err != nil {
			return Cursor{}, p.serverErr("", err)
		}
	}
	return out, nil
}

// logTail sets the bounds of the shards this store's server holds in pos.
func (s *Store) logTail(ctx context.Context, pos []int64) error {
	if err := s.layoutChecked(); err != nil {
		return err
	}
	rows, err := s.pool.Query(ctx, sqlLogBounds, Replan, make([]int64, s.shards))
	if err != nil {
		return fmt.Errorf("eventstore: log tail: %w", err)
	}
	seen := 0
	var shard int
	var bound int64
	if _, err := pgx.ForEachRow(rows, []any{&shard, &bound}, func() error {
		if shard < 0 || shard >= s.shards || !s.holds(shard) {
			return fmt.Errorf("head row of shard %d on the server of %s", shard, shardRanges(s.heldShards()))
		}
		pos[shard] = max(bound, 0)
		seen++
		return nil
	}); err != nil {
		return fmt.Errorf("eventstore: log tail: %w", err)
	}
	if held := len(s.heldShards()); seen != held {
		return fmt.Errorf("eventstore: log tail: %d head rows for %d shards", seen, held)
	}
	return nil
}

// LogWalk reads the log after from (the zero Cursor: the beginning),
// page by page, and calls fn with each event in Log's order and the
// cursor after it, until a page brings nothing (the settled end of the
// log when that page was read), or most events were walked (most > 0), or
// fn fails. It returns the cursor to resume after: the one after the last
// event walked, or further when the walk ended at the settled end.
func (s *Store) LogWalk(ctx context.Context, from Cursor, most int, fn func(ev Event, after Cursor) error) (Cursor, error) {
	cur, err := from.ForStore(s.shards)
	if err != nil {
		return from, err
	}
	walked := 0
	for {
		limit := 500
		if most > 0 {
			limit = min(limit, most-walked)
		}
		page, err := s.Log(ctx, LogQuery{Cursor: cur, Limit: limit})
		if err != nil {
			return cur, err
		}
		for _, ev := range page.Events {
			cur = cur.With(ev.Shard, ev.Envelope.Position)
			if err := fn(ev, cur); err != nil {
				return cur, err
			}
			walked++
		}
		if most > 0 && walked >= most {
			return cur, nil
		}
		cur = page.Next
		if len(page.Events) == 0 {
			return cur, nil
		}
	}
}
