-- +goose Up
-- The event store's index (docs/eventstore.md#layout). Baseline: see
-- 00012_schema.sql. The segments on object storage are the source of truth;
-- every table here can be rebuilt from them (`sluice store reindex`),
-- except the bookkeeping of reservations that never reached a segment
-- (abandoned rows), which by definition hold no event.

-- log_head: the next free global position. A reservation takes a contiguous
-- block by updating this single row inside the reservation transaction, so
-- positions follow reservation commit order and a rolled-back reservation
-- leaves no hole.
CREATE TABLE IF NOT EXISTS sluice.log_head (
    singleton     boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    next_position bigint  NOT NULL CHECK (next_position >= 1)
);
INSERT INTO sluice.log_head (singleton, next_position) VALUES (true, 1) ON CONFLICT DO NOTHING;

-- sequences: the last sequence number of each aggregate. Commands and
-- domain events share one sequence per aggregate
-- (docs/eventstore.md#slots-commands-and-domain-events).
CREATE TABLE IF NOT EXISTS sluice.sequences (
    aggregate_type text        NOT NULL,
    aggregate_id   text        NOT NULL,
    last_sequence  bigint      NOT NULL CHECK (last_sequence >= 0),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (aggregate_type, aggregate_id)
);

-- appends: one row per reserved position. segment_key is the key the
-- writer's segment has (or will have) from the moment of reservation, so a
-- reserved row's segment is found with one lookup; byte_offset/byte_length
-- locate the envelope's line once committed. canonical_hash is the SHA-256
-- of the canonical form (docs/architecture.md#the-envelope) used by the
-- idempotency check; writer_id names the process (Store) that reserved the
-- row.
CREATE TABLE IF NOT EXISTS sluice.appends (
    position        bigint      PRIMARY KEY CHECK (position >= 1),
    event_id        uuid        NOT NULL,
    kind            text        NOT NULL CHECK (kind IN ('command', 'domain')),
    aggregate_type  text        NOT NULL,
    aggregate_id    text        NOT NULL,
    sequence_number bigint      NOT NULL CHECK (sequence_number >= 1),
    state           text        NOT NULL CHECK (state IN ('reserved', 'committed', 'abandoned')),
    segment_key     text        NOT NULL,
    byte_offset     bigint      CHECK (byte_offset >= 0),
    byte_length     integer     CHECK (byte_length > 0),
    canonical_hash  bytea       NOT NULL CHECK (length(canonical_hash) = 32),
    occurred_at     timestamptz NOT NULL,
    writer_id       text        NOT NULL,
    reserved_at     timestamptz NOT NULL DEFAULT now(),
    committed_at    timestamptz,
    CONSTRAINT appends_event_id_key UNIQUE (event_id),
    -- one command and at most one domain event per slot of an aggregate
    CONSTRAINT appends_slot_key UNIQUE (aggregate_type, aggregate_id, sequence_number, kind),
    CONSTRAINT appends_committed_located CHECK (
        state <> 'committed' OR (byte_offset IS NOT NULL AND byte_length IS NOT NULL AND committed_at IS NOT NULL))
);

-- The relay's gap queries: positions not (yet) committed, by position, and
-- reserved rows by age (docs/relay.md#gaps-and-the-bounded-lookback). Both
-- stay small: committed rows, the vast majority, are not in them.
CREATE INDEX IF NOT EXISTS appends_uncommitted_idx ON sluice.appends (position) WHERE state <> 'committed';
CREATE INDEX IF NOT EXISTS appends_reserved_age_idx ON sluice.appends (reserved_at) WHERE state = 'reserved';

COMMENT ON TABLE sluice.log_head IS 'event store: next free global position (one row)';
COMMENT ON TABLE sluice.sequences IS 'event store: last sequence number per aggregate';
COMMENT ON TABLE sluice.appends IS 'event store: index from position / event_id / (aggregate, sequence, kind) to segment bytes';

-- eventstore_flush makes an asynchronously committed reservation durable
-- before its segment is written. The store commits the reservation with
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
CREATE TABLE IF NOT EXISTS sluice.eventstore_flush (
    backend_pid integer PRIMARY KEY,
    flushes     bigint  NOT NULL
);
COMMENT ON TABLE sluice.eventstore_flush IS 'event store: one row per connection, updated to flush asynchronously committed reservations (no event data)';

-- The pre-release chain's generations of the reservation function; only
-- the last one remains, as sluice.eventstore_reserve below.
DROP FUNCTION IF EXISTS sluice.eventstore_reserve(text[], text[], text[], text[], int[], boolean[], bigint[], bytea[], timestamptz[], text);
DROP FUNCTION IF EXISTS sluice.eventstore_reserve_v2(text[], text[], text[], text[], int[], boolean[], bigint[], bytea[], timestamptz[], text);
DROP FUNCTION IF EXISTS sluice.eventstore_reserve_v3(text[], text[], text[], text[], int[], boolean[], bigint[], bytea[], timestamptz[], text, boolean[], bigint[], text[]);

-- The slot rules, defined once: whether a domain event may take slot k of
-- its aggregate, given the command stored in that slot (NULLs when there is
-- none) and the event's metadata.causation_id ('' when absent). NULL means
-- it may; otherwise the rule it breaks:
--   no_command          the slot holds no command;
--   command_abandoned   the slot's command was abandoned (abandoned is
--                       final, docs/eventstore.md#abandoned-is-final-issue-21-item-2);
--   causation_mismatch  causation_id names another event than the command.
-- eventstore_reserve below applies it, and so does the general reservation
-- path of eventstore/reserve.go (slotAllowed), which only turns the code
-- into its error message. That the slot holds no other domain event is the
-- unique index appends_slot_key. A SQL function, so it is inlined into the
-- queries that call it.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sluice.eventstore_slot_refusal(
    p_command_event_id uuid, p_command_state text, p_causation_id text)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN p_command_event_id IS NULL THEN 'no_command'
        WHEN p_command_state = 'abandoned' THEN 'command_abandoned'
        WHEN p_causation_id <> '' AND p_causation_id <> p_command_event_id::text THEN 'causation_mismatch'
    END
$$;
-- +goose StatementEnd

-- sluice.eventstore_reserve is the reservation transaction of a group in ONE
-- round trip (one statement, committed on its own) for the common group of
-- the postgres allocator: commands, direct domain events, and domain events
-- into their commands' slots (docs/eventstore.md#append-protocol-group-commit).
-- It writes exactly what the general path of eventstore/reserve.go writes,
-- in the same order, with the same locks. Inputs: the group's aggregates
-- (p_t, p_i, sorted); per envelope its event_id, kind, aggregate (p_agg: a
-- 1-based index into p_t/p_i), expected sequence (p_has_exp, p_exp), hash,
-- occurred_at; p_slot[j] when envelope j is a domain event into the slot
-- p_slot_seq[j] of its command, with p_cause[j] its metadata.causation_id
-- ('' when absent).
--
--   1. Slot envelopes first: when a slot rule fails
--      (eventstore_slot_refusal) it returns first_pos NULL having written nothing, and the general
--      path decides and names the rule. A slot envelope moves no sequence.
--   2. Without expected sequences, one upsert moves each aggregate's last
--      sequence by its number of envelopes. With them (OCC) it locks the
--      sequences rows in sorted order (creating at 0), assigns sequences in
--      arrival order, rejects an envelope whose expected sequence differs
--      from the aggregate's last at that point (seqs 0, actuals its last),
--      writes back, and deletes rows it created unused; an event_id already
--      in appends returns first_pos NULL (idempotency is the general path's).
--   3. Takes one contiguous block of positions from log_head (its row lock,
--      held to commit, orders positions by reservation commit order),
--      inserts the accepted envelopes' appends rows in state reserved, with
--      the segment key their block will have, and sets the session variable
--      sluice.reserved_notify to 'reserved FIRST LAST' ('' when nothing was
--      reserved). The caller sends that NOTIFY in a transaction of its own
--      right after the commit, in the same round trip: a NOTIFY inside this
--      transaction would wait for Postgres's cluster-wide notification lock
--      while holding the log_head lock.
--
-- A unique violation (a stored event_id, or another domain event in the
-- slot) fails the statement and rolls everything back; the caller takes the
-- general path. first_pos 0 means nothing was accepted (nothing reserved,
-- no position taken).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sluice.eventstore_reserve(
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
             WHERE u.sl AND sluice.eventstore_slot_refusal(c.event_id, c.state, u.cause) IS NOT NULL) THEN
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
            RAISE EXCEPTION 'eventstore_reserve: moved % sequence rows of %', moved, m;
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
        -- OCC: lock in sorted order, creating at 0; read; assign in
        -- arrival order; write back; delete rows created unused. A stale
        -- envelope is rejected before any insert, so the unique index
        -- cannot catch a retry here: idempotency comes before OCC
        -- (docs/eventstore.md#idempotency-event_id), and a stored event id
        -- sends the group to the general path.
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
            RAISE EXCEPTION 'eventstore_reserve: locked % sequence rows of %', cardinality(cur), m;
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
DROP FUNCTION IF EXISTS sluice.eventstore_slot_refusal(uuid, text, text);
DROP FUNCTION IF EXISTS sluice.eventstore_reserve(text[], text[], text[], text[], int[], boolean[], bigint[], bytea[], timestamptz[], text, boolean[], bigint[], text[]);
DROP TABLE IF EXISTS sluice.eventstore_flush;
DROP TABLE IF EXISTS sluice.appends;
DROP TABLE IF EXISTS sluice.sequences;
DROP TABLE IF EXISTS sluice.log_head;
