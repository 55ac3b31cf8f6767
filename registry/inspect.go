package registry

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/envelope"
)

// MaxGetMany bounds the event ids of one GetMany call.
const MaxGetMany = 1000

// Version is one handler's sequence-guard state of an aggregate: the
// highest finished sequence (sluice.aggregate_versions, docs/registry.md#sequence-guard-policies-per-handler) and when
// it last moved (database clock).
type Version struct {
	Handler      string
	LastSequence int64
	UpdatedAt    time.Time
}

// GetMany returns the rows of every handler for the event ids (at most
// MaxGetMany), ordered by event_id and handler: the rows of a page of one
// aggregate's events in one query (the operator console's aggregate view).
// Ids without a row are absent from the result.
func (r *Registry) GetMany(ctx context.Context, eventIDs []string) ([]claim.Row, error) {
	if len(eventIDs) > MaxGetMany {
		return nil, &claim.RequestError{Field: "event_id", Reason: fmt.Sprintf("%d event ids, at most %d per call", len(eventIDs), MaxGetMany)}
	}
	for i, id := range eventIDs {
		if err := validateKey(i, "-", id); err != nil {
			return nil, err
		}
	}
	if len(eventIDs) == 0 {
		return []claim.Row{}, nil
	}
	return r.queryRows(ctx, "get many", `SELECT `+rowColumns+` FROM sluice.processed_events
			WHERE event_id = ANY($1::text[]) ORDER BY event_id, handler`, eventIDs)
}

// Versions returns the sequence-guard rows of the aggregate (its registry
// key, envelope.AggregateKey) for the named handlers, ordered by handler;
// a handler without a row (it never finished an event of the aggregate) is
// absent. The handlers are named because the table's key starts with the
// handler: each one is a primary-key probe, never a scan.
func (r *Registry) Versions(ctx context.Context, aggregateID string, handlers []string) ([]Version, error) {
	agg, err := envelope.NormalizeAggregateID(aggregateID)
	if err != nil {
		return nil, &claim.RequestError{Field: "aggregate_id", Reason: err.Error(), Err: err}
	}
	hs := slices.Clone(handlers)
	slices.Sort(hs)
	hs = slices.Compact(hs)
	for i, h := range hs {
		if err := validateKey(i, h, "-"); err != nil {
			return nil, err
		}
	}
	out := []Version{}
	if len(hs) == 0 {
		return out, nil
	}
	err = r.run(ctx, "versions", func(ctx context.Context) error {
		out = out[:0]
		rows, err := r.pool.Query(ctx, `SELECT handler, last_sequence, updated_at FROM sluice.aggregate_versions
			WHERE handler = ANY($1::text[]) AND aggregate_id = $2 ORDER BY handler`, hs, agg)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var v Version
			if err := rows.Scan(&v.Handler, &v.LastSequence, &v.UpdatedAt); err != nil {
				return err
			}
			out = append(out, v)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
