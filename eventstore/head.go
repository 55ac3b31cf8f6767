package eventstore

import (
	"context"
	"fmt"
	"time"
)

// Row states of sluice.appends, declared once: the store's SQL, IndexEntry.State
// and the relay's walk use these (see TestRowStatesMatchSchema).
const (
	// StateReserved: the position is held for an append in flight.
	StateReserved = "reserved"
	// StateCommitted: the event's line is durable in a segment; readable.
	StateCommitted = "committed"
	// StateAbandoned: the position will never hold an event.
	StateAbandoned = "abandoned"
)

// The package's own short names of the row states.
const (
	stateReserved  = StateReserved
	stateCommitted = StateCommitted
	stateAbandoned = StateAbandoned
)

// HeadClock is the committed head read together with the database clock
// (the clock that stamps reserved_at and committed_at, so that ages
// compared with it are free of the reader's clock skew).
type HeadClock struct {
	// Position is the highest committed position, 0 for an empty store.
	Position int64
	// Now is the database's clock when Position was read.
	Now time.Time
}

// HeadWithClock returns Head and the database clock in one round trip.
// A store of more than one shard answers *ShardsNotSupportedError
// (ShardLog(i).HeadWithClock serves one shard).
func (s *Store) HeadWithClock(ctx context.Context) (HeadClock, error) {
	if err := s.readerByPosition("HeadWithClock (the log's one head)"); err != nil {
		return HeadClock{}, err
	}
	return s.ShardLog(0).HeadWithClock(ctx)
}

// HeadWithClock returns the shard's Head and the database clock in one
// round trip.
func (l ShardLog) HeadWithClock(ctx context.Context) (HeadClock, error) {
	if err := l.checked(); err != nil {
		return HeadClock{}, err
	}
	var h HeadClock
	err := l.s.pool.QueryRow(ctx, `SELECT coalesce(max(position), 0), now() FROM sluice.appends WHERE shard = $1 AND state = '`+StateCommitted+`'`, Replan, l.shard).Scan(&h.Position, &h.Now)
	if err != nil {
		return HeadClock{}, fmt.Errorf("eventstore: head: %w", err)
	}
	return h, nil
}

// PositionAt returns the position before the first event committed at or
// after t (a reader that starts after it starts at that event), or the last
// reserved position when nothing was committed since t. A store of more
// than one shard answers *ShardsNotSupportedError (ShardLog(i).PositionAt
// serves one shard).
func (s *Store) PositionAt(ctx context.Context, t time.Time) (int64, error) {
	if err := s.readerByPosition("PositionAt (a global position)"); err != nil {
		return 0, err
	}
	return s.ShardLog(0).PositionAt(ctx, t)
}

// PositionAt is Store.PositionAt in the shard's positions.
func (l ShardLog) PositionAt(ctx context.Context, t time.Time) (int64, error) {
	if err := l.checked(); err != nil {
		return 0, err
	}
	var p int64
	err := l.s.pool.QueryRow(ctx, `SELECT coalesce(
  (SELECT min(position) - 1 FROM sluice.appends WHERE shard = $2 AND state = '`+StateCommitted+`' AND committed_at >= $1),
  (SELECT next_position - 1 FROM sluice.log_head WHERE shard = $2))`, t, l.shard).Scan(&p)
	if err != nil {
		return 0, fmt.Errorf("eventstore: position at %s: %w", t.Format(time.RFC3339), err)
	}
	return p, nil
}

// LastSequence returns the last sequence number handed out to an aggregate
// (0 when it has none): the value an append's expected_seq is compared with.
// A handed-out slot may still be reserved, not yet committed.
func (s *Store) LastSequence(ctx context.Context, aggregateType, aggregateID string) (int64, error) {
	if s.parts != nil {
		p, err := s.serverOfAggregate(aggregateType, aggregateID)
		if err != nil {
			return 0, err
		}
		n, err := p.LastSequence(ctx, aggregateType, aggregateID)
		return n, p.serverErr("", err)
	}
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT coalesce(max(last_sequence), 0) FROM sluice.sequences WHERE aggregate_type = $1 AND aggregate_id = $2`,
		aggregateType, aggregateID).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("eventstore: last sequence of %s %q: %w", aggregateType, aggregateID, err)
	}
	return n, nil
}
