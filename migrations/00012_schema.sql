-- +goose Up
-- The baseline of sluice's Postgres schema starts here (docs/migrations.md):
-- versions 1 to 11 were the pre-release chain, squashed into 12 to 15, one
-- file per area. Version numbers are never reused, so a number in
-- sluice.schema_migrations always means one thing. Every statement of the
-- baseline is idempotent: on a database that ran the whole pre-release
-- chain it changes only what the chain left behind (superseded functions,
-- comments), and the result is the schema a new database gets
-- (migrations/baseline_test.go proves both).
--
-- Schema sluice holds every table sluice keeps in Postgres
-- (docs/architecture.md#where-state-lives). Go creates it before goose runs,
-- because goose's version table lives in it.
CREATE SCHEMA IF NOT EXISTS sluice;
COMMENT ON SCHEMA sluice IS 'sluice event store index and processed-event registry';

-- +goose Down
-- The schema is dropped only by hand: it holds the index of the event store.
SELECT 1;
