-- +goose NO TRANSACTION
-- +goose Up
-- Faster claims for the processed-event registry (issue #5, SPEC §7, §13).
-- docs/registry.md ("Where the time goes") has the measurements behind it.
--
-- This migration runs outside a transaction because it builds an index
-- CONCURRENTLY (workers keep claiming while it runs). Every step is
-- idempotent, so a run interrupted half-way is completed by the next
-- `sluice migrate up`.
--
-- One index instead of two on processed_events. The primary key becomes
-- (event_id, handler): it serves lookups by (handler, event_id) (claims,
-- fencing) exactly as well as (handler, event_id) did, and lookups by
-- event_id alone (command status, Registry.Get) as its leading column, so
-- the separate index on event_id goes. Every claim then writes one index
-- entry instead of two: about a fifth of the server CPU of a claim, and less
-- WAL. ON CONFLICT (handler, event_id) infers the new key (column order does
-- not matter for inference); row locks are still taken in (handler,
-- event_id) order by the statements, which keeps batches deadlock-free.
-- The index is built CONCURRENTLY and named like its constraint, so a re-run
-- finds it (IF NOT EXISTS) instead of building it again.
--
-- A failed concurrent build leaves an invalid index behind: drop it first.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_index i
               WHERE i.indexrelid = to_regclass('sluice.processed_events_event_handler_pkey')
                 AND NOT i.indisvalid) THEN
        DROP INDEX sluice.processed_events_event_handler_pkey;
    END IF;
END
$$;
-- +goose StatementEnd

CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS processed_events_event_handler_pkey
    ON sluice.processed_events (event_id, handler);

-- The swap itself takes a brief exclusive lock (no scan: the columns are
-- NOT NULL and the index is built).
-- +goose StatementBegin
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                   WHERE conrelid = 'sluice.processed_events'::regclass
                     AND conname = 'processed_events_event_handler_pkey') THEN
        ALTER TABLE sluice.processed_events
            DROP CONSTRAINT processed_events_pkey,
            ADD CONSTRAINT processed_events_event_handler_pkey
                PRIMARY KEY USING INDEX processed_events_event_handler_pkey;
    END IF;
END
$$;
-- +goose StatementEnd

DROP INDEX CONCURRENTLY IF EXISTS sluice.processed_events_event_id_idx;

-- sluice.registry_claim_batch has the semantics of sluice.registry_claim
-- (migration 00003), which stays for binaries of the previous release, with
-- two differences in how it works:
--
--   * Lease tokens come from the caller (p_token, one fresh random UUID per
--     input; used only if that input is claimed). gen_random_uuid() cost
--     more server CPU per claim than the whole sequence check.
--   * A fast path for the common case, a batch of first deliveries: the
--     rows are created with one plain INSERT under a savepoint (the EXCEPTION
--     block), without the per-row lookup of an existing row and without the
--     speculative insertion of ON CONFLICT; the primary key still checks
--     every row. If any input already has a row (unique violation, or a
--     WAIT input with a row), the savepoint is rolled back and the batch is
--     evaluated by the general path, the statement of registry_claim, with
--     a new snapshot. Either way the result is the one of the general path:
--     with no row for any input, the general path's decision for each input
--     depends on the aggregate version only, which is what the fast path
--     decides, under the same advisory locks and the same clock reading.
--
-- Results are those of registry_claim minus lease_token (the caller knows
-- the token it sent), with idx an integer.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sluice.registry_claim_batch(
    p_handler      text[],
    p_event_id     text[],
    p_aggregate_id text[],
    p_seq          bigint[],
    p_wait         boolean[],
    p_token        uuid[],
    p_owner        text,
    p_instance     uuid,
    p_lease_us     bigint)
RETURNS TABLE (
    idx              integer,
    kind             text,
    attempt          integer,
    holder           text,
    last_sequence    bigint,
    not_before       timestamptz,
    wait_us          bigint,
    stalled_us       bigint,
    outcome          jsonb,
    last_error       text)
LANGUAGE plpgsql VOLATILE
-- The fast path is planned once per session for arrays of unknown length
-- (index lookups per input, no join between CTEs): a custom plan per call
-- costs more than it saves. The general path overrides this (below).
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
DECLARE
    v_n       integer := cardinality(p_event_id);
    v_lease   interval := p_lease_us * interval '1 microsecond';
    v_now     timestamptz;
    v_has_row boolean;
    v_kind    text[];
    v_last    bigint[];
    v_stalled bigint[];
BEGIN
    IF v_n IS NULL OR v_n = 0 THEN
        RETURN;
    END IF;
    IF cardinality(p_handler) <> v_n OR cardinality(p_aggregate_id) <> v_n
       OR cardinality(p_seq) <> v_n OR cardinality(p_wait) <> v_n
       OR cardinality(p_token) <> v_n OR array_position(p_token, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'registry_claim_batch: input arrays differ in length or a token is null'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    PERFORM pg_advisory_xact_lock(k.key)
    FROM (SELECT DISTINCT sluice.registry_lock_key(u.h, u.a) AS key
          FROM unnest(p_handler, p_aggregate_id) AS u(h, a)
          ORDER BY 1) AS k;
    -- The clock is read after the locks are held: a wait for a lock must not
    -- make a new lease look older than it is.
    v_now := clock_timestamp();

    -- Fast path: no input has a row yet.
    BEGIN
        WITH input AS (
            SELECT u.handler, u.event_id, u.aggregate_id, u.seq, u.wait, u.token, u.idx
            FROM unnest(p_handler, p_event_id, p_aggregate_id, p_seq, p_wait, p_token)
                 WITH ORDINALITY AS u(handler, event_id, aggregate_id, seq, wait, token, idx)
        ),
        decided AS MATERIALIZED (
            SELECT i.idx, i.handler, i.event_id, i.aggregate_id, i.seq, i.token,
                   v.last_sequence IS NULL AS no_version,
                   COALESCE(v.last_sequence, 0) AS last_seq,
                   COALESCE(v_now - v.updated_at, interval '0') AS stalled,
                   CASE
                       WHEN i.seq <= COALESCE(v.last_sequence, 0) THEN 'STALE'
                       WHEN i.wait AND i.seq <> COALESCE(v.last_sequence, 0) + 1 THEN 'WAIT'
                       ELSE 'CLAIMED'
                   END AS decision
            FROM input i
            LEFT JOIN sluice.aggregate_versions v
                   ON v.handler = i.handler AND v.aggregate_id = i.aggregate_id
        ),
        ins AS (
            INSERT INTO sluice.processed_events
                (handler, event_id, aggregate_id, sequence_number, status, owner,
                 owner_instance, lease_token, started_at, heartbeat_at, processed_at,
                 attempt_count, outcome)
            SELECT d.handler, d.event_id, d.aggregate_id, d.seq,
                   CASE WHEN d.decision = 'CLAIMED' THEN 'processing' ELSE 'skipped_stale' END,
                   p_owner,
                   p_instance,
                   CASE WHEN d.decision = 'CLAIMED' THEN d.token END,
                   v_now,
                   v_now,
                   CASE WHEN d.decision = 'STALE' THEN v_now END,
                   CASE WHEN d.decision = 'CLAIMED' THEN 1 ELSE 0 END,
                   CASE WHEN d.decision = 'STALE' THEN '{"result":"stale"}'::jsonb END
            FROM decided d
            WHERE d.decision <> 'WAIT'
            ORDER BY d.handler, d.event_id
        ),
        waitver AS (
            INSERT INTO sluice.aggregate_versions AS av (handler, aggregate_id, last_sequence, updated_at)
            SELECT DISTINCT d.handler, d.aggregate_id, 0::bigint, v_now
            FROM decided d
            WHERE d.decision = 'WAIT' AND d.no_version
            ORDER BY 1, 2
            ON CONFLICT (handler, aggregate_id) DO NOTHING
        )
        SELECT COALESCE(bool_or(d.decision = 'WAIT' AND EXISTS (
                   SELECT 1 FROM sluice.processed_events pe
                   WHERE pe.handler = d.handler AND pe.event_id = d.event_id)), false),
               array_agg(d.decision ORDER BY d.idx),
               array_agg(d.last_seq ORDER BY d.idx),
               array_agg(CASE WHEN d.decision = 'WAIT'
                              THEN (extract(epoch FROM d.stalled) * 1000000)::bigint END
                         ORDER BY d.idx)
        INTO v_has_row, v_kind, v_last, v_stalled
        FROM decided d;
        IF v_has_row THEN
            -- A WAIT input has a row, which takes precedence over the guard:
            -- undo the fast path and take the general one.
            RAISE EXCEPTION USING ERRCODE = 'unique_violation';
        END IF;
        RETURN QUERY
        SELECT r.idx::integer,
               r.kind,
               CASE WHEN r.kind = 'CLAIMED' THEN 1 WHEN r.kind = 'STALE' THEN 0 END,
               NULL::text,
               r.last_seq,
               NULL::timestamptz,
               NULL::bigint,
               r.stalled,
               CASE WHEN r.kind = 'STALE' THEN '{"result":"stale"}'::jsonb END,
               NULL::text
        FROM unnest(v_kind, v_last, v_stalled) WITH ORDINALITY AS r(kind, last_seq, stalled, idx);
        RETURN;
    EXCEPTION WHEN unique_violation THEN
        NULL; -- some input has a row: the general path
    END;

    -- General path: the statement of registry_claim (00003), with the
    -- caller's tokens. A new statement, so a new snapshot, which sees the
    -- rows whose conflict sent us here. It joins CTEs with each other: a
    -- generic plan assumes 10 inputs and joins them by nested loops,
    -- quadratic in the batch (a redelivered batch of 1000 done events cost
    -- 0.2 s), so a large batch is planned for its actual length (hash
    -- joins). A small one keeps the cached generic plan: planning this
    -- statement costs more than the nested loops over a few rows. The
    -- setting ends with the function (its SET clause).
    IF v_n > 100 THEN
        PERFORM set_config('plan_cache_mode', 'force_custom_plan', true);
    END IF;
    RETURN QUERY
    WITH input AS (
        SELECT u.handler, u.event_id, u.aggregate_id, u.seq, u.wait, u.token, u.idx
        FROM unnest(p_handler, p_event_id, p_aggregate_id, p_seq, p_wait, p_token)
             WITH ORDINALITY AS u(handler, event_id, aggregate_id, seq, wait, token, idx)
    ),
    cur AS MATERIALIZED (
        SELECT pe.handler, pe.event_id, pe.status, pe.owner, pe.owner_instance,
               pe.attempt_count, pe.heartbeat_at, pe.next_attempt_at, pe.outcome,
               pe.last_error
        FROM sluice.processed_events pe
        JOIN input i ON pe.handler = i.handler AND pe.event_id = i.event_id
        ORDER BY pe.handler, pe.event_id
        FOR UPDATE OF pe
    ),
    decided AS MATERIALIZED (
        SELECT i.idx, i.handler, i.event_id, i.aggregate_id, i.seq, i.token,
               c.owner, c.attempt_count, c.heartbeat_at, c.next_attempt_at,
               c.outcome, c.last_error,
               v.last_sequence IS NULL AS no_version,
               COALESCE(v.last_sequence, 0) AS last_seq,
               COALESCE(v_now - v.updated_at, interval '0') AS stalled,
               CASE
                   WHEN c.status = 'done' THEN 'DUPLICATE_DONE'
                   WHEN c.status = 'skipped_stale' THEN 'STALE'
                   WHEN c.status = 'dead' THEN 'DEAD'
                   WHEN c.status = 'processing'
                        AND c.heartbeat_at >= v_now - v_lease
                        AND NOT (c.owner = p_owner AND c.owner_instance IS DISTINCT FROM p_instance)
                        THEN 'IN_PROGRESS'
                   WHEN c.status = 'processing' THEN 'RECLAIM'
                   WHEN c.status = 'failed' AND c.next_attempt_at > v_now THEN 'RETRY_LATER'
                   WHEN c.status = 'failed' THEN 'RECLAIM'
                   WHEN i.seq <= COALESCE(v.last_sequence, 0) THEN 'STALE_NEW'
                   WHEN i.wait AND i.seq <> COALESCE(v.last_sequence, 0) + 1 THEN 'WAIT'
                   ELSE 'CLAIM_NEW'
               END AS decision
        FROM input i
        LEFT JOIN cur c ON c.handler = i.handler AND c.event_id = i.event_id
        LEFT JOIN sluice.aggregate_versions v
               ON v.handler = i.handler AND v.aggregate_id = i.aggregate_id
    ),
    ins AS (
        INSERT INTO sluice.processed_events AS pe
            (handler, event_id, aggregate_id, sequence_number, status, owner,
             owner_instance, lease_token, started_at, heartbeat_at, processed_at,
             attempt_count, outcome)
        SELECT d.handler, d.event_id, d.aggregate_id, d.seq,
               CASE WHEN d.decision = 'CLAIM_NEW' THEN 'processing' ELSE 'skipped_stale' END,
               p_owner,
               p_instance,
               CASE WHEN d.decision = 'CLAIM_NEW' THEN d.token END,
               v_now,
               v_now,
               CASE WHEN d.decision = 'STALE_NEW' THEN v_now END,
               CASE WHEN d.decision = 'CLAIM_NEW' THEN 1 ELSE 0 END,
               CASE WHEN d.decision = 'STALE_NEW' THEN '{"result":"stale"}'::jsonb END
        FROM decided d
        WHERE d.decision IN ('CLAIM_NEW', 'STALE_NEW')
        ORDER BY d.handler, d.event_id
        ON CONFLICT (handler, event_id) DO NOTHING
        RETURNING pe.handler, pe.event_id, pe.attempt_count
    ),
    upd AS (
        UPDATE sluice.processed_events pe
        SET status = 'processing',
            owner = p_owner,
            owner_instance = p_instance,
            lease_token = d.token,
            started_at = v_now,
            heartbeat_at = v_now,
            next_attempt_at = NULL,
            attempt_count = pe.attempt_count + 1
        FROM decided d
        WHERE d.decision = 'RECLAIM' AND pe.handler = d.handler AND pe.event_id = d.event_id
        RETURNING pe.handler, pe.event_id, pe.attempt_count
    ),
    waitver AS (
        INSERT INTO sluice.aggregate_versions AS av (handler, aggregate_id, last_sequence, updated_at)
        SELECT DISTINCT d.handler, d.aggregate_id, 0::bigint, v_now
        FROM decided d
        WHERE d.decision = 'WAIT' AND d.no_version
        ORDER BY 1, 2
        ON CONFLICT (handler, aggregate_id) DO NOTHING
        RETURNING av.handler
    )
    SELECT d.idx::integer,
           CASE
               WHEN d.decision = 'CLAIM_NEW' AND ins.attempt_count IS NOT NULL THEN 'CLAIMED'
               WHEN d.decision = 'CLAIM_NEW' THEN 'IN_PROGRESS' -- lost an insert race
               WHEN d.decision = 'STALE_NEW' THEN 'STALE'
               WHEN d.decision = 'RECLAIM' THEN 'CLAIMED'
               ELSE d.decision
           END,
           COALESCE(upd.attempt_count, ins.attempt_count, d.attempt_count),
           d.owner,
           d.last_seq,
           CASE
               WHEN d.decision = 'IN_PROGRESS' THEN d.heartbeat_at + v_lease
               WHEN d.decision = 'RETRY_LATER' THEN d.next_attempt_at
           END,
           (extract(epoch FROM CASE
               WHEN d.decision = 'IN_PROGRESS' THEN d.heartbeat_at + v_lease - v_now
               WHEN d.decision = 'RETRY_LATER' THEN d.next_attempt_at - v_now
           END) * 1000000)::bigint,
           (extract(epoch FROM CASE WHEN d.decision = 'WAIT' THEN d.stalled END) * 1000000)::bigint,
           CASE WHEN d.decision = 'STALE_NEW' THEN '{"result":"stale"}'::jsonb ELSE d.outcome END,
           d.last_error
    FROM decided d
    LEFT JOIN ins ON ins.handler = d.handler AND ins.event_id = d.event_id
    LEFT JOIN upd ON upd.handler = d.handler AND upd.event_id = d.event_id
    ORDER BY d.idx;
END
$fn$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION IF EXISTS sluice.registry_claim_batch(text[], text[], text[], bigint[], boolean[], uuid[], text, uuid, bigint);
CREATE INDEX CONCURRENTLY IF NOT EXISTS processed_events_event_id_idx ON sluice.processed_events (event_id);
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS processed_events_pkey ON sluice.processed_events (handler, event_id);
-- +goose StatementBegin
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                   WHERE conrelid = 'sluice.processed_events'::regclass
                     AND conname = 'processed_events_pkey') THEN
        ALTER TABLE sluice.processed_events
            DROP CONSTRAINT processed_events_event_handler_pkey,
            ADD CONSTRAINT processed_events_pkey PRIMARY KEY USING INDEX processed_events_pkey;
    END IF;
END
$$;
-- +goose StatementEnd
