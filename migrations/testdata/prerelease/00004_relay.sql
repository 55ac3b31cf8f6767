-- +goose Up
-- Relay leader lease (SPEC §6.2). Several relay replicas may run; the one
-- holding the unexpired lease row of its relay name publishes, the others
-- stand by. epoch grows by one at every change of holder and is written into
-- the checkpoint object (relay_epoch): a relay that finds a checkpoint with a
-- newer epoch than its own has been fenced and stops publishing. All times
-- come from the database clock.
CREATE TABLE sluice.relay_leases (
    name        text        PRIMARY KEY,
    holder      text        NOT NULL,
    epoch       bigint      NOT NULL CHECK (epoch >= 1),
    acquired_at timestamptz NOT NULL DEFAULT now(),
    renewed_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);

COMMENT ON TABLE sluice.relay_leases IS 'relay: leader lease per relay name, with a fencing epoch';

-- +goose Down
DROP TABLE IF EXISTS sluice.relay_leases;
