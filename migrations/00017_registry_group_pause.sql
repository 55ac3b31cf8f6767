-- +goose Up
-- Operator pause of a worker group (docs/operations.md, "Pausing a worker
-- group"), owned by package registry: one row per consumer group an
-- operator paused or resumed. A group without a row runs. Every worker of
-- the group reads its row every WORKER_PAUSE_POLL_INTERVAL and, while
-- paused is true, stops fetching (it keeps its group membership and its
-- leases). by and reason say who paused it and why; changed_at when.
CREATE TABLE sluice.registry_group_pause (
    group_name text COLLATE "C" PRIMARY KEY,
    paused     boolean     NOT NULL,
    changed_at timestamptz NOT NULL DEFAULT now(),
    by         text        NOT NULL DEFAULT '',
    reason     text        NOT NULL DEFAULT ''
);
COMMENT ON TABLE sluice.registry_group_pause IS 'registry: operator pause flag per consumer group';

-- +goose Down
DROP TABLE sluice.registry_group_pause;
