-- +goose Up
-- The claim is planned for the tables as they are at each call, not as they
-- were when the session first called it.
--
-- sluice.registry_claim_batch (migrations 00005, 00007) was declared with
-- SET plan_cache_mode = force_generic_plan: each session planned its
-- statements once, at its first call. A worker's pool connects at start-up,
-- when a new deployment's processed_events and aggregate_versions are empty,
-- so those plans joined the batch with a sequential scan of each table, and
-- kept doing so as the tables grew, until an ANALYZE happened to invalidate
-- them (autovacuum's first one comes after 50 rows plus 10% of the table,
-- and a minute's nap). Measured in the pipeline benchmark (docs/benchmarks.md,
-- 2026-11-24): 595 claims in 20 s scanned aggregate_versions whole, and the
-- Postgres CPU of the registry's statements grew with every second of the
-- run.
--
-- A custom plan per call sees the tables' current size (the planner reads
-- the relation's length at planning time) and probes the primary keys once
-- they are larger than a few pages. It costs a fraction of a millisecond
-- per batch, not per event. The body is unchanged; the general path's
-- "IF v_n > 100 THEN force_custom_plan" becomes a no-op.
ALTER FUNCTION sluice.registry_claim_batch(text[], text[], text[], bigint[], boolean[], uuid[], text, uuid, bigint)
    SET plan_cache_mode = force_custom_plan;

-- +goose Down
ALTER FUNCTION sluice.registry_claim_batch(text[], text[], text[], bigint[], boolean[], uuid[], text, uuid, bigint)
    SET plan_cache_mode = force_generic_plan;
