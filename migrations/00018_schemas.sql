-- +goose Up
-- The schema registry of event types (docs/schemas.md), owned by package
-- schema. event_schema_types holds a type's compatibility mode and the last
-- version it ever had (versions are never reused, even after a delete);
-- event_schemas holds each version's JSON Schema as registered (text, byte
-- for byte). rev moves on every change (from event_schema_rev), so an API
-- process knows with one cheap query whether its cache is current.
CREATE SEQUENCE sluice.event_schema_rev;
CREATE TABLE sluice.event_schema_types (
    event_type     text        PRIMARY KEY,
    compatibility  text        NOT NULL DEFAULT 'BACKWARD' CHECK (compatibility IN
                   ('BACKWARD', 'BACKWARD_TRANSITIVE', 'FORWARD', 'FORWARD_TRANSITIVE', 'FULL', 'FULL_TRANSITIVE', 'NONE')),
    last_version   integer     NOT NULL DEFAULT 0,
    rev            bigint      NOT NULL DEFAULT nextval('sluice.event_schema_rev'),
    updated_at     timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE sluice.event_schemas (
    event_type   text        NOT NULL REFERENCES sluice.event_schema_types (event_type),
    version      integer     NOT NULL CHECK (version >= 1),
    schema       text        NOT NULL,
    fingerprint  text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (event_type, version)
);
COMMENT ON TABLE sluice.event_schema_types IS 'schema: compatibility mode and version counter per event type';
COMMENT ON TABLE sluice.event_schemas IS 'schema: the JSON Schema of each (event type, version)';

-- +goose Down
DROP TABLE sluice.event_schemas;
DROP TABLE sluice.event_schema_types;
DROP SEQUENCE sluice.event_schema_rev;
