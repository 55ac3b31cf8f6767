-- +goose Up
-- The upcasters of the schema registry (docs/schemas.md#upcasting-on-read),
-- owned by package schema: one per (event type, from_version), bringing the
-- data of version from_version to from_version + 1 when a reader asks for the
-- latest version. Stored events are never rewritten. spec is the YAML file as
-- given (CEL expressions and examples), source the name it was given under;
-- a change moves the type's rev (event_schema_types), so every API process
-- and projection worker reloads it.
CREATE TABLE sluice.event_schema_upcasters (
    event_type    text        NOT NULL REFERENCES sluice.event_schema_types (event_type),
    from_version  integer     NOT NULL CHECK (from_version >= 1),
    spec          text        NOT NULL,
    source        text        NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (event_type, from_version)
);
COMMENT ON TABLE sluice.event_schema_upcasters IS 'schema: the upcaster of each (event type, version) to the next version, applied on read';

-- +goose Down
DROP TABLE sluice.event_schema_upcasters;
