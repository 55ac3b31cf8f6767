-- +goose Up
-- The one-round-trip reservation for groups holding domain events that go
-- into their command's slot (SPEC §5.4: "the instance worker appends its
-- resulting domain event into the same slot k, no new reservation"). Until
-- now such a group took the general path: two round trips, the event-id and
-- slot look-ups, and a synchronous COMMIT holding the log_head lock through
-- its WAL flush, so the next group's reservation waited for the fsync. In
-- the pipeline nearly every group holds a domain event (the instance worker
-- appends one per command), so the write side paid that on every command.
--
-- sluice.eventstore_reserve_v3 is eventstore_reserve_v2 of migration 00008
-- (which stays, for binaries of the previous release) with three more
-- arrays: p_slot[j] (envelope j is a domain event into its command's slot),
-- p_slot_seq[j] (that slot) and p_cause[j] (its metadata.causation_id, ''
-- when absent). A slot envelope moves no sequence; the function checks the
-- slot rules the general path applies in Go (eventstore/reserve.go,
-- slotAllowed) and, when any of them fails, returns first_pos NULL having
-- written nothing, so the general path decides and names the rule:
--
--   - slot k of the aggregate holds a command that is not abandoned;
--   - a causation_id, when present, is that command's event_id;
--   - no other domain event holds slot k: the insert fails on the unique
--     index appends_slot_key (SQLSTATE 23505), the statement rolls back
--     whole and the caller takes the general path, as for a stored event id
--     (appends_event_id_key).
--
-- Plans: a group with slot envelopes looks its commands up in appends, a
-- table that grows, one index probe per envelope, planned per call (as the
-- OCC form does); other groups keep v2's cached plans.
-- +goose StatementBegin
CREATE FUNCTION sluice.eventstore_reserve_v3(
    p_t text[], p_i text[],
    p_eid text[], p_kind text[], p_agg int[], p_has_exp boolean[], p_exp bigint[],
    p_hash bytea[], p_occ timestamptz[], p_writer text,
    p_slot boolean[], p_slot_seq bigint[], p_cause text[],
    OUT first_pos bigint, OUT seqs bigint[], OUT actuals bigint[])
LANGUAGE plpgsql
AS $fn$
DECLARE
    n       int := coalesce(cardinality(p_eid), 0);
    m       int := coalesce(cardinality(p_t), 0);
    cur     bigint[];
    orig    bigint[];
    cnt     bigint[];
    created boolean[];
    new_ords int[];
    k       int;
    acc     bigint := 0;
    seg     text;
    moved   bigint;
    nslot   int := 0;
    mode    text;
BEGIN
    PERFORM set_config('sluice.reserved_notify', '', false);
    IF n = 0 THEN
        RETURN; -- first_pos NULL: the general path decides
    END IF;
    seqs := array_fill(0::bigint, ARRAY[n]);
    actuals := array_fill(0::bigint, ARRAY[n]);

    -- Slot envelopes: the slot rules, before anything is written.
    IF true = ANY (p_slot) THEN
        mode := current_setting('plan_cache_mode');
        PERFORM set_config('plan_cache_mode', 'force_custom_plan', true);
        -- One probe of the slot index per envelope (LATERAL … LIMIT 1):
        -- a plain join let the planner, trusting statistics taken while
        -- appends was small, scan the whole table once per envelope
        -- (seen: 2 s per reservation at 60,000 rows).
        IF EXISTS (
            SELECT 1
              FROM unnest(p_slot, p_slot_seq, p_cause, p_agg) AS u(sl, sq, cause, k)
              LEFT JOIN LATERAL (
                   SELECT a.event_id, a.state
                     FROM sluice.appends a
                    WHERE a.aggregate_type = p_t[u.k] AND a.aggregate_id = p_i[u.k]
                      AND a.sequence_number = u.sq AND a.kind = 'command'
                    LIMIT 1) c ON true
             WHERE u.sl AND (c.event_id IS NULL OR c.state = 'abandoned'
                             OR (u.cause <> '' AND u.cause <> c.event_id::text))) THEN
            RETURN; -- first_pos NULL: the general path decides and names the rule
        END IF;
        -- Only the look-up plans per call; the writes below keep their
        -- cached plans (the OCC form sets it again for itself).
        PERFORM set_config('plan_cache_mode', mode, true);
        FOR j IN 1..n LOOP
            IF p_slot[j] THEN
                seqs[j] := p_slot_seq[j];
                nslot := nslot + 1;
            END IF;
        END LOOP;
    END IF;

    IF NOT (true = ANY (p_has_exp)) THEN
        -- No OCC: every envelope is accepted.
        -- Slot envelopes move no sequence: only aggregates with a command
        -- or a direct domain event are upserted.
        cnt := array_fill(0::bigint, ARRAY[m]);
        FOR j IN 1..n LOOP
            IF NOT p_slot[j] THEN
                cnt[p_agg[j]] := cnt[p_agg[j]] + 1;
            END IF;
        END LOOP;
        WITH up AS (
            INSERT INTO sluice.sequences AS s (aggregate_type, aggregate_id, last_sequence)
            SELECT u.t, u.i, u.c FROM unnest(p_t, p_i, cnt) WITH ORDINALITY AS u(t, i, c, ord) WHERE u.c > 0 ORDER BY u.ord
            ON CONFLICT (aggregate_type, aggregate_id)
            DO UPDATE SET last_sequence = s.last_sequence + excluded.last_sequence, updated_at = now()
            RETURNING s.aggregate_type, s.aggregate_id, s.last_sequence
        )
        SELECT array_agg(coalesce(up.last_sequence - u.c, 0) ORDER BY u.ord), count(up.aggregate_type) INTO cur, moved
          FROM unnest(p_t, p_i, cnt) WITH ORDINALITY AS u(t, i, c, ord)
          LEFT JOIN up ON up.aggregate_type = u.t AND up.aggregate_id = u.i;
        IF moved <> (SELECT count(*) FROM unnest(cnt) AS c WHERE c > 0) THEN
            RAISE EXCEPTION 'eventstore_reserve_v3: moved % sequence rows of %', moved, m;
        END IF;
        FOR j IN 1..n LOOP
            IF NOT p_slot[j] THEN
                k := p_agg[j];
                cur[k] := cur[k] + 1;
                seqs[j] := cur[k];
            END IF;
        END LOOP;
        acc := n;
    ELSE
        -- OCC: the form of 00006 (lock in sorted order, creating at 0; read;
        -- assign in arrival order; write back; delete rows created unused).
        -- A stale envelope is rejected before any insert, so the unique
        -- index cannot catch a retry here: idempotency (SPEC §5.4 step 2)
        -- comes before OCC, and a stored event id sends the group to the
        -- general path as in 00006.
        PERFORM set_config('plan_cache_mode', 'force_custom_plan', true);
        IF EXISTS (SELECT 1 FROM sluice.appends WHERE event_id = ANY (p_eid::uuid[])) THEN
            RETURN; -- first_pos NULL: the general path decides
        END IF;
        WITH ins AS (
            INSERT INTO sluice.sequences AS s (aggregate_type, aggregate_id, last_sequence)
            SELECT u.t, u.i, 0 FROM unnest(p_t, p_i) AS u(t, i)
            ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_sequence = s.last_sequence WHERE false
            RETURNING s.aggregate_type, s.aggregate_id
        )
        SELECT array_agg(u.ord::int) INTO new_ords
          FROM unnest(p_t, p_i) WITH ORDINALITY AS u(t, i, ord)
          JOIN ins ON ins.aggregate_type = u.t AND ins.aggregate_id = u.i;
        SELECT array_agg(s.last_sequence ORDER BY u.ord) INTO cur
          FROM unnest(p_t, p_i) WITH ORDINALITY AS u(t, i, ord)
          JOIN sluice.sequences s ON s.aggregate_type = u.t AND s.aggregate_id = u.i;
        IF coalesce(cardinality(cur), 0) <> m THEN
            RAISE EXCEPTION 'eventstore_reserve_v3: locked % sequence rows of %', cardinality(cur), m;
        END IF;
        created := array_fill(false, ARRAY[m]);
        IF new_ords IS NOT NULL THEN
            FOREACH k IN ARRAY new_ords LOOP
                created[k] := true;
            END LOOP;
        END IF;
        orig := cur;
        acc := nslot;
        FOR j IN 1..n LOOP
            k := p_agg[j];
            IF p_slot[j] THEN
                CONTINUE; -- its slot, set above; no sequence moves
            ELSIF p_has_exp[j] AND p_exp[j] <> cur[k] THEN
                actuals[j] := cur[k];
            ELSE
                cur[k] := cur[k] + 1;
                seqs[j] := cur[k];
                acc := acc + 1;
            END IF;
        END LOOP;
        UPDATE sluice.sequences s SET last_sequence = u.l, updated_at = now()
          FROM unnest(p_t, p_i, cur, orig) AS u(t, i, l, o)
         WHERE u.l <> u.o AND s.aggregate_type = u.t AND s.aggregate_id = u.i;
        DELETE FROM sluice.sequences s
         USING unnest(p_t, p_i, cur, created) AS u(t, i, l, c)
         WHERE u.c AND u.l = 0 AND s.aggregate_type = u.t AND s.aggregate_id = u.i;
        IF acc = 0 THEN
            first_pos := 0;
            RETURN;
        END IF;
    END IF;

    UPDATE sluice.log_head SET next_position = next_position + acc
    RETURNING next_position - acc INTO first_pos;
    seg := 'segments/' || lpad(first_pos::text, 20, '0') || '-' || lpad((first_pos + acc - 1)::text, 20, '0') || '.jsonl';
    INSERT INTO sluice.appends (position, event_id, kind, aggregate_type, aggregate_id, sequence_number,
                                state, segment_key, canonical_hash, occurred_at, writer_id)
    SELECT first_pos + row_number() OVER (ORDER BY u.ord) - 1, u.eid::uuid, u.kind, p_t[u.k], p_i[u.k], u.seq,
           'reserved', seg, u.hash, u.occ, p_writer
      FROM unnest(p_eid, p_kind, p_agg, seqs, p_hash, p_occ) WITH ORDINALITY AS u(eid, kind, k, seq, hash, occ, ord)
     WHERE u.seq > 0;
    PERFORM set_config('sluice.reserved_notify', 'reserved ' || first_pos || ' ' || (first_pos + acc - 1), false);
END
$fn$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION IF EXISTS sluice.eventstore_reserve_v3(text[], text[], text[], text[], int[], boolean[], bigint[], bytea[], timestamptz[], text, boolean[], bigint[], text[]);
