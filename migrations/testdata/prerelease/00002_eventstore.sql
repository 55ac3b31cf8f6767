-- +goose Up
-- Event-store index (SPEC §5.3). The segments on object storage are the
-- source of truth; every table here can be rebuilt from them
-- (`sluice store reindex`), except the bookkeeping of reservations that never
-- reached a segment (abandoned rows), which by definition hold no event.

-- log_head: the next free global position. A reservation takes a contiguous
-- block by updating this single row inside the reservation transaction, so
-- positions follow reservation commit order and a rolled-back reservation
-- leaves no hole.
CREATE TABLE sluice.log_head (
    singleton     boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    next_position bigint  NOT NULL CHECK (next_position >= 1)
);
INSERT INTO sluice.log_head (singleton, next_position) VALUES (true, 1);

-- sequences: the last sequence number of each aggregate. Commands and
-- domain events share one sequence per aggregate (SPEC §5.4).
CREATE TABLE sluice.sequences (
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
-- of the canonical form (SPEC §3) used by the idempotency check; writer_id
-- names the process (Store) that reserved the row.
CREATE TABLE sluice.appends (
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
-- reserved rows by age (SPEC §6.3). Both stay small: committed rows, the
-- vast majority, are not in them.
CREATE INDEX appends_uncommitted_idx ON sluice.appends (position) WHERE state <> 'committed';
CREATE INDEX appends_reserved_age_idx ON sluice.appends (reserved_at) WHERE state = 'reserved';

COMMENT ON TABLE sluice.log_head IS 'event store: next free global position (one row)';
COMMENT ON TABLE sluice.sequences IS 'event store: last sequence number per aggregate';
COMMENT ON TABLE sluice.appends IS 'event store: index from position / event_id / (aggregate, sequence, kind) to segment bytes';

-- +goose Down
DROP TABLE IF EXISTS sluice.appends;
DROP TABLE IF EXISTS sluice.sequences;
DROP TABLE IF EXISTS sluice.log_head;
