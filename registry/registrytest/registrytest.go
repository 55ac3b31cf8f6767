// Package registrytest gives the tests of other packages what they used to
// do to the registry's tables with SQL of their own: read the rows of a
// handler, and forge what another owner or the passing of time leaves
// behind. The registry owns its schema (docs/architecture.md, "Table
// ownership"); this package is where that schema is named for tests.
package registrytest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/shared/claim"
)

// Rows returns the rows of handler (of every handler when handler is ""),
// ordered by handler, aggregate and sequence. Only the fields tests read
// are filled: Handler, EventID, AggregateID, Sequence, Status, Owner,
// Attempts, ProcessedAt, LastError and Outcome's reason and result.
func Rows(ctx context.Context, pool *pgxpool.Pool, handler string) ([]claim.Row, error) {
	return rows(ctx, pool, handler, "")
}

// rows reads the rows of handler ("" for every handler), only the one of
// eventID when it is not "": Row is one probe of the primary key, not a
// scan of the handler's rows (a test that asks for each of 20,000 events
// would otherwise read 400 million rows).
func rows(ctx context.Context, pool *pgxpool.Pool, handler, eventID string) ([]claim.Row, error) {
	rows, err := pool.Query(ctx, `SELECT handler, event_id, aggregate_id, sequence_number, status, owner, attempt_count,
		processed_at, coalesce(last_error, ''), coalesce(outcome->>'result', ''), coalesce(outcome->>'reason', '')
		FROM sluice.processed_events WHERE ($1 = '' OR handler = $1) AND ($2 = '' OR event_id = $2)
		ORDER BY handler, aggregate_id, sequence_number, event_id`, handler, eventID)
	if err != nil {
		return nil, fmt.Errorf("registrytest: rows: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (claim.Row, error) {
		var (
			out            claim.Row
			status         string
			attempts       int32
			processed      pgtype.Timestamptz
			result, reason string
		)
		err := r.Scan(&out.Handler, &out.EventID, &out.AggregateID, &out.Sequence, &status, &out.Owner, &attempts, &processed,
			&out.LastError, &result, &reason)
		out.Status, out.Attempts = claim.Status(status), int(attempts)
		if processed.Valid {
			out.ProcessedAt = processed.Time
		}
		if result != "" {
			out.Outcome = &claim.Outcome{Result: claim.OutcomeResult(result), Reason: reason}
		}
		return out, err
	})
}

// Row returns one row (registry.ErrNotFound when there is none).
func Row(ctx context.Context, pool *pgxpool.Pool, handler, eventID string) (claim.Row, error) {
	if eventID == "" {
		return claim.Row{}, fmt.Errorf("registrytest: row: no event id: %w", registry.ErrNotFound)
	}
	rs, err := rows(ctx, pool, handler, eventID)
	if err != nil {
		return claim.Row{}, err
	}
	for _, r := range rs {
		if r.EventID == eventID {
			return r, nil
		}
	}
	return claim.Row{}, fmt.Errorf("registrytest: %s %s: %w", handler, eventID, registry.ErrNotFound)
}

// Steal makes another owner the holder of a row, with a new lease token
// and a fresh heartbeat, as a reclaim after an expired lease does. It
// reports whether the row exists.
func Steal(ctx context.Context, pool *pgxpool.Pool, handler, eventID, owner string) (bool, error) {
	tag, err := pool.Exec(ctx, `UPDATE sluice.processed_events SET owner = $3, lease_token = gen_random_uuid(), heartbeat_at = now()
		WHERE handler = $1 AND event_id = $2`, handler, eventID, owner)
	if err != nil {
		return false, fmt.Errorf("registrytest: steal: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// Beat refreshes the heartbeat of a row held by owner, as that owner's
// heartbeat does.
func Beat(ctx context.Context, pool *pgxpool.Pool, handler, eventID, owner string) error {
	if _, err := pool.Exec(ctx, `UPDATE sluice.processed_events SET heartbeat_at = now()
		WHERE handler = $1 AND event_id = $2 AND owner = $3`, handler, eventID, owner); err != nil {
		return fmt.Errorf("registrytest: beat: %w", err)
	}
	return nil
}

// Age moves the start and finish times of every row d into the past.
func Age(ctx context.Context, pool *pgxpool.Pool, d time.Duration) error {
	if _, err := pool.Exec(ctx, `UPDATE sluice.processed_events SET started_at = now() - make_interval(secs => $1),
		processed_at = now() - make_interval(secs => $1)`, d.Seconds()); err != nil {
		return fmt.Errorf("registrytest: age: %w", err)
	}
	return nil
}

// LastSequence returns the handler's last finished sequence of an aggregate
// (its aggregate_versions row; registry.ErrNotFound when there is none).
func LastSequence(ctx context.Context, pool *pgxpool.Pool, handler, aggregateID string) (int64, error) {
	var last int64
	err := pool.QueryRow(ctx, `SELECT last_sequence FROM sluice.aggregate_versions WHERE handler = $1 AND aggregate_id = $2`,
		handler, aggregateID).Scan(&last)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("registrytest: %s %s: %w", handler, aggregateID, registry.ErrNotFound)
	} else if err != nil {
		return 0, fmt.Errorf("registrytest: last sequence: %w", err)
	}
	return last, nil
}

// Count returns the number of rows of every handler.
func Count(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var n int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM sluice.processed_events`).Scan(&n); err != nil {
		return 0, fmt.Errorf("registrytest: count: %w", err)
	}
	return n, nil
}

// EventIDs returns the event ids of handler's rows in one of statuses.
func EventIDs(ctx context.Context, pool *pgxpool.Pool, handler string, statuses ...claim.Status) (map[string]bool, error) {
	sts := make([]string, len(statuses))
	for i, s := range statuses {
		sts[i] = string(s)
	}
	rows, err := pool.Query(ctx, `SELECT event_id FROM sluice.processed_events WHERE handler = $1 AND status = ANY($2)`, handler, sts)
	if err != nil {
		return nil, fmt.Errorf("registrytest: event ids: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("registrytest: event ids: %w", err)
	}
	out := make(map[string]bool, len(ids))
	for _, id := range ids {
		out[id] = true
	}
	return out, nil
}
