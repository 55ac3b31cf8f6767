package eventstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// LogQuery selects a page of the global log (Store.Log).
type LogQuery struct {
	// After is the position the page starts after (0: the beginning).
	After int64
	// Limit bounds the events returned (default 100).
	Limit int
	// AggregateType, when set, returns only that aggregate type's events
	// (the page still advances over the others).
	AggregateType string
}

// LogPage is a page of the global log.
type LogPage struct {
	// Events are committed events with After < position <= Through, in
	// position order.
	Events []Event
	// Through is the position the next page starts after. Every position
	// up to it is settled (committed or abandoned, never to change), so a
	// reader that resumes after Through misses nothing and sees nothing
	// twice. It stops short of a position still reserved (an append in
	// flight, or a writer that died: then until Repair or the relay
	// abandons it, after EVENT_STORE_APPEND_TIMEOUT).
	Through int64
}

const sqlLogBound = `
SELECT least((SELECT next_position - 1 FROM sluice.log_head WHERE shard = 0),
             coalesce((SELECT min(position) - 1 FROM sluice.appends WHERE shard = 0 AND state = 'reserved' AND position > $1), 9223372036854775807))`

// Log reads the global log after a position: the events every consumer of
// the store sees, in position order, with the bound up to which the log
// is final (LogPage.Through). The bound and the rows come from one
// snapshot. A store of more than one shard answers
// *ShardsNotSupportedError (per-shard cursors are issue 33 item 4).
func (s *Store) Log(ctx context.Context, q LogQuery) (LogPage, error) {
	if err := s.readerByPosition("Log (the log by global position)"); err != nil {
		return LogPage{Through: q.After}, err
	}
	if q.Limit <= 0 {
		q.Limit = 100
	}
	if q.After < 0 {
		q.After = 0
	}
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
