-- +goose Up
-- The relay's tables (docs/relay.md). Baseline: see 00012_schema.sql.

-- Leader lease (docs/relay.md#high-availability). Several relay replicas may
-- run; the one holding the unexpired lease row of its relay name publishes,
-- the others stand by. epoch grows by one at every change of holder and is
-- written into the checkpoint object (relay_epoch): a relay that finds a
-- checkpoint with a newer epoch than its own has been fenced and stops
-- publishing. All times come from the database clock.
CREATE TABLE IF NOT EXISTS sluice.relay_leases (
    name        text        PRIMARY KEY,
    holder      text        NOT NULL,
    epoch       bigint      NOT NULL CHECK (epoch >= 1),
    acquired_at timestamptz NOT NULL DEFAULT now(),
    renewed_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);
COMMENT ON TABLE sluice.relay_leases IS 'relay: leader lease per relay name, with a fencing epoch';

-- Records the relay could not publish (docs/relay.md#parked-records).
-- A record that Kafka refuses for a reason of its own (too large for the
-- broker, a topic the broker will not create) is retried a bounded number of
-- times (EVENT_PUBLISHER_PARK_AFTER_ATTEMPTS) and then parked here, durably,
-- before the checkpoint passes its position: the relay moves on and nothing
-- is lost. One row per relay name and position: parking is idempotent (a
-- relay that crashed between the park and its checkpoint write finds the row
-- and skips the position). The row holds the record itself (key, headers,
-- the envelope line byte for byte), so it can be republished even after the
-- segment is gone; segment_key names where the line is stored.
-- state: parked (waiting for an operator), republished (`sluice relay
-- parked republish` produced it), dropped (`sluice relay parked drop`).
CREATE TABLE IF NOT EXISTS sluice.relay_parked (
    relay        text        NOT NULL,
    position     bigint      NOT NULL CHECK (position >= 1),
    event_id     text        NOT NULL,
    topic        text        NOT NULL,
    key          bytea       NOT NULL,
    headers      jsonb       NOT NULL DEFAULT '[]',
    envelope     bytea       NOT NULL,
    segment_key  text        NOT NULL DEFAULT '',
    reason       text        NOT NULL CHECK (reason IN ('too_large', 'invalid_topic', 'topic_collision', 'rejected')),
    error        text        NOT NULL,
    attempts     integer     NOT NULL CHECK (attempts >= 1),
    parked_at    timestamptz NOT NULL DEFAULT now(),
    state        text        NOT NULL DEFAULT 'parked' CHECK (state IN ('parked', 'republished', 'dropped')),
    resolved_at  timestamptz,
    resolved_topic text,
    PRIMARY KEY (relay, position)
);
CREATE INDEX IF NOT EXISTS relay_parked_state ON sluice.relay_parked (relay, state, position);
COMMENT ON TABLE sluice.relay_parked IS 'relay: records Kafka refused for a reason of their own, parked after bounded retries';

-- +goose Down
DROP TABLE IF EXISTS sluice.relay_parked;
DROP TABLE IF EXISTS sluice.relay_leases;
