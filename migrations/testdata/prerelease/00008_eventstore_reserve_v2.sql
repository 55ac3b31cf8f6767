-- +goose Up
-- A leaner one-round-trip reservation (issue #4, SPEC §5.4). Same
-- arguments, results and table writes as sluice.eventstore_reserve of
-- migration 00006, which stays as it is for binaries of the previous release
-- (a rolling upgrade runs both). Two differences, both measured on the
-- development machine (docs/eventstore.md, "Where the time goes"):
--
--   1. No look-up of the group's event ids before the work when no envelope
--      carries expected_seq: every envelope is then inserted, so a group
--      holding an event id that is already in appends fails on the unique
--      index appends_event_id_key (SQLSTATE 23505) and rolls back whole,
--      exactly as a concurrent writer taking an id did before; the caller
--      then runs the general path (idempotency, revival, waiting for a live
--      writer). The look-up cost an index probe per envelope on every group
--      to serve the rare retry (0.3 ms of 2 ms for 50 envelopes). Groups with
--      expected_seq keep it: a stale retry would be rejected by OCC before
--      its insert could fail.
--   2. A group in which no envelope carries expected_seq (no OCC) moves its
--      aggregates' sequences with ONE upsert: each aggregate's last sequence
--      goes up by its number of envelopes, created at that number when
--      missing, locked in the caller's sorted order. The four statements of
--      the general form (lock-or-create, read, update, delete unused) cost
--      0.9 ms for 50 envelopes. Groups with expected_seq keep them.
--
-- Plans: the statements of the common form read no table by a condition a
-- stale plan could turn into a scan (an upsert through its unique index, a
-- join of two input arrays, the one-row log_head, an INSERT from arrays), so
-- they keep PL/pgSQL's cached plans. The OCC form joins sequences and plans
-- per call, as 00006 does for everything.
-- +goose StatementBegin
CREATE FUNCTION sluice.eventstore_reserve_v2(
    p_t text[], p_i text[],
    p_eid text[], p_kind text[], p_agg int[], p_has_exp boolean[], p_exp bigint[],
    p_hash bytea[], p_occ timestamptz[], p_writer text,
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
BEGIN
    PERFORM set_config('sluice.reserved_notify', '', false);
    IF n = 0 THEN
        RETURN; -- first_pos NULL: the general path decides
    END IF;
    seqs := array_fill(0::bigint, ARRAY[n]);
    actuals := array_fill(0::bigint, ARRAY[n]);

    IF NOT (true = ANY (p_has_exp)) THEN
        -- No OCC: every envelope is accepted.
        cnt := array_fill(0::bigint, ARRAY[m]);
        FOR j IN 1..n LOOP
            cnt[p_agg[j]] := cnt[p_agg[j]] + 1;
        END LOOP;
        WITH up AS (
            INSERT INTO sluice.sequences AS s (aggregate_type, aggregate_id, last_sequence)
            SELECT u.t, u.i, u.c FROM unnest(p_t, p_i, cnt) WITH ORDINALITY AS u(t, i, c, ord) ORDER BY u.ord
            ON CONFLICT (aggregate_type, aggregate_id)
            DO UPDATE SET last_sequence = s.last_sequence + excluded.last_sequence, updated_at = now()
            RETURNING s.aggregate_type, s.aggregate_id, s.last_sequence
        )
        SELECT array_agg(up.last_sequence - u.c ORDER BY u.ord) INTO cur
          FROM unnest(p_t, p_i, cnt) WITH ORDINALITY AS u(t, i, c, ord)
          JOIN up ON up.aggregate_type = u.t AND up.aggregate_id = u.i;
        IF coalesce(cardinality(cur), 0) <> m THEN
            RAISE EXCEPTION 'eventstore_reserve_v2: moved % sequence rows of %', cardinality(cur), m;
        END IF;
        FOR j IN 1..n LOOP
            k := p_agg[j];
            cur[k] := cur[k] + 1;
            seqs[j] := cur[k];
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
            RAISE EXCEPTION 'eventstore_reserve_v2: locked % sequence rows of %', cardinality(cur), m;
        END IF;
        created := array_fill(false, ARRAY[m]);
        IF new_ords IS NOT NULL THEN
            FOREACH k IN ARRAY new_ords LOOP
                created[k] := true;
            END LOOP;
        END IF;
        orig := cur;
        FOR j IN 1..n LOOP
            k := p_agg[j];
            IF p_has_exp[j] AND p_exp[j] <> cur[k] THEN
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
DROP FUNCTION IF EXISTS sluice.eventstore_reserve_v2(text[], text[], text[], text[], int[], boolean[], bigint[], bytea[], timestamptz[], text);
