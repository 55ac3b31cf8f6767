-- +goose Up
-- Shards over several Postgres servers (docs/scale-out.md#shards-over-several-servers),
-- owned by package eventstore. With EVENT_STORE_SHARD_MAP each server of
-- the store role holds some of the store's shards; the first
-- eventstore.Store opened on a server records which, and every later one
-- refuses to open with a map that gives the server other shards. NULL:
-- the server holds every shard (a store without a map, as before).
-- Instant on any store: a nullable column without a default.
ALTER TABLE sluice.eventstore_layout ADD COLUMN held integer[]
    CHECK (held IS NULL OR (cardinality(held) >= 1 AND 0 <= ALL (held)));
COMMENT ON COLUMN sluice.eventstore_layout.held IS 'event store: the shards this server holds (EVENT_STORE_SHARD_MAP); NULL: every shard';

-- +goose Down
-- Only a server that holds every shard of its store can go back: the
-- schema before 25 cannot say that a server holds some shards only.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM sluice.eventstore_layout WHERE held IS NOT NULL) THEN
        RAISE EXCEPTION 'sluice: this server holds some shards of a store spread over several servers (EVENT_STORE_SHARD_MAP); a schema before 25 cannot record that (docs/scale-out.md#shards-over-several-servers)';
    END IF;
END
$$;
-- +goose StatementEnd
ALTER TABLE sluice.eventstore_layout DROP COLUMN held;
