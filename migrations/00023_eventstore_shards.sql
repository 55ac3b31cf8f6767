-- +goose Up
-- Shards of the log (docs/eventstore.md#shards, docs/scale-out.md#shards-of-the-log),
-- owned by package eventstore. A store has N shards, fixed when it is
-- created; each has its own head row and positions, so an event is
-- addressed by (shard, position). A store from before this migration is
-- one shard, shard 0: its head row and every appends row become shard 0's,
-- positions and segment keys unchanged.
--
-- Cost on an existing store: the new column's check scans appends once,
-- and the primary key (shard, position) and the partial index of
-- uncommitted rows are rebuilt, under an exclusive lock of appends for the
-- migration's transaction (appends wait meanwhile). Run it before the
-- processes are replaced: a build from before it keeps working on a
-- store of one shard (the columns default to shard 0), a build from it on
-- needs them. docs/migrations.md, "Rolling out 23".

-- eventstore_layout: the store's number of shards, one row, written by the
-- first eventstore.Store opened on a new index (EVENT_STORE_SHARDS) and
-- read by every later one, which refuses to open with another number.
CREATE TABLE sluice.eventstore_layout (
    singleton  boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    shards     integer     NOT NULL CHECK (shards BETWEEN 1 AND 1024),
    created_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE sluice.eventstore_layout IS 'event store: the number of shards, fixed when the store is created (one row)';

-- A store that holds anything already is a store of one shard.
INSERT INTO sluice.eventstore_layout (shards)
SELECT 1 WHERE EXISTS (SELECT 1 FROM sluice.appends) OR EXISTS (SELECT 1 FROM sluice.sequences)
            OR EXISTS (SELECT 1 FROM sluice.log_head WHERE next_position > 1);

-- log_head: one row per shard; the single row becomes shard 0's.
ALTER TABLE sluice.log_head ADD COLUMN shard integer NOT NULL DEFAULT 0 CHECK (shard >= 0);
ALTER TABLE sluice.log_head DROP CONSTRAINT log_head_pkey;
ALTER TABLE sluice.log_head DROP COLUMN singleton;
ALTER TABLE sluice.log_head ADD CONSTRAINT log_head_pkey PRIMARY KEY (shard);
COMMENT ON TABLE sluice.log_head IS 'event store: next free position of each shard (one row per shard)';

-- appends: keyed by (shard, position); every existing row is shard 0's.
ALTER TABLE sluice.appends ADD COLUMN shard integer NOT NULL DEFAULT 0 CHECK (shard >= 0);
ALTER TABLE sluice.appends DROP CONSTRAINT appends_pkey;
ALTER TABLE sluice.appends ADD CONSTRAINT appends_pkey PRIMARY KEY (shard, position);
DROP INDEX sluice.appends_uncommitted_idx;
CREATE INDEX appends_uncommitted_idx ON sluice.appends (shard, position) WHERE state <> 'committed';
COMMENT ON TABLE sluice.appends IS 'event store: index from (shard, position) / event_id / (aggregate, sequence, kind) to segment bytes';

-- +goose Down
-- Back to one log of one head: only a store of one shard can go back (a
-- store of more has positions that repeat across shards). The tables take
-- the exact shape of 00013_eventstore.sql again, data kept.
-- +goose StatementBegin
DO $$
DECLARE
    head_next bigint;
BEGIN
    IF EXISTS (SELECT 1 FROM sluice.eventstore_layout WHERE shards > 1)
       OR EXISTS (SELECT 1 FROM sluice.log_head WHERE shard > 0)
       OR EXISTS (SELECT 1 FROM sluice.appends WHERE shard > 0) THEN
        RAISE EXCEPTION 'sluice: the event store has more than one shard; a schema before 23 holds one log only (replay it into a store of one shard: docs/scale-out.md#changing-the-number-of-shards)';
    END IF;
    SELECT next_position INTO head_next FROM sluice.log_head WHERE shard = 0;
    DROP TABLE sluice.log_head;
    CREATE TABLE sluice.log_head (
        singleton     boolean PRIMARY KEY DEFAULT true CHECK (singleton),
        next_position bigint  NOT NULL CHECK (next_position >= 1)
    );
    INSERT INTO sluice.log_head (singleton, next_position) VALUES (true, coalesce(head_next, 1));
END
$$;
-- +goose StatementEnd
COMMENT ON TABLE sluice.log_head IS 'event store: next free global position (one row)';
DROP INDEX sluice.appends_uncommitted_idx;
ALTER TABLE sluice.appends DROP CONSTRAINT appends_pkey;
ALTER TABLE sluice.appends DROP COLUMN shard;
ALTER TABLE sluice.appends ADD CONSTRAINT appends_pkey PRIMARY KEY (position);
CREATE INDEX appends_uncommitted_idx ON sluice.appends (position) WHERE state <> 'committed';
COMMENT ON TABLE sluice.appends IS 'event store: index from position / event_id / (aggregate, sequence, kind) to segment bytes';
DROP TABLE sluice.eventstore_layout;
