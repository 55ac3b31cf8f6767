-- +goose Up
-- A third sequence-guard policy for the processed-event registry: none
-- (SPEC §7.3; docs/registry.md, "Policies"). It is for handlers whose side
-- effect belongs to the event alone, such as the history projection (one
-- document per event, _id = event_id, op_type = create): an event published
-- late, after newer events of its aggregate (a writer revived after the
-- relay abandoned its position, SPEC §6.3), must still get its document.
-- Under skip-stale it was STALE and history lost it.
--
-- sluice.registry_claim_batch keeps its signature; p_wait becomes a
-- three-valued policy per input:
--
--   true  wait-for-predecessor (unchanged)
--   false skip-stale           (unchanged)
--   NULL  none: never STALE or WAIT because of the aggregate's last
--         sequence. The row's status (done, processing, failed, dead) still
--         decides duplicates, leases and retries exactly as before, so at
--         most one side effect per (handler, event_id) holds as before.
--
-- Callers of the previous release never send NULL, so nothing changes for
-- them: the only edits to the body of migration 00005 are the two
-- "i.wait IS NOT NULL" conditions of the STALE decisions (fast path and
-- general path). The function's comment carries the marker 'policy:none'
-- that Registry.Check looks for, so a binary refuses a schema without it.
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
    IS 'sluice registry claim (migrations 00005, 00007); policy:none = p_wait NULL';

-- +goose Down
-- The body stays: a binary of the previous release never sends NULL, so it
-- cannot tell the difference. The marker goes, so that a binary that relies
-- on the policy refuses this schema.
COMMENT ON FUNCTION sluice.registry_claim_batch(text[], text[], text[], bigint[], boolean[], uuid[], text, uuid, bigint)
    IS NULL;
