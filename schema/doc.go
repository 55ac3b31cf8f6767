// Package schema is the schema registry of event types (docs/schemas.md):
// a JSON Schema (draft 2020-12) per (event type, version), a compatibility
// mode per type (BACKWARD by default, as Confluent Schema Registry defines
// the modes for JSON Schema), the check a new version must pass, and the
// Validator the API applies at the door: compiled schemas cached per
// (type, version), refreshed when the registry's revision moves, never one
// Postgres round trip per event.
//
// It owns the Postgres objects sluice.event_schemas,
// sluice.event_schema_types and sluice.event_schema_rev
// (docs/architecture.md#table-ownership). Validation is never written here:
// github.com/santhosh-tekuri/jsonschema/v6 compiles and validates; the
// compatibility checker (compat.go) is ours.
package schema
