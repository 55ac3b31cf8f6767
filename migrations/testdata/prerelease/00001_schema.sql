-- +goose Up
-- The sluice schema holds every table of the event-store index (SPEC §5.3)
-- and of the processed-event registry (SPEC §7.1). It is created before goose
-- runs (its version table lives in it); this migration records the baseline.
CREATE SCHEMA IF NOT EXISTS sluice;
COMMENT ON SCHEMA sluice IS 'sluice event store index and processed-event registry';

-- +goose Down
-- The schema is dropped only by hand: it holds the index of the event store.
SELECT 1;
