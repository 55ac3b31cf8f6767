-- +goose Up
-- The event store's reservation rules live in Go, once (package
-- eventstore, decide.go; docs/eventstore.md#where-the-rules-live-decision):
-- the one-round-trip reservation function and the slot rules of the
-- baseline (00013_eventstore.sql) restated them, and no build from this
-- one on calls them. Owned by package eventstore.
--
-- Apply it after every process runs such a build: an older one falls back
-- from sluice.eventstore_reserve to its general path by itself, but that
-- path asks sluice.eventstore_slot_refusal about domain events into their
-- commands' slots, and without it those appends fail with an error
-- (nothing is written). docs/migrations.md.
DROP FUNCTION IF EXISTS sluice.eventstore_reserve(text[], text[], text[], text[], int[], boolean[], bigint[], bytea[], timestamptz[], text, boolean[], bigint[], text[]);
DROP FUNCTION IF EXISTS sluice.eventstore_slot_refusal(uuid, text, text);

-- +goose Down
-- The functions are those of 00013_eventstore.sql, whose statements are
-- idempotent: to go back to a build that calls them, apply that file
-- again (psql -f migrations/00013_eventstore.sql).
