package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/shared/claim"
)

// ErrUnsafePrune is wrapped by PlanPrune and PruneSafely when the requested
// age is shorter than the lease timeout or the relay lookback: a row that
// young may still be needed to absorb a redelivery (a lease that is about to
// be reclaimed, a gap the relay publishes late), and deleting it would let
// the event be processed twice.
var ErrUnsafePrune = errors.New("registry: unsafe prune")

// PruneRequest is a guarded prune (`sluice registry prune`).
type PruneRequest struct {
	// OlderThan: rows started and finished longer ago than this are pruned.
	OlderThan time.Duration
	// Lookback is the relay's bounded lookback
	// (EVENT_PUBLISHER_LOOKBACK_SECONDS): an event may be published late up
	// to this long after it was appended, so its rows must outlive it. The
	// lease timeout (Config.LeaseTimeout) is the other lower bound.
	Lookback time.Duration
	// Keep names handlers whose rows are what users read and are never
	// pruned: the instance worker's rows are the command statuses of
	// GET /v1/commands/{id}; deleting them turns APPLIED into PENDING.
	Keep []string
	// Only, when set, limits the prune to these handlers (a worker pruning
	// its own rows: AutoPrune).
	Only []string
}

// PruneCount is the number of prunable rows of one handler and status.
type PruneCount struct {
	Handler string `json:"handler"`
	Status  string `json:"status"`
	Rows    int64  `json:"rows"`
	// Kept: the handler is in PruneRequest.Keep; these rows stay.
	Kept bool `json:"kept,omitempty"`
}

// PrunePlan is what a prune would delete (and keep), per handler and status.
// Its JSON (MarshalJSON) gives the two durations in seconds.
type PrunePlan struct {
	OlderThan time.Duration `json:"-"`
	// Floor is the shortest OlderThan allowed: max(lease timeout, lookback).
	Floor  time.Duration `json:"-"`
	Counts []PruneCount  `json:"counts"`
	// Delete is the number of rows a prune deletes now; KeptRows the number
	// of equally old rows it keeps because users read them.
	Delete   int64 `json:"delete"`
	KeptRows int64 `json:"kept_rows"`
}

// MarshalJSON writes OlderThan and Floor as numbers of seconds,
// older_than_seconds and floor_seconds, as every --json summary of the
// CLI gives a duration (elapsed_seconds): encoding/json would write a
// time.Duration as integer nanoseconds, a unit no reader expects.
// Counts is a list even when empty ([], not null): a script reads one
// shape.
func (p PrunePlan) MarshalJSON() ([]byte, error) {
	type plan PrunePlan // without this method
	if p.Counts == nil {
		p.Counts = []PruneCount{}
	}
	return json.Marshal(struct {
		OlderThanSeconds float64 `json:"older_than_seconds"`
		FloorSeconds     float64 `json:"floor_seconds"`
		plan
	}{p.OlderThan.Seconds(), p.Floor.Seconds(), plan(p)})
}

// pruneFloor is the shortest age a prune may use.
func (r *Registry) pruneFloor(req PruneRequest) time.Duration {
	return max(r.cfg.LeaseTimeout, req.Lookback)
}

func (r *Registry) checkPrune(req PruneRequest) error {
	if req.OlderThan <= 0 {
		return &claim.RequestError{Field: "older_than", Reason: fmt.Sprintf("retention %s must be positive", req.OlderThan)}
	}
	if floor := r.pruneFloor(req); req.OlderThan < floor {
		return fmt.Errorf("%w: --older-than %s is below the lease timeout (%s) or the relay lookback (%s): rows that young still absorb redeliveries; use at least %s",
			ErrUnsafePrune, req.OlderThan, r.cfg.LeaseTimeout, req.Lookback, floor)
	}
	return nil
}

// PlanPrune validates req and counts the rows PruneSafely would delete and
// keep; it changes nothing.
func (r *Registry) PlanPrune(ctx context.Context, req PruneRequest) (PrunePlan, error) {
	plan := PrunePlan{OlderThan: req.OlderThan, Floor: r.pruneFloor(req)}
	if err := r.checkPrune(req); err != nil {
		return plan, err
	}
	keep := map[string]bool{}
	for _, h := range req.Keep {
		keep[h] = true
	}
	err := r.run(ctx, "plan prune", func(ctx context.Context) error {
		plan.Counts, plan.Delete, plan.KeptRows = nil, 0, 0
		rows, err := r.pool.Query(ctx, `SELECT handler, status, count(*) FROM sluice.processed_events
			WHERE started_at < now() - $1::bigint * interval '1 microsecond'
			  AND processed_at < now() - $1::bigint * interval '1 microsecond'
			  AND status IN ('done', 'skipped_stale')
			GROUP BY 1, 2 ORDER BY 1, 2`, req.OlderThan.Microseconds())
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var c PruneCount
			if err := rows.Scan(&c.Handler, &c.Status, &c.Rows); err != nil {
				return err
			}
			c.Kept = keep[c.Handler]
			if c.Kept {
				plan.KeptRows += c.Rows
			} else {
				plan.Delete += c.Rows
			}
			plan.Counts = append(plan.Counts, c)
		}
		return rows.Err()
	})
	return plan, err
}

// PruneSafely deletes done and skipped_stale rows older than req.OlderThan,
// in batches of Config.PruneBatch, except those of req.Keep. It refuses
// (ErrUnsafePrune) an age below the lease timeout or the lookback. Rows in
// other states (processing, failed, dead) are never pruned.
func (r *Registry) PruneSafely(ctx context.Context, req PruneRequest) (int64, error) {
	if err := r.checkPrune(req); err != nil {
		return 0, err
	}
	return r.pruneRows(ctx, req.OlderThan, req.Keep, req.Only)
}

// AutoPrune runs PruneSafely(req()) at once and then every interval until
// ctx ends (PROCESSED_EVENT_PRUNE_INTERVAL), so that the registry stays
// bounded by its retention without an operator: each worker service
// prunes its own handlers' rows (PruneRequest.Only; req is asked again
// each pass, as a rebuild adds handler versions). Replicas may prune at
// the same time; each batch skips the rows another one has locked. report,
// when set, is told the outcome of every pass (rows deleted, error; an
// unsafe request is ErrUnsafePrune and deletes nothing).
func (r *Registry) AutoPrune(ctx context.Context, interval time.Duration, req func() PruneRequest, report func(n int64, err error)) error {
	if interval <= 0 {
		return &claim.RequestError{Field: "interval", Reason: fmt.Sprintf("prune interval %s must be positive", interval)}
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		n, err := r.PruneSafely(ctx, req())
		if ctx.Err() != nil {
			return nil
		}
		if report != nil {
			report(n, err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// pruneRows deletes done and skipped_stale rows started and processed more
// than olderThan ago, except those of the handlers in keep, in statements
// of at most Config.PruneBatch rows so no transaction grows large; it
// returns how many rows it deleted (also when it stops early on an error).
func (r *Registry) pruneRows(ctx context.Context, olderThan time.Duration, keep, only []string) (int64, error) {
	if keep == nil {
		keep = []string{}
	}
	if only == nil {
		only = []string{}
	}
	var total int64
	for {
		var n int64
		err := r.run(ctx, "prune", func(ctx context.Context) error {
			tag, err := r.pool.Exec(ctx, `WITH victims AS (
					SELECT handler, event_id FROM sluice.processed_events
					WHERE started_at < now() - $1::bigint * interval '1 microsecond'
					  AND processed_at < now() - $1::bigint * interval '1 microsecond'
					  AND status IN ('done', 'skipped_stale')
					  AND NOT (handler = ANY($3::text[]))
					  AND (cardinality($4::text[]) = 0 OR handler = ANY($4::text[]))
					LIMIT $2
					FOR UPDATE SKIP LOCKED)
				DELETE FROM sluice.processed_events pe
				USING victims v
				WHERE pe.handler = v.handler AND pe.event_id = v.event_id
				  AND pe.status IN ('done', 'skipped_stale')`,
				olderThan.Microseconds(), r.cfg.PruneBatch, keep, only)
			n = tag.RowsAffected()
			return err
		})
		if err != nil {
			return total, err
		}
		total += n
		if n < int64(r.cfg.PruneBatch) {
			return total, nil
		}
	}
}
