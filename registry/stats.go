package registry

import (
	"context"
	"time"
)

// HandlerStats counts one handler's rows by state, for the admin overview:
// claims in progress (processing with a live lease), expired (processing,
// no heartbeat within the lease timeout: the owner is gone and the next
// claim takes the row over), failed (waiting for a retry), dead (sent to
// the DLQ) and finished (done or skipped_stale).
type HandlerStats struct {
	Handler    string `json:"handler"`
	InProgress int64  `json:"in_progress"`
	Expired    int64  `json:"expired"`
	Failed     int64  `json:"failed"`
	Dead       int64  `json:"dead"`
	Finished   int64  `json:"finished"`
}

// Stats counts every handler's rows by state (a scan of processed_events;
// meant for an operator's page, not a hot path).
func (r *Registry) Stats(ctx context.Context) ([]HandlerStats, error) {
	rows, err := r.pool.Query(ctx, `SELECT handler,
			count(*) FILTER (WHERE status = 'processing' AND coalesce(heartbeat_at, started_at) >= now() - $1::interval),
			count(*) FILTER (WHERE status = 'processing' AND coalesce(heartbeat_at, started_at) < now() - $1::interval),
			count(*) FILTER (WHERE status = 'failed'),
			count(*) FILTER (WHERE status = 'dead'),
			count(*) FILTER (WHERE status IN ('done', 'skipped_stale'))
		FROM sluice.processed_events GROUP BY handler ORDER BY handler`, r.cfg.LeaseTimeout.Round(time.Microsecond))
	if err != nil {
		return nil, r.wrap(ctx, "stats", err)
	}
	defer rows.Close()
	out := []HandlerStats{}
	for rows.Next() {
		var s HandlerStats
		if err := rows.Scan(&s.Handler, &s.InProgress, &s.Expired, &s.Failed, &s.Dead, &s.Finished); err != nil {
			return nil, r.wrap(ctx, "stats", err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, r.wrap(ctx, "stats", err)
	}
	return out, nil
}

// HasDone reports whether handler has at least one done row: the handler
// has applied an event, so whatever it writes must not be empty (the
// projection worker's read-model-lost check, docs/projectionworker.md#read-model-lost).
func (r *Registry) HasDone(ctx context.Context, handler string) (bool, error) {
	var ok bool
	err := r.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM sluice.processed_events WHERE handler = $1 AND status = 'done')`, handler).Scan(&ok)
	if err != nil {
		return false, r.wrap(ctx, "has done", err)
	}
	return ok, nil
}
