-- +goose Up
-- Processed-event registry (SPEC §7): the gate every worker passes before a
-- side effect. The Go side lives in registry/; docs/registry.md explains the
-- states and the operator runbook.

-- One row per (handler, event_id): the UNIQUE key is the claim gate
-- (SPEC §0.1, at most one side effect per event_id and handler).
-- Identifiers use the "C" collation: they are compared for equality only,
-- byte for byte, whatever the database locale, and "C" makes every index
-- comparison a memcmp instead of a locale-aware strcoll.
CREATE TABLE sluice.processed_events (
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
    CONSTRAINT processed_events_pkey PRIMARY KEY (handler, event_id),
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
    'Processed-event registry (SPEC §7): one row per handler and event_id; claim with lease and heartbeat';

-- Command status looks an event up by event_id across handlers (Registry.Get).
CREATE INDEX processed_events_event_id_idx ON sluice.processed_events (event_id);

-- Retention (Registry.Prune) finds old finished rows through started_at
-- (a finished row's processed_at is never earlier). Rows are appended in
-- claim order, so a BRIN index on started_at is tiny and almost free to
-- maintain. started_at does not change when a row is marked done or
-- heartbeated, and no index covers a column those updates change, so with
-- the fillfactor below they are HOT updates that write no index entry.
CREATE INDEX processed_events_started_at_idx ON sluice.processed_events USING brin (started_at);
ALTER TABLE sluice.processed_events SET (fillfactor = 50);

-- Per (handler, aggregate) the highest finished sequence: the sequence guard
-- (SPEC §7.3). Never pruned: it is what keeps a replayed, pruned event STALE.
CREATE TABLE sluice.aggregate_versions (
    handler        text COLLATE "C" NOT NULL,
    aggregate_id   text COLLATE "C" NOT NULL,
    last_sequence  bigint      NOT NULL DEFAULT 0,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT aggregate_versions_pkey PRIMARY KEY (handler, aggregate_id),
    CONSTRAINT aggregate_versions_sequence_check CHECK (last_sequence >= 0)
) WITH (fillfactor = 80);
COMMENT ON TABLE sluice.aggregate_versions IS
    'Sequence guard (SPEC §7.3): highest finished sequence per handler and aggregate';

-- The advisory-lock key serialising the sequence check of one
-- (handler, aggregate). The length prefix makes the encoding unambiguous; a
-- hash collision only serialises two aggregates, it never merges their rows.
-- +goose StatementBegin
CREATE FUNCTION sluice.registry_lock_key(p_handler text, p_aggregate_id text)
RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT hashtextextended(length(p_handler)::text || ':' || p_handler || p_aggregate_id, 5318008)
$$;
-- +goose StatementEnd

-- registry_claim evaluates many claims in one statement and one transaction
-- (Registry.Claim and Registry.ClaimBatch). The inputs are parallel arrays,
-- one element per claim, unique by (handler, event_id); the result has one row
-- per input, idx being its 1-based position. Semantics are those of claiming
-- the inputs one after another in array order (docs/registry.md).
--
-- Decision per input, under the advisory locks of every (handler, aggregate)
-- of the batch, taken in key order so concurrent batches cannot deadlock:
--   row done            -> DUPLICATE_DONE
--   row skipped_stale   -> STALE
--   row dead            -> DEAD
--   row processing, lease alive and not a restart of its owner -> IN_PROGRESS
--   row processing, lease expired, or held by an earlier instance of this
--     owner               -> CLAIMED (attempt + 1, new lease token)
--   row failed, next_attempt_at in the future -> RETRY_LATER
--   row failed, due       -> CLAIMED (attempt + 1, new lease token)
--   no row: seq <= last   -> STALE (row recorded as skipped_stale)
--   no row: wait policy and seq <> last + 1 -> WAIT (nothing recorded but
--     a version row at 0, so the stall can be timed on the database clock)
--   no row: otherwise     -> CLAIMED (attempt 1)
-- Every time is the database clock.
-- +goose StatementBegin
CREATE FUNCTION sluice.registry_claim(
    p_handler      text[],
    p_event_id     text[],
    p_aggregate_id text[],
    p_seq          bigint[],
    p_wait         boolean[],
    p_owner        text,
    p_instance     uuid,
    p_lease_us     bigint)
RETURNS TABLE (
    idx              bigint,
    kind             text,
    lease_token      uuid,
    attempt          integer,
    holder           text,
    last_sequence    bigint,
    not_before       timestamptz,
    wait_us          bigint,
    stalled_us       bigint,
    outcome          jsonb,
    last_error       text)
LANGUAGE plpgsql VOLATILE
AS $fn$
#variable_conflict use_column
DECLARE
    v_lease interval := p_lease_us * interval '1 microsecond';
    v_now   timestamptz;
BEGIN
    PERFORM pg_advisory_xact_lock(k.key)
    FROM (SELECT DISTINCT sluice.registry_lock_key(u.h, u.a) AS key
          FROM unnest(p_handler, p_aggregate_id) AS u(h, a)
          ORDER BY 1) AS k;
    -- The clock is read after the locks are held: a wait for a lock must not
    -- make a new lease look older than it is.
    v_now := clock_timestamp();

    -- A new statement, so its snapshot sees everything committed by the
    -- transactions that held these locks before us.
    RETURN QUERY
    WITH input AS (
        SELECT u.handler, u.event_id, u.aggregate_id, u.seq, u.wait, u.idx
        FROM unnest(p_handler, p_event_id, p_aggregate_id, p_seq, p_wait)
             WITH ORDINALITY AS u(handler, event_id, aggregate_id, seq, wait, idx)
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
        SELECT i.idx, i.handler, i.event_id, i.aggregate_id, i.seq,
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
               CASE WHEN d.decision = 'CLAIM_NEW' THEN gen_random_uuid() END,
               v_now,
               v_now,
               CASE WHEN d.decision = 'STALE_NEW' THEN v_now END,
               CASE WHEN d.decision = 'CLAIM_NEW' THEN 1 ELSE 0 END,
               CASE WHEN d.decision = 'STALE_NEW' THEN '{"result":"stale"}'::jsonb END
        FROM decided d
        WHERE d.decision IN ('CLAIM_NEW', 'STALE_NEW')
        ORDER BY d.handler, d.event_id
        ON CONFLICT (handler, event_id) DO NOTHING
        RETURNING pe.handler, pe.event_id, pe.lease_token, pe.attempt_count
    ),
    upd AS (
        UPDATE sluice.processed_events pe
        SET status = 'processing',
            owner = p_owner,
            owner_instance = p_instance,
            lease_token = gen_random_uuid(),
            started_at = v_now,
            heartbeat_at = v_now,
            next_attempt_at = NULL,
            attempt_count = pe.attempt_count + 1
        FROM decided d
        WHERE d.decision = 'RECLAIM' AND pe.handler = d.handler AND pe.event_id = d.event_id
        RETURNING pe.handler, pe.event_id, pe.lease_token, pe.attempt_count
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
    SELECT d.idx,
           CASE
               WHEN d.decision = 'CLAIM_NEW' AND ins.lease_token IS NOT NULL THEN 'CLAIMED'
               WHEN d.decision = 'CLAIM_NEW' THEN 'IN_PROGRESS' -- lost an insert race
               WHEN d.decision = 'STALE_NEW' THEN 'STALE'
               WHEN d.decision = 'RECLAIM' THEN 'CLAIMED'
               ELSE d.decision
           END,
           COALESCE(ins.lease_token, upd.lease_token),
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
DROP FUNCTION IF EXISTS sluice.registry_claim(text[], text[], text[], bigint[], boolean[], text, uuid, bigint);
DROP FUNCTION IF EXISTS sluice.registry_lock_key(text, text);
DROP TABLE IF EXISTS sluice.aggregate_versions;
DROP TABLE IF EXISTS sluice.processed_events;
