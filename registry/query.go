package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/sluicehq/sluice/shared/claim"
)

const rowColumns = `handler, event_id, aggregate_id, sequence_number, status, owner,
	lease_token::text, started_at, heartbeat_at, processed_at, next_attempt_at, first_failed_at,
	attempt_count, last_error, outcome`

func scanRow(row pgx.Row) (claim.Row, error) {
	var (
		out                                                 claim.Row
		status                                              string
		token, lerr                                         pgtype.Text
		started, heartbeat, processed, nextAttempt, firstFl pgtype.Timestamptz
		attempts                                            int32
		outcome                                             []byte
	)
	err := row.Scan(&out.Handler, &out.EventID, &out.AggregateID, &out.Sequence, &status, &out.Owner,
		&token, &started, &heartbeat, &processed, &nextAttempt, &firstFl, &attempts, &lerr, &outcome)
	if err != nil {
		return claim.Row{}, err
	}
	out.Status = claim.Status(status)
	out.LeaseToken = token.String
	out.LastError = lerr.String
	out.Attempts = int(attempts)
	for _, p := range []struct {
		dst *time.Time
		src pgtype.Timestamptz
	}{{&out.StartedAt, started}, {&out.HeartbeatAt, heartbeat}, {&out.ProcessedAt, processed}, {&out.NextAttemptAt, nextAttempt}, {&out.FirstFailedAt, firstFl}} {
		if p.src.Valid {
			*p.dst = p.src.Time
		}
	}
	if out.Outcome, err = decodeOutcome(outcome); err != nil {
		return claim.Row{}, err
	}
	return out, nil
}

// Get returns every handler's row for eventID, ordered by handler (command
// status, `sluice registry show`); none is an empty slice, not an error.
func (r *Registry) Get(ctx context.Context, eventID string) ([]claim.Row, error) {
	if err := validateKey(0, "-", eventID); err != nil {
		return nil, err
	}
	return r.queryRows(ctx, "get", `SELECT `+rowColumns+` FROM sluice.processed_events WHERE event_id = $1 ORDER BY handler`, eventID)
}

// queryRows runs a query of rowColumns (under r.run's outage handling) and
// returns its rows; none is an empty slice.
func (r *Registry) queryRows(ctx context.Context, op, sql string, args ...any) ([]claim.Row, error) {
	out := []claim.Row{}
	err := r.run(ctx, op, func(ctx context.Context) error {
		out = out[:0]
		rows, err := r.pool.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			row, err := scanRow(rows)
			if err != nil {
				return err
			}
			out = append(out, row)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// GetRow returns one handler's row for eventID, or an error matching
// ErrNotFound.
func (r *Registry) GetRow(ctx context.Context, handler, eventID string) (claim.Row, error) {
	if err := validateKey(0, handler, eventID); err != nil {
		return claim.Row{}, err
	}
	var out claim.Row
	var missing bool
	err := r.run(ctx, "get", func(ctx context.Context) error {
		var err error
		out, err = scanRow(r.pool.QueryRow(ctx, `SELECT `+rowColumns+` FROM sluice.processed_events WHERE handler = $1 AND event_id = $2`, handler, eventID))
		if errors.Is(err, pgx.ErrNoRows) {
			missing = true
			return nil
		}
		return err
	})
	if err != nil {
		return claim.Row{}, err
	}
	if missing {
		return claim.Row{}, fmt.Errorf("registry: handler %q event %q: %w", handler, eventID, ErrNotFound)
	}
	return out, nil
}

// Prune deletes done and skipped_stale rows processed more than olderThan
// ago (database clock; PROCESSED_EVENT_RETENTION_DAYS), in statements of at
// most Config.PruneBatch rows so no transaction grows large, and returns
// how many rows it deleted (also when it stops early on an error).
// Processing, failed and dead rows are never pruned, nor are the aggregate
// versions, which keep a replayed pruned event STALE.
func (r *Registry) Prune(ctx context.Context, olderThan time.Duration) (int64, error) {
	if olderThan <= 0 {
		return 0, &claim.RequestError{Field: "older_than", Reason: fmt.Sprintf("retention %s must be positive", olderThan)}
	}
	return r.pruneRows(ctx, olderThan, nil, nil)
}

// FormatRows writes rows as an aligned text table for `sluice registry
// show`: one block of "field value" lines per row, times in UTC (RFC 3339).
func FormatRows(w io.Writer, rows []claim.Row) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	ts := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	str := func(s string) string {
		if s == "" {
			return "-"
		}
		return strconv.Quote(s)
	}
	for i, row := range rows {
		if i > 0 {
			fmt.Fprintln(tw)
		}
		outcome := "-"
		if row.Outcome != nil {
			outcome = string(row.Outcome.Result)
			if row.Outcome.Reason != "" {
				outcome += ": " + row.Outcome.Reason
			}
		}
		for _, f := range [][2]string{
			{"handler", row.Handler},
			{"event_id", row.EventID},
			{"aggregate_id", strconv.Quote(row.AggregateID)},
			{"sequence_number", strconv.FormatInt(row.Sequence, 10)},
			{"status", string(row.Status)},
			{"outcome", outcome},
			{"owner", row.Owner},
			{"attempt_count", strconv.Itoa(row.Attempts)},
			{"lease_token", str(row.LeaseToken)},
			{"started_at", ts(row.StartedAt)},
			{"heartbeat_at", ts(row.HeartbeatAt)},
			{"processed_at", ts(row.ProcessedAt)},
			{"next_attempt_at", ts(row.NextAttemptAt)},
			{"first_failed_at", ts(row.FirstFailedAt)},
			{"last_error", str(row.LastError)},
		} {
			fmt.Fprintf(tw, "%s\t%s\n", f[0], strings.ReplaceAll(f[1], "\n", " "))
		}
	}
	return tw.Flush()
}
