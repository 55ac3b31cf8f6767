// Package declarative provides projections declared in YAML instead of Go
// (docs/projections.md): each declares the event types it consumes, a
// key, a document id, field updates (set, unset, increment, append,
// merge) with optional conditions, a delete condition, the index mapping
// and a version. Expressions are CEL (google/cel-go), compiled once when
// the file is loaded — a compile error names the file, the YAML line and
// column and the position inside the expression — and evaluated under a
// cost limit, with no I/O and no unbounded loops.
//
// A declarative projection is a projectionworker.Stateful projection, so
// it runs in the projection worker with the same registry claims, guard,
// batching, blue/green rebuild and rollback as the Go projections; a
// changed version in the file starts the rebuild.
//
// # Guarantee kept
//
// At most one effect per event on a document: every document records the
// last sequence it applied per source aggregate (field sluice.applied),
// and an event at or below it changes nothing — so a replay after a crash
// between Elasticsearch's answer and the registry's mark does not count an
// increment twice. A runtime error of an expression fails that event only
// (it goes to the dead-letter topic with the expression and its position).
package declarative
