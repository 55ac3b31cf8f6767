-- +goose Up
-- The processed-event registry (docs/registry.md): the gate every worker
-- passes before a side effect. Baseline: see 00012_schema.sql.

-- One row per (handler, event_id): the unique key is the claim gate
-- (docs/architecture.md#at-most-one-side-effect, per handler).
-- Identifiers use the "C" collation: they are compared for equality only,
-- byte for byte, whatever the database locale, and "C" makes every index
-- comparison a memcmp instead of a locale-aware strcoll.
--
-- The primary key is (event_id, handler): it serves lookups by (handler,
-- event_id) (claims, fencing) and by event_id alone (command status,
-- Registry.Get) with one index, so a claim writes one index entry. ON
-- CONFLICT (handler, event_id) infers it (column order does not matter for
-- inference); statements still lock rows in (handler, event_id) order,
-- which keeps batches deadlock-free.
CREATE TABLE IF NOT EXISTS sluice.processed_events (
    handler          text COLLATE "C" NOT NULL,
    event_id         text COLLATE "C" NOT NULL,
    aggregate_id     text COLLATE "C" NOT NULL,
    sequence_number  bigint      NOT NULL,
    status           text        NOT NULL,
    -- owner is the stable worker identity (PROCESSED_EVENT_OWNER);
    -- owner_instance identifies one running Registry of that owner, so a
    -- restarted owner (new instance) reclaims its rows at once while
    -- concurrent goroutines of one process never steal each other's claims.
    owner            text        NOT NULL,
    owner_instance   uuid,
    lease_token      uuid,
    started_at       timestamptz NOT NULL,
    heartbeat_at     timestamptz,
    processed_at     timestamptz,
    attempt_count    integer     NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz,
    first_failed_at  timestamptz,
    last_error       text,
    outcome          jsonb,
    CONSTRAINT processed_events_event_handler_pkey PRIMARY KEY (event_id, handler),
    CONSTRAINT processed_events_status_check
        CHECK (status IN ('processing', 'done', 'failed', 'dead', 'skipped_stale')),
    CONSTRAINT processed_events_sequence_check CHECK (sequence_number >= 1),
    CONSTRAINT processed_events_attempt_check CHECK (attempt_count >= 0),
    CONSTRAINT processed_events_lease_check
        CHECK (status <> 'processing' OR (lease_token IS NOT NULL AND heartbeat_at IS NOT NULL)),
    CONSTRAINT processed_events_finished_check
        CHECK (status NOT IN ('done', 'skipped_stale', 'dead') OR processed_at IS NOT NULL),
    CONSTRAINT processed_events_retry_check
        CHECK (status <> 'failed' OR next_attempt_at IS NOT NULL)
);
COMMENT ON TABLE sluice.processed_events IS
    'Processed-event registry: one row per handler and event_id; claim with lease and heartbeat';

-- Retention (Registry.Prune) finds old finished rows through started_at
-- (a finished row's processed_at is never earlier). Rows are appended in
-- claim order, so a BRIN index on started_at is tiny and almost free to
-- maintain. started_at does not change when a row is marked done or
-- heartbeated, and no index covers a column those updates change, so with
-- the fillfactor below they are HOT updates that write no index entry.
CREATE INDEX IF NOT EXISTS processed_events_started_at_idx ON sluice.processed_events USING brin (started_at);
ALTER TABLE sluice.processed_events SET (fillfactor = 50);

-- Per (handler, aggregate) the highest finished sequence: the sequence guard
-- (docs/registry.md#sequence-guard-policies-per-handler). Never pruned: it
-- is what keeps a replayed, pruned event STALE.
CREATE TABLE IF NOT EXISTS sluice.aggregate_versions (
    handler        text COLLATE "C" NOT NULL,
    aggregate_id   text COLLATE "C" NOT NULL,
    last_sequence  bigint      NOT NULL DEFAULT 0,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT aggregate_versions_pkey PRIMARY KEY (handler, aggregate_id),
    CONSTRAINT aggregate_versions_sequence_check CHECK (last_sequence >= 0)
) WITH (fillfactor = 80);
COMMENT ON TABLE sluice.aggregate_versions IS
    'Sequence guard: highest finished sequence per handler and aggregate';

-- The advisory-lock key serialising the sequence check of one
-- (handler, aggregate). The length prefix makes the encoding unambiguous; a
-- hash collision only serialises two aggregates, it never merges their rows.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sluice.registry_lock_key(p_handler text, p_aggregate_id text)
RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT hashtextextended(length(p_handler)::text || ':' || p_handler || p_aggregate_id, 5318008)
$$;
-- +goose StatementEnd

-- The pre-release chain's first claim function; registry_claim_batch below
-- replaced it.
DROP FUNCTION IF EXISTS sluice.registry_claim(text[], text[], text[], bigint[], boolean[], text, uuid, bigint);

-- registry_claim_batch evaluates many claims in one statement and one
-- transaction (Registry.Claim and Registry.ClaimBatch). The inputs are
-- parallel arrays, one element per claim, unique by (handler, event_id);
-- p_token holds one fresh lease token per input (used only if that input is
-- claimed: gen_random_uuid() cost more server CPU per claim than the whole
-- sequence check). The result has one row per input, idx its 1-based
-- position. Semantics are those of claiming the inputs one after another in
-- array order (docs/registry.md#claim-results).
--
-- p_wait is the input's sequence-guard policy: true wait-for-predecessor,
-- false skip-stale, NULL none (never STALE or WAIT because of the
-- aggregate's last sequence; the row's status still decides duplicates,
-- leases and retries). The function's comment carries the marker
-- 'policy:none' that Registry.Check looks for.
--
-- Decision per input, under the advisory locks of every (handler, aggregate)
-- of the batch, taken in key order so concurrent batches cannot deadlock:
--   row done            -> DUPLICATE_DONE
--   row skipped_stale   -> STALE
--   row dead            -> DEAD
--   row processing, lease alive and not a restart of its owner -> IN_PROGRESS
--   row processing, lease expired, or held by an earlier instance of this
--     owner               -> CLAIMED (attempt + 1, the input's token)
--   row failed, next_attempt_at in the future -> RETRY_LATER
--   row failed, due       -> CLAIMED (attempt + 1, the input's token)
--   no row: guarded and seq <= last -> STALE (row recorded as skipped_stale)
--   no row: wait policy and seq <> last + 1 -> WAIT (nothing recorded but
--     a version row at 0, so the stall can be timed on the database clock)
--   no row: otherwise     -> CLAIMED (attempt 1)
-- Every time is the database clock.
--
-- A fast path serves the common batch, first deliveries: the rows are
-- created with one plain INSERT under a savepoint (the EXCEPTION block),
-- without the per-row lookup of an existing row and without the speculative
-- insertion of ON CONFLICT; the primary key still checks every row. If any
-- input already has a row (unique violation, or a WAIT input with a row),
-- the savepoint is rolled back and the general path decides, with a new
-- snapshot. Either way the result is the general path's: with no row for
-- any input, its decision for each input depends on the aggregate version
-- only, which is what the fast path decides, under the same advisory locks
-- and the same clock reading.
--
-- Plans: made once per session (force_generic_plan), and with sequential
-- scans off. A worker's pool connects at start-up, when a new deployment's
-- tables are empty; plans made then joined the batch with a sequential scan
-- of each table and kept doing so as the tables grew (measured in the
-- pipeline benchmark, docs/benchmarks.md, 2026-11-24: about 18 s of
-- Postgres CPU in 20 s). With sequential scans off the plans probe the
-- primary keys per input, right at any table size. Mark done and heartbeat,
-- sent by the Go code, run with the same setting (registry/mark.go,
-- probeQuery). A later CREATE OR REPLACE of this function must state both
-- settings again.
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
-- Sequential scans off: see the comment above the function.
SET enable_seqscan = off
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
                       WHEN i.wait IS NOT NULL AND i.seq <= COALESCE(v.last_sequence, 0) THEN 'STALE'
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

    -- General path: every input decided from its row (if any) and the
    -- guard, with the caller's tokens. A new statement, so a new snapshot, which sees the
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
                   WHEN i.wait IS NOT NULL AND i.seq <= COALESCE(v.last_sequence, 0) THEN 'STALE_NEW'
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

COMMENT ON FUNCTION sluice.registry_claim_batch(text[], text[], text[], bigint[], boolean[], uuid[], text, uuid, bigint)
    IS 'sluice registry claim; policy:none = p_wait NULL';

-- +goose Down
DROP FUNCTION IF EXISTS sluice.registry_claim_batch(text[], text[], text[], bigint[], boolean[], uuid[], text, uuid, bigint);
DROP FUNCTION IF EXISTS sluice.registry_lock_key(text, text);
DROP TABLE IF EXISTS sluice.aggregate_versions;
DROP TABLE IF EXISTS sluice.processed_events;
