// Package eventstoretest gives the tests of other packages what they used
// to do to the event store's tables with SQL of their own: read the index
// rows, and forge the states a crashed or stalled writer leaves behind. It
// addresses a store of one shard (shard 0), except Forge, which serves any
// (Forged.Shards). The
// store owns its schema (docs/architecture.md, "Table ownership"); this
// package is where that schema is named for tests, beside the store.
package eventstoretest

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/shared/envelope"
)

// Filter selects index rows; zero fields select everything.
type Filter struct {
	State             string // eventstore.StateReserved, StateCommitted or StateAbandoned
	Kind              envelope.Kind
	EventID           string
	AggregateIDPrefix string
	AggregateIDs      []string // any of these
}

const filterSQL = ` WHERE ($1 = '' OR state = $1) AND ($2 = '' OR kind = $2) AND ($3 = '' OR event_id::text = $3)
	AND starts_with(aggregate_id, $4) AND (cardinality($5::text[]) = 0 OR aggregate_id = ANY($5))`

func (f Filter) args() []any {
	ids := f.AggregateIDs
	if ids == nil {
		ids = []string{}
	}
	return []any{f.State, string(f.Kind), f.EventID, f.AggregateIDPrefix, ids}
}

// Rows returns every index row, in position order.
func Rows(ctx context.Context, pool *pgxpool.Pool) ([]eventstore.IndexEntry, error) {
	return Select(ctx, pool, Filter{})
}

// Select returns the index rows f selects (with their shard), in position order.
func Select(ctx context.Context, pool *pgxpool.Pool, f Filter) ([]eventstore.IndexEntry, error) {
	rows, err := pool.Query(ctx, `SELECT position, event_id::text, kind, aggregate_type, aggregate_id, sequence_number,
		state, coalesce(segment_key, ''), coalesce(writer_id, ''), reserved_at, shard FROM sluice.appends`+filterSQL+` ORDER BY position, shard`, f.args()...)
	if err != nil {
		return nil, fmt.Errorf("eventstoretest: rows: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (eventstore.IndexEntry, error) {
		var e eventstore.IndexEntry
		var kind string
		err := r.Scan(&e.Position, &e.EventID, &kind, &e.AggregateType, &e.AggregateID, &e.SequenceNumber, &e.State, &e.SegmentKey, &e.WriterID, &e.ReservedAt, &e.Shard)
		e.Kind = envelope.Kind(kind)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("eventstoretest: rows: %w", err)
	}
	return out, nil
}

// Count returns how many index rows f selects.
func Count(ctx context.Context, pool *pgxpool.Pool, f Filter) (int64, error) {
	var n int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM sluice.appends`+filterSQL, f.args()...).Scan(&n); err != nil {
		return 0, fmt.Errorf("eventstoretest: count: %w", err)
	}
	return n, nil
}

// Head returns the highest committed position (0 when none).
func Head(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var n int64
	if err := pool.QueryRow(ctx, `SELECT coalesce(max(position), 0) FROM sluice.appends WHERE state = $1`, eventstore.StateCommitted).Scan(&n); err != nil {
		return 0, fmt.Errorf("eventstoretest: head: %w", err)
	}
	return n, nil
}

// Forged is an index row as a writer that died after its reservation
// leaves it: no line in any segment.
type Forged struct {
	EventID       string
	Kind          envelope.Kind
	AggregateType string
	AggregateID   string
	// State is eventstore.StateReserved or eventstore.StateAbandoned.
	State         string
	CanonicalHash []byte
	OccurredAt    time.Time
	// WriterID defaults to "crashed-writer".
	WriterID string
	// Shards is the store's number of shards (0 or 1: one shard). With
	// more, the row goes to its aggregate's shard (eventstore.ShardOf) and
	// takes that shard's next position.
	Shards int
}

// Forge reserves the aggregate's next slot and the log's next position for
// f (its shard's, in a store of more than one shard), as the store's
// reservation does, in one transaction, and returns them. Its segment key
// is the one-position segment of the position (ForgedSegmentKey).
func Forge(ctx context.Context, pool *pgxpool.Pool, f Forged) (position, seq int64, err error) {
	shard := eventstore.ShardOf(f.AggregateType, f.AggregateID, f.Shards)
	if f.WriterID == "" {
		f.WriterID = "crashed-writer"
	}
	if f.OccurredAt.IsZero() {
		f.OccurredAt = time.Now()
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO sluice.sequences (aggregate_type, aggregate_id, last_sequence) VALUES ($1, $2, 1)
			ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_sequence = sequences.last_sequence + 1, updated_at = now()
			RETURNING last_sequence`, f.AggregateType, f.AggregateID).Scan(&seq); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `UPDATE sluice.log_head SET next_position = next_position + 1 WHERE shard = $1 RETURNING next_position - 1`, shard).Scan(&position); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO sluice.appends (position, event_id, kind, aggregate_type, aggregate_id, sequence_number,
				state, segment_key, canonical_hash, occurred_at, writer_id, shard)
			VALUES ($1, $2::text::uuid, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
			position, f.EventID, string(f.Kind), f.AggregateType, f.AggregateID, seq, f.State,
			ForgedSegmentKey(f.Shards, shard, position), f.CanonicalHash, f.OccurredAt, f.WriterID, shard)
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("eventstoretest: forge a %s row: %w", f.State, err)
	}
	return position, seq, nil
}

// ForgedSegmentKey is the key of the one-position segment of position in
// shard of a store of shards (docs/eventstore.md#shards: the key of a
// store of more than one shard names its lowest shard's block).
func ForgedSegmentKey(shards, shard int, position int64) string {
	if shards <= 1 {
		return eventstore.SegmentKey(position, position)
	}
	return fmt.Sprintf("%sn%d/%04d-%020d-%020d.jsonl", eventstore.SegmentPrefix, shards, shard, position, position)
}

// RolledBackReservation takes n positions in a transaction that rolls
// back, as a reservation whose transaction failed does.
func RolledBackReservation(ctx context.Context, pool *pgxpool.Pool, n int64) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("eventstoretest: begin: %w", err)
	}
	if _, err := tx.Exec(ctx, `UPDATE sluice.log_head SET next_position = next_position + $1 WHERE shard = 0`, n); err != nil {
		_ = tx.Rollback(ctx)
		return fmt.Errorf("eventstoretest: reserve: %w", err)
	}
	return tx.Rollback(ctx)
}

// DeleteRows deletes the index rows at positions (every row when none is
// given), as a lost or partly restored index would lack them.
func DeleteRows(ctx context.Context, pool *pgxpool.Pool, positions ...int64) error {
	var err error
	if len(positions) == 0 {
		_, err = pool.Exec(ctx, `DELETE FROM sluice.appends`)
	} else {
		_, err = pool.Exec(ctx, `DELETE FROM sluice.appends WHERE position = ANY($1)`, positions)
	}
	if err != nil {
		return fmt.Errorf("eventstoretest: delete rows: %w", err)
	}
	return nil
}

// AgeReservations moves the reservation time of every row d into the past.
func AgeReservations(ctx context.Context, pool *pgxpool.Pool, d time.Duration) error {
	if _, err := pool.Exec(ctx, `UPDATE sluice.appends SET reserved_at = now() - make_interval(secs => $1)`, d.Seconds()); err != nil {
		return fmt.Errorf("eventstoretest: age reservations: %w", err)
	}
	return nil
}

// SeedCommands writes n instance aggregates of db and class straight into
// the index, as a store that has held them for a long time looks to
// start-up code and to size measurements: per aggregate (instance ids
// seed-1 … seed-n) its sequences row at 1 and one committed command at
// sequence 1, at the positions after the head, and log_head moved past
// them; then ANALYZE, so the planner's estimates see them. It writes no
// segment: the rows name segments that do not exist, so nothing may read
// these events — move the relay's checkpoint past them (it returns the last
// position). The aggregates have no domain event, so the instance worker's
// start-up check counts or samples them without reading a document for
// them. Three statements over generate_series, for the growth benchmarks
// (docs/benchmarks.md); never for correctness tests.
func SeedCommands(ctx context.Context, pool *pgxpool.Pool, db, class string, n int64) (last int64, err error) {
	prefix, err := envelope.InstanceAggregateID(db, class, "seed-")
	if err != nil {
		return 0, fmt.Errorf("eventstoretest: seed: %w", err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("eventstoretest: seed: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var first int64
	if err := tx.QueryRow(ctx, `UPDATE sluice.log_head SET next_position = next_position + $1 WHERE shard = 0
		RETURNING next_position - $1`, n).Scan(&first); err != nil {
		return 0, fmt.Errorf("eventstoretest: seed: head: %w", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO sluice.appends (position, event_id, kind, aggregate_type, aggregate_id,
			sequence_number, state, segment_key, byte_offset, byte_length, canonical_hash, occurred_at, writer_id,
			reserved_at, committed_at)
		SELECT $1 + i - 1, gen_random_uuid(), $2, $3, $4 || i, 1, $5,
			'segments/seed-' || lpad((($1 + i - 1) / 500)::text, 20, '0') || '.jsonl', ((i - 1) % 500) * 400, 400,
			sha256(convert_to(i::text, 'UTF8')), now(), 'seed', now(), now()
		FROM generate_series(1, $6::bigint) AS i`,
		first, string(envelope.KindCommand), envelope.AggregateTypeInstance, prefix, eventstore.StateCommitted, n); err != nil {
		return 0, fmt.Errorf("eventstoretest: seed: appends: %w", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO sluice.sequences (aggregate_type, aggregate_id, last_sequence)
		SELECT $1, $2 || i, 1 FROM generate_series(1, $3::bigint) AS i`, envelope.AggregateTypeInstance, prefix, n); err != nil {
		return 0, fmt.Errorf("eventstoretest: seed: sequences: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("eventstoretest: seed: %w", err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE sluice.appends, sluice.sequences`); err != nil {
		return 0, fmt.Errorf("eventstoretest: seed: analyze: %w", err)
	}
	return first + n - 1, nil
}

// CommittedIDs returns the event ids of the committed rows, sorted,
// leaving out those of shard after position below (a shard held at a late
// block; below < 0 leaves out none).
func CommittedIDs(ctx context.Context, pool *pgxpool.Pool, shard int, below int64) ([]string, error) {
	rows, err := pool.Query(ctx, `SELECT event_id::text FROM sluice.appends
		WHERE state = 'committed' AND NOT (shard = $1 AND position > $2 AND $2 >= 0) ORDER BY event_id`, shard, below)
	if err != nil {
		return nil, fmt.Errorf("eventstoretest: committed ids: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("eventstoretest: committed ids: %w", err)
	}
	return ids, nil
}

// ReservedPosition returns the position of shard's one reserved row (a
// group held between its reservation and its commit).
func ReservedPosition(ctx context.Context, pool *pgxpool.Pool, shard int) (int64, error) {
	var p int64
	if err := pool.QueryRow(ctx, `SELECT position FROM sluice.appends WHERE shard = $1 AND state = 'reserved'`, shard).Scan(&p); err != nil {
		return 0, fmt.Errorf("eventstoretest: reserved position of shard %d: %w", shard, err)
	}
	return p, nil
}
