-- +goose Up
-- A relay leader per shard (docs/relay.md#shards, issue 33 item 3), owned
-- by package relay. In a store of more than one shard each shard has its
-- own relay lease (sluice.relay_leases, name '<relay>/shard-0003'; a store
-- of one shard keeps the lease named '<relay>'), its own checkpoint object
-- and its own parked records.

-- relay_members: the live replicas of a relay name, one row each, renewed
-- every lease third and expiring after the lease: how many replicas share
-- the shards (each takes about ceil(N/R) of them). Only a count: leadership
-- itself stays with the leases and their epochs.
CREATE TABLE IF NOT EXISTS sluice.relay_members (
    name       text        NOT NULL,
    holder     text        NOT NULL,
    joined_at  timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (name, holder)
);
COMMENT ON TABLE sluice.relay_members IS 'relay: live replicas of a relay name (heartbeat rows with an expiry), for balancing the shard leases';

-- relay_parked: positions are per shard, so a parked row is keyed by
-- (relay, shard, position); every existing row is shard 0's.
ALTER TABLE sluice.relay_parked ADD COLUMN shard integer NOT NULL DEFAULT 0 CHECK (shard >= 0);
ALTER TABLE sluice.relay_parked DROP CONSTRAINT relay_parked_pkey;
ALTER TABLE sluice.relay_parked ADD CONSTRAINT relay_parked_pkey PRIMARY KEY (relay, shard, position);
DROP INDEX IF EXISTS sluice.relay_parked_state;
CREATE INDEX relay_parked_state ON sluice.relay_parked (relay, shard, state, position);

-- +goose Down
-- Back to one relay per name: refused while parked rows of a shard other
-- than 0 exist (they would collide by position); shard leases and member
-- rows are dropped (a build before 24 refuses a store of more shards).
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM sluice.relay_parked WHERE shard > 0) THEN
        RAISE EXCEPTION 'sluice: sluice.relay_parked holds records of shards other than 0; a schema before 24 keys them by position alone (drop or republish them first: sluice relay parked)';
    END IF;
END $$;
-- +goose StatementEnd
DROP INDEX IF EXISTS sluice.relay_parked_state;
ALTER TABLE sluice.relay_parked DROP CONSTRAINT relay_parked_pkey;
ALTER TABLE sluice.relay_parked DROP COLUMN shard;
ALTER TABLE sluice.relay_parked ADD CONSTRAINT relay_parked_pkey PRIMARY KEY (relay, position);
CREATE INDEX IF NOT EXISTS relay_parked_state ON sluice.relay_parked (relay, state, position);
DELETE FROM sluice.relay_leases WHERE name LIKE '%/shard-%';
DROP TABLE IF EXISTS sluice.relay_members;
