package registry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/pgarray"
)

// markDoneSQL marks many leases done in one statement: only rows still
// processing under the given token change (fencing); rows already done under
// that same token count as done (an idempotent retry after a lost reply).
// It returns the 1-based input positions of both. The aggregate versions
// advance monotonically (greatest) in the same transaction: existing rows by
// one UPDATE, which also tells which rows exist (cheaper than ON CONFLICT DO
// UPDATE, which costs twice as much per row); missing ones are inserted, and
// a concurrent insert falls back to the same monotonic update. The inputs
// are unique and sorted by (handler, event_id), the order in which claims
// lock rows, so the row locks of concurrent statements are taken in one
// order; outcomes are sent once per distinct value ($5 indexes $4). The
// plan must not depend on row estimates (a parameter array is estimated at
// 10 rows): the anti-joins against CTEs are NOT IN, which Postgres runs as a
// hashed subplan, never as a nested loop over the CTE.
const markDoneSQL = `WITH input AS (
    SELECT u.idx, u.handler, u.event_id, u.token, ($4::jsonb[])[u.o] AS outcome
    FROM unnest($1::text[], $2::text[], $3::uuid[], $5::integer[])
         WITH ORDINALITY AS u(handler, event_id, token, o, idx)
),
done AS (
    UPDATE sluice.processed_events pe
    SET status = 'done', processed_at = now(), heartbeat_at = now(), next_attempt_at = NULL, outcome = i.outcome
    FROM input i
    WHERE pe.handler = i.handler AND pe.event_id = i.event_id AND pe.lease_token = i.token
      AND pe.status = 'processing'
    RETURNING i.idx, pe.handler, pe.aggregate_id, pe.sequence_number
),
maxes AS MATERIALIZED (
    SELECT d.handler, d.aggregate_id, max(d.sequence_number) AS seq
    FROM done d
    GROUP BY d.handler, d.aggregate_id
    ORDER BY d.handler, d.aggregate_id
),
bumped AS (
    UPDATE sluice.aggregate_versions av
    SET last_sequence = greatest(av.last_sequence, m.seq),
        updated_at = CASE WHEN av.last_sequence < m.seq THEN now() ELSE av.updated_at END
    FROM maxes m
    WHERE av.handler = m.handler AND av.aggregate_id = m.aggregate_id
    RETURNING av.handler, av.aggregate_id
),
created AS (
    INSERT INTO sluice.aggregate_versions AS av (handler, aggregate_id, last_sequence, updated_at)
    SELECT m.handler, m.aggregate_id, m.seq, now()
    FROM maxes m
    WHERE (m.handler, m.aggregate_id) NOT IN (SELECT b.handler, b.aggregate_id FROM bumped b)
    ORDER BY m.handler, m.aggregate_id
    ON CONFLICT (handler, aggregate_id) DO UPDATE
    SET last_sequence = EXCLUDED.last_sequence, updated_at = EXCLUDED.updated_at
    WHERE av.last_sequence < EXCLUDED.last_sequence
),
missing AS MATERIALIZED (
    SELECT i.idx, i.handler, i.event_id, i.token
    FROM input i
    WHERE i.idx NOT IN (SELECT d.idx FROM done d)
)
SELECT d.idx FROM done d
UNION ALL
SELECT m.idx
FROM missing m
JOIN sluice.processed_events pe
  ON pe.handler = m.handler AND pe.event_id = m.event_id AND pe.lease_token = m.token
WHERE pe.status = 'done'`

// MarkDone records the event as processed with its outcome, only if lease
// is still the current claim (otherwise *LeaseLostError, ErrLeaseLost), and
// advances the aggregate's last finished sequence to at least the event's
// in the same transaction. Repeating a successful MarkDone with the same
// lease is a no-op success. Commit the record's offset only after it
// returns nil.
func (r *Registry) MarkDone(ctx context.Context, lease claim.Lease, outcome claim.Outcome) error {
	errs, err := r.MarkDoneBatch(ctx, []claim.Done{{Lease: lease, Outcome: outcome}})
	if err != nil {
		return err
	}
	return errs[0]
}

// MarkDoneBatch is MarkDone for many leases in one round trip and one
// transaction. errs[i] is nil when items[i] is done, or a *LeaseLostError;
// err is set when the call as a whole failed (nothing was marked).
func (r *Registry) MarkDoneBatch(ctx context.Context, items []claim.Done) (errs []error, err error) {
	if len(items) == 0 {
		return nil, nil
	}
	for i, it := range items {
		if err := validateLease(i, it.Lease); err != nil {
			return nil, err
		}
		if err := validateOutcome(it.Outcome); err != nil {
			return nil, &claim.RequestError{Index: i, Field: "outcome", Reason: err.Error()}
		}
	}
	// The statement gets each (handler, event_id, token) once, in lock
	// order; slot[i] is the position sent for items[i].
	type key struct {
		handler, eventID string
		token            [16]byte
	}
	var (
		slot      = make([]int, len(items))
		seen      = make(map[key]int, len(items))
		handlers  = make(pgarray.Text, 0, len(items))
		eventIDs  = make(pgarray.Text, 0, len(items))
		tokens    = make(pgarray.UUID, 0, len(items))
		outcomeOf = make([]int32, 0, len(items))
		outcomes  []string
		codes     = map[claim.Outcome]int32{}
	)
	for _, i := range lockOrder(len(items), func(i int) claim.Lease { return items[i].Lease }) {
		it := items[i]
		tok, err := uuid.Parse(it.Lease.Token)
		if err != nil { // validated above
			return nil, &claim.RequestError{Index: i, Field: "lease_token", Reason: err.Error(), Err: err}
		}
		k := key{it.Lease.Handler, it.Lease.EventID, tok}
		if j, ok := seen[k]; ok {
			slot[i] = j
			continue
		}
		code, ok := codes[it.Outcome]
		if !ok {
			o, err := encodeOutcome(it.Outcome)
			if err != nil {
				return nil, err
			}
			outcomes = append(outcomes, o)
			code = int32(len(outcomes)) // 1-based, a Postgres array index
			codes[it.Outcome] = code
		}
		slot[i] = len(handlers)
		seen[k] = len(handlers)
		handlers = append(handlers, it.Lease.Handler)
		eventIDs = append(eventIDs, it.Lease.EventID)
		tokens = append(tokens, pgtype.UUID{Bytes: tok, Valid: true})
		outcomeOf = append(outcomeOf, code)
	}
	done := make([]bool, len(handlers))
	var idx int64 // scanned into for every row: one variable, not one per row
	err = r.run(ctx, "mark done", func(ctx context.Context) error {
		clear(done)
		return r.probeQuery(ctx, markDoneSQL, []any{handlers, eventIDs, tokens, outcomes, outcomeOf}, func(rows pgx.Rows) error {
			if err := rows.Scan(&idx); err != nil {
				return err
			}
			if idx < 1 || int(idx) > len(done) {
				return fmt.Errorf("mark done result index %d out of range", idx)
			}
			done[idx-1] = true
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	errs = make([]error, len(items))
	for i, it := range items {
		if !done[slot[i]] {
			errs[i] = &LeaseLostError{Op: "mark done", Handler: it.Lease.Handler, EventID: it.Lease.EventID}
		}
	}
	return errs, nil
}

// markFailedSQL records a failed attempt under the current lease. A
// non-retryable failure, or a retryable one at the last attempt, makes the
// row dead and finishes its slot (the aggregate version advances); otherwise
// the row is failed until next_attempt_at = now() + min(cap, base·2^(n−1))
// · U[0.5, 1), all on the database clock. A repeat with the same lease after
// a lost reply reports the recorded state without changing it.
const markFailedSQL = `WITH locked AS MATERIALIZED (
    SELECT pe.handler, pe.event_id,
           (NOT $5::boolean OR pe.attempt_count >= $6::integer) AS dead
    FROM sluice.processed_events pe
    WHERE pe.handler = $1 AND pe.event_id = $2 AND pe.lease_token = $3::text::uuid
      AND pe.status = 'processing'
    FOR UPDATE
),
upd AS (
    UPDATE sluice.processed_events pe
    SET status = CASE WHEN l.dead THEN 'dead' ELSE 'failed' END,
        last_error = $4,
        first_failed_at = COALESCE(pe.first_failed_at, now()),
        heartbeat_at = now(),
        processed_at = CASE WHEN l.dead THEN now() END,
        next_attempt_at = CASE WHEN l.dead THEN NULL ELSE now() +
            least($8::float8, $7::float8 * power(2::float8, least(pe.attempt_count - 1, 60)))
            * (0.5 + random() * 0.5) * interval '1 microsecond' END
    FROM locked l
    WHERE pe.handler = l.handler AND pe.event_id = l.event_id
    RETURNING pe.handler, pe.aggregate_id, pe.sequence_number, pe.status, pe.attempt_count,
              pe.next_attempt_at, pe.first_failed_at
),
advanced AS (
    INSERT INTO sluice.aggregate_versions AS av (handler, aggregate_id, last_sequence, updated_at)
    SELECT u.handler, u.aggregate_id, u.sequence_number, now() FROM upd u WHERE u.status = 'dead'
    ON CONFLICT (handler, aggregate_id) DO UPDATE
    SET last_sequence = EXCLUDED.last_sequence, updated_at = EXCLUDED.updated_at
    WHERE av.last_sequence < EXCLUDED.last_sequence
    RETURNING av.handler
)
SELECT status, attempt_count, next_attempt_at, first_failed_at,
       (extract(epoch FROM next_attempt_at - now()) * 1000000)::bigint
FROM upd
UNION ALL
SELECT status, attempt_count, next_attempt_at, first_failed_at,
       (extract(epoch FROM next_attempt_at - now()) * 1000000)::bigint
FROM sluice.processed_events
WHERE handler = $1 AND event_id = $2 AND lease_token = $3::text::uuid AND status IN ('failed', 'dead')`

// MarkFailed records a failed attempt of the current lease (docs/worker-runtime.md#errors): a
// retryable failure backs off (next_attempt_at, database clock) until the
// handler's max attempts (f.MaxAttempts, else Config.MaxAttempts); a
// non-retryable failure or the last attempt makes the row dead, which
// finishes its slot — send the record to the DLQ, then commit. A dead row is
// not run again by redelivery (Claim gives DEAD); only Redrive resets it.
// Returns *LeaseLostError if the lease is no longer current.
func (r *Registry) MarkFailed(ctx context.Context, lease claim.Lease, f claim.Failure) (claim.FailResult, error) {
	if err := validateLease(0, lease); err != nil {
		return claim.FailResult{}, err
	}
	maxAttempts := r.cfg.MaxAttempts
	if f.MaxAttempts > 0 {
		maxAttempts = f.MaxAttempts
	}
	msg := "unknown error"
	if f.Err != nil {
		msg = cleanText(f.Err.Error())
	}
	var res claim.FailResult
	found := false
	err := r.run(ctx, "mark failed", func(ctx context.Context) error {
		var (
			status       string
			next, first  pgtype.Timestamptz
			retryUS      pgtype.Int8
			attemptCount int32
		)
		err := r.pool.QueryRow(ctx, markFailedSQL, lease.Handler, lease.EventID, lease.Token, msg,
			f.Retryable, maxAttempts, float64(r.cfg.BackoffBase.Microseconds()), float64(r.cfg.BackoffCap.Microseconds())).
			Scan(&status, &attemptCount, &next, &first, &retryUS)
		if errors.Is(err, pgx.ErrNoRows) {
			found = false
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		res = claim.FailResult{Status: claim.Status(status), Attempt: int(attemptCount)}
		if next.Valid {
			res.NotBefore = next.Time
		}
		if first.Valid {
			res.FirstFailedAt = first.Time
		}
		if retryUS.Valid {
			res.RetryIn = time.Duration(max(retryUS.Int64, 0)) * time.Microsecond
		}
		return nil
	})
	if err != nil {
		return claim.FailResult{}, err
	}
	if !found {
		return claim.FailResult{}, &LeaseLostError{Op: "mark failed", Handler: lease.Handler, EventID: lease.EventID}
	}
	return res, nil
}

// Release gives a claim back without counting it as an attempt (SIGTERM:
// "finish or release in-flight claims", docs/worker-runtime.md#shutdown-sigterm): the row becomes failed and
// due at once, so any owner may claim it again with the same attempt number.
// Returns *LeaseLostError if the lease is no longer current.
func (r *Registry) Release(ctx context.Context, lease claim.Lease) error {
	if err := validateLease(0, lease); err != nil {
		return err
	}
	var n int64
	err := r.run(ctx, "release", func(ctx context.Context) error {
		tag, err := r.pool.Exec(ctx, `UPDATE sluice.processed_events
			SET status = 'failed', next_attempt_at = now(), heartbeat_at = now(),
			    attempt_count = greatest(attempt_count - 1, 0)
			WHERE handler = $1 AND event_id = $2 AND lease_token = $3::text::uuid AND status = 'processing'`,
			lease.Handler, lease.EventID, lease.Token)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return err
	}
	if n == 0 {
		return &LeaseLostError{Op: "release", Handler: lease.Handler, EventID: lease.EventID}
	}
	return nil
}

// Redrive resets a dead row for an operator redrive (docs/operator-commands.md#sluice-dlq,
// `sluice dlq redrive`): it becomes failed and due at once with its attempt
// count reset, so the next delivery claims it (attempt 1) regardless of the
// sequence guard — the slot it finished stays finished, so later events are
// not blocked, and the worker's own conditional or versioned writes decide
// whether the late side effect still applies. last_error is kept. Returns
// ErrNotFound or ErrNotDead (wrapped) when there is nothing to redrive.
func (r *Registry) Redrive(ctx context.Context, handler, eventID string) error {
	if err := validateKey(0, handler, eventID); err != nil {
		return err
	}
	var status pgtype.Text
	var redriven bool
	err := r.run(ctx, "redrive", func(ctx context.Context) error {
		return r.pool.QueryRow(ctx, `WITH upd AS (
				UPDATE sluice.processed_events
				SET status = 'failed', attempt_count = 0, next_attempt_at = now(), processed_at = NULL,
				    lease_token = NULL, owner_instance = NULL
				WHERE handler = $1 AND event_id = $2 AND status = 'dead'
				RETURNING 1)
			SELECT (SELECT status FROM sluice.processed_events WHERE handler = $1 AND event_id = $2),
			       EXISTS (SELECT 1 FROM upd)`, handler, eventID).Scan(&status, &redriven)
	})
	switch {
	case err != nil:
		return err
	case redriven:
		return nil
	case !status.Valid:
		return fmt.Errorf("registry: redrive handler %q event %q: %w", handler, eventID, ErrNotFound)
	default:
		return fmt.Errorf("registry: redrive handler %q event %q: status is %s: %w", handler, eventID, status.String, ErrNotDead)
	}
}

// heartbeatSQL extends many leases in one statement; only rows still
// processing under the given token are touched. Input sorted as for
// markDoneSQL.
const heartbeatSQL = `UPDATE sluice.processed_events pe
SET heartbeat_at = now()
FROM unnest($1::text[], $2::text[], $3::text[]) AS i(handler, event_id, token)
WHERE pe.handler = i.handler AND pe.event_id = i.event_id AND pe.lease_token = i.token::uuid
  AND pe.status = 'processing'
RETURNING pe.handler, pe.event_id, pe.lease_token::text`

// Heartbeat extends the lease (heartbeat_at = the database's now). It
// returns *LeaseLostError when the lease was taken or the row is no longer
// processing: stop processing at once. A lease past its timeout that nobody
// reclaimed yet is still extended. Hold calls this for you.
func (r *Registry) Heartbeat(ctx context.Context, lease claim.Lease) error {
	errs, err := r.HeartbeatBatch(ctx, []claim.Lease{lease})
	if err != nil {
		return err
	}
	return errs[0]
}

// HeartbeatBatch is Heartbeat for many leases in one round trip; errs[i] is
// nil or a *LeaseLostError for leases[i].
func (r *Registry) HeartbeatBatch(ctx context.Context, leases []claim.Lease) (errs []error, err error) {
	if len(leases) == 0 {
		return nil, nil
	}
	handlers := make(pgarray.Text, len(leases))
	eventIDs := make(pgarray.Text, len(leases))
	tokens := make(pgarray.Text, len(leases))
	for i, l := range leases {
		if err := validateLease(i, l); err != nil {
			return nil, err
		}
	}
	for j, i := range lockOrder(len(leases), func(i int) claim.Lease { return leases[i] }) {
		handlers[j], eventIDs[j], tokens[j] = leases[i].Handler, leases[i].EventID, leases[i].Token
	}
	return r.fencedUpdate(ctx, "heartbeat", heartbeatSQL, leases, handlers, eventIDs, tokens)
}

// AdvanceTo finishes the slots of an aggregate up to seq without claiming
// them: the aggregate's last finished sequence becomes max(last, seq). It is
// the healing step of WaitForPredecessor (docs/registry.md#sequence-guard-policies-per-handler) for slots that hold no
// event to process (an abandoned or empty slot of the event store); slots
// that hold a command are healed by claiming and processing that command.
// The caller asserts every slot ≤ seq is finished. It takes the same
// advisory lock as Claim and returns the resulting last finished sequence.
func (r *Registry) AdvanceTo(ctx context.Context, handler, aggregateID string, seq int64) (int64, error) {
	if err := validateKey(0, handler, "-"); err != nil {
		return 0, err
	}
	agg, err := envelope.NormalizeAggregateID(aggregateID)
	if err != nil {
		return 0, &claim.RequestError{Field: "aggregate_id", Reason: err.Error(), Err: err}
	}
	if seq < 1 {
		return 0, &claim.RequestError{Field: "seq", Reason: fmt.Sprintf("sequence %d must be at least 1", seq)}
	}
	var last int64
	err = r.run(ctx, "advance", func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(sluice.registry_lock_key($1, $2))`, handler, agg); err != nil {
				return err
			}
			return tx.QueryRow(ctx, `INSERT INTO sluice.aggregate_versions AS av (handler, aggregate_id, last_sequence, updated_at)
				VALUES ($1, $2, $3, now())
				ON CONFLICT (handler, aggregate_id) DO UPDATE
				SET last_sequence = greatest(av.last_sequence, EXCLUDED.last_sequence),
				    updated_at = CASE WHEN av.last_sequence < EXCLUDED.last_sequence THEN now() ELSE av.updated_at END
				RETURNING last_sequence`, handler, agg, seq).Scan(&last)
		})
	})
	return last, err
}

// LastSequence returns the aggregate's last finished sequence for handler
// (0 when none).
func (r *Registry) LastSequence(ctx context.Context, handler, aggregateID string) (int64, error) {
	if err := validateKey(0, handler, "-"); err != nil {
		return 0, err
	}
	agg, err := envelope.NormalizeAggregateID(aggregateID)
	if err != nil {
		return 0, &claim.RequestError{Field: "aggregate_id", Reason: err.Error(), Err: err}
	}
	var last int64
	err = r.run(ctx, "last sequence", func(ctx context.Context) error {
		err := r.pool.QueryRow(ctx, `SELECT last_sequence FROM sluice.aggregate_versions WHERE handler = $1 AND aggregate_id = $2`, handler, agg).Scan(&last)
		if errors.Is(err, pgx.ErrNoRows) {
			last = 0
			return nil
		}
		return err
	})
	return last, err
}

// lockOrder returns the indexes 0..n-1 sorted by (handler, event_id) in byte
// order — the order of the "C" collation in which claims lock rows.
func lockOrder(n int, lease func(int) claim.Lease) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int {
		la, lb := lease(a), lease(b)
		if c := strings.Compare(la.Handler, lb.Handler); c != 0 {
			return c
		}
		return strings.Compare(la.EventID, lb.EventID)
	})
	return idx
}

// probeQuery runs sql, a batch statement that joins its input with
// processed_events or aggregate_versions by their primary keys (mark done,
// heartbeat), with enable_seqscan off, and calls each for every row. One
// request: set_config(…, is_local) and the statement are pipelined before a
// single Sync, so they share the implicit transaction that the Sync ends; a
// failed statement rolls it back there and the connection returns to the
// pool idle (an explicit BEGIN would leave it aborted, and the pool would
// close it).
//
// Postgres switches a prepared statement to a generic plan after five
// executions when that plan does not look costlier. A worker's first
// executions happen while a new deployment's tables are empty; a plan made
// then joins the batch with a sequential scan, and a generic plan is kept
// until an ANALYZE invalidates it, so it scanned the tables whole at every
// batch as they grew (≈ 18 s of Postgres CPU in a 20 s pipeline run before
// the setting). With sequential scans off the only plans left probe the
// primary key per input row, right at any table size; planning the
// statement at every call (an unnamed statement) would also see the
// growth, but costs ≈ 0.3 ms per batch. The setting never invalidates a
// cached plan, so these statement texts must run only through here. The
// claim function carries the same setting (migrations/
// 00014_registry.sql).
func (r *Registry) probeQuery(ctx context.Context, sql string, args []any, each func(pgx.Rows) error) error {
	b := &pgx.Batch{}
	b.Queue(sqlNoSeqScan)
	b.Queue(sql, args...)
	br := r.pool.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return err
	}
	rows, err := br.Query()
	if err != nil {
		return err
	}
	for rows.Next() {
		if err := each(rows); err != nil {
			rows.Close()
			return err
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	return br.Close()
}

// sqlNoSeqScan turns sequential scans off until the end of the transaction.
const sqlNoSeqScan = `SELECT set_config('enable_seqscan', 'off', true)`

// fencedUpdate runs a lease-fenced statement over many leases in one round
// trip. The statement returns (handler, event_id, lease_token) of every row
// it updated; leases it did not return have been lost. errs[i] is nil or a
// *LeaseLostError for leases[i]; err is set when the call as a whole failed.
func (r *Registry) fencedUpdate(ctx context.Context, op, sql string, leases []claim.Lease, args ...any) (errs []error, err error) {
	type key struct{ handler, eventID, token string }
	ok := make(map[key]bool, len(leases))
	err = r.run(ctx, op, func(ctx context.Context) error {
		clear(ok)
		return r.probeQuery(ctx, sql, args, func(rows pgx.Rows) error {
			var k key
			if err := rows.Scan(&k.handler, &k.eventID, &k.token); err != nil {
				return err
			}
			ok[k] = true
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	errs = make([]error, len(leases))
	for i, l := range leases {
		if !ok[key{l.Handler, l.EventID, strings.ToLower(l.Token)}] {
			errs[i] = &LeaseLostError{Op: op, Handler: l.Handler, EventID: l.EventID}
		}
	}
	return errs, nil
}
