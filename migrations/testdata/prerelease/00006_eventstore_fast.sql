-- +goose Up
-- Faster event-store reservations (issue #4, SPEC §5.4). docs/eventstore.md
-- ("Where the time goes") has the measurements behind it.
--
-- sluice.eventstore_reserve is the reservation transaction of a group in ONE
-- round trip (one statement, committed on its own) for the common case: no
-- envelope of the group names its sequence number (commands and direct
-- domain events, postgres allocator). It does exactly what the two round
-- trips of the general path do (eventstore/reserve.go), in the same order,
-- with the same locks:
--
--   1. If any event_id of the group is already in appends, it does nothing
--      and returns first_pos NULL: the caller runs the general path
--      (idempotency, revival, waiting for a live writer).
--   2. Locks (creating at 0 where missing) the sequences rows of the
--      group's aggregates, in the caller's sorted order (p_t, p_i).
--   3. In arrival order assigns each envelope the next sequence of its
--      aggregate (p_agg: 1-based index into p_t/p_i); an envelope with an
--      expected sequence (p_has_exp) that differs from the aggregate's last
--      sequence at that point of the group is rejected (seqs 0, actuals its
--      last sequence) and the others go on (OCC, SPEC §5.4 step 3).
--   4. Writes the new last sequences, deletes rows it created but did not
--      use, takes one contiguous block of positions from log_head (its row
--      lock, held to commit, orders positions by reservation commit order),
--      inserts the accepted envelopes' appends rows in state reserved, in
--      arrival order, with the segment key their block will have, and sets
--      the session variable sluice.reserved_notify to the NOTIFY payload
--      'reserved FIRST LAST' ('' when nothing was reserved). The caller sends
--      that NOTIFY in a transaction of its own right after the commit, in the
--      same round trip: a NOTIFY inside this transaction would make it wait
--      for Postgres's cluster-wide notification lock while holding the
--      log_head lock.
--
-- A unique violation (a concurrent writer took an event_id meanwhile) fails
-- the statement and rolls everything back; the caller runs it again.
-- first_pos 0 means nothing was accepted (nothing reserved, no position
-- taken). Nothing here changes the tables: the relay, Repair and Reindex
-- read exactly what the general path writes.
-- +goose StatementBegin
CREATE FUNCTION sluice.eventstore_reserve(
    p_t text[], p_i text[],
    p_eid text[], p_kind text[], p_agg int[], p_has_exp boolean[], p_exp bigint[],
    p_hash bytea[], p_occ timestamptz[], p_writer text,
    OUT first_pos bigint, OUT seqs bigint[], OUT actuals bigint[])
LANGUAGE plpgsql
-- Plan every statement for the arrays at hand. A cached generic plan, made
-- while appends was small, looked event ids up with a sequential scan of
-- appends (measured: 70–300 ms per reservation at a few thousand rows under
-- load, all of it inside the reservation); custom plans use the indexes.
SET plan_cache_mode = force_custom_plan
AS $fn$
DECLARE
    n       int := coalesce(cardinality(p_eid), 0);
    cur     bigint[];
    orig    bigint[];
    created boolean[];
    new_ords int[];
    k       int;
    acc     bigint := 0;
    seg     text;
BEGIN
    PERFORM set_config('sluice.reserved_notify', '', false);
    IF n = 0 OR EXISTS (SELECT 1 FROM sluice.appends WHERE event_id = ANY (p_eid::uuid[])) THEN
        RETURN; -- first_pos NULL: the general path decides
    END IF;

    -- Lock in sorted order, creating missing rows at 0. DO UPDATE ... WHERE
    -- false locks an existing row without writing a new version of it (the
    -- general path's DO UPDATE SET last_sequence = last_sequence writes one,
    -- and its later update another); RETURNING then names the rows created.
    WITH ins AS (
        INSERT INTO sluice.sequences AS s (aggregate_type, aggregate_id, last_sequence)
        SELECT u.t, u.i, 0 FROM unnest(p_t, p_i) AS u(t, i)
        ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_sequence = s.last_sequence WHERE false
        RETURNING s.aggregate_type, s.aggregate_id
    )
    SELECT array_agg(u.ord::int) INTO new_ords
      FROM unnest(p_t, p_i) WITH ORDINALITY AS u(t, i, ord)
      JOIN ins ON ins.aggregate_type = u.t AND ins.aggregate_id = u.i;
    -- a new statement, so a new snapshot: the rows as last committed (we
    -- hold their locks) and the ones created above
    SELECT array_agg(s.last_sequence ORDER BY u.ord) INTO cur
      FROM unnest(p_t, p_i) WITH ORDINALITY AS u(t, i, ord)
      JOIN sluice.sequences s ON s.aggregate_type = u.t AND s.aggregate_id = u.i;
    IF coalesce(cardinality(cur), 0) <> coalesce(cardinality(p_t), 0) THEN
        RAISE EXCEPTION 'eventstore_reserve: locked % sequence rows of %', cardinality(cur), cardinality(p_t);
    END IF;
    created := array_fill(false, ARRAY[cardinality(p_t)]);
    IF new_ords IS NOT NULL THEN
        FOREACH k IN ARRAY new_ords LOOP
            created[k] := true;
        END LOOP;
    END IF;
    orig := cur;

    seqs := array_fill(0::bigint, ARRAY[n]);
    actuals := array_fill(0::bigint, ARRAY[n]);
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

-- eventstore_flush makes an asynchronously committed reservation durable
-- before its segment is written. The store commits the reservation above with
-- synchronous_commit = off, so its row locks (log_head, sequences) and the
-- NOTIFY lock are released without waiting for the WAL flush, and the next
-- group's reservation need not wait for this one's fsync. In the same round
-- trip it then upserts this connection's row here in a transaction of its own,
-- committed with the session's synchronous_commit: that commit flushes the WAL
-- up to its own commit record, which lies after the reservation's, so when
-- the round trip returns the reservation is durable (and replicated, with
-- synchronous replication) exactly as if it had committed synchronously. The
-- segment is written only after that. One row per backend pid, so concurrent
-- flushes never wait for each other's row locks.
CREATE TABLE sluice.eventstore_flush (
    backend_pid integer PRIMARY KEY,
    flushes     bigint  NOT NULL
);
COMMENT ON TABLE sluice.eventstore_flush IS 'event store: one row per connection, updated to flush asynchronously committed reservations (no event data)';

-- +goose Down
DROP TABLE IF EXISTS sluice.eventstore_flush;
DROP FUNCTION IF EXISTS sluice.eventstore_reserve(text[], text[], text[], text[], int[], boolean[], bigint[], bytea[], timestamptz[], text);
