-- +goose Up
-- The claim keeps probing the primary keys as the tables grow.
--
-- sluice.registry_claim_batch (migrations 00005, 00007) is planned once per
-- session (SET plan_cache_mode = force_generic_plan). A worker's pool
-- connects at start-up, when a new deployment's processed_events and
-- aggregate_versions are empty, so those plans joined the batch with a
-- sequential scan of each table, and kept doing so as the tables grew,
-- until an ANALYZE happened to invalidate them (autovacuum's first one
-- comes after 50 rows plus 10% of the table, and a minute's nap). Measured
-- in the pipeline benchmark (docs/benchmarks.md, 2026-11-24): 595 claims
-- and 1,463 mark-done batches in 20 s scanned the tables whole, ≈ 18 s of
-- Postgres CPU, growing with every second of the run.
--
-- With sequential scans off, the plans left probe the primary keys for
-- each input row, which is right at any table size, and they are still
-- made once per session. (Planning every call would see the growth too,
-- but costs ≈ 0.3 ms per batch.) Joins between the function's CTEs are
-- not table scans and keep their methods; the general path of a batch of
-- more than 100 is still planned per call for its size. The body is
-- unchanged. Mark done and heartbeat, sent by the Go code, run with the
-- same setting (registry/mark.go, probeQuery).
--
-- A later CREATE OR REPLACE FUNCTION of registry_claim_batch drops the
-- function's settings: it must state enable_seqscan = off (and
-- plan_cache_mode = force_generic_plan) again.
ALTER FUNCTION sluice.registry_claim_batch(text[], text[], text[], bigint[], boolean[], uuid[], text, uuid, bigint)
    SET enable_seqscan = off;

-- +goose Down
ALTER FUNCTION sluice.registry_claim_batch(text[], text[], text[], bigint[], boolean[], uuid[], text, uuid, bigint)
    RESET enable_seqscan;
