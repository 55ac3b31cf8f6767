// Package eventstore provides sluice's event store (docs/eventstore.md): a segment log
// on object storage (S3/MinIO or a local directory, through objstore.Bucket)
// indexed in Postgres (schema sluice: log_head, sequences, appends).
//
// It provides
//   - group-commit Append: concurrent callers' envelopes are gathered into
//     groups; each group costs one reservation transaction (per-aggregate
//     sequences with optimistic concurrency, a contiguous block of global
//     positions, appends rows in state reserved, NOTIFY), one conditional
//     create of an immutable JSON Lines segment, and one commit transaction;
//   - idempotency by event_id (a retried append returns the stored envelope)
//     and the write-side slot rule: commands and domain events share one
//     sequence per aggregate, and the domain event of command k goes into
//     slot k. These rules, optimistic concurrency and atomic batches are
//     written once, as the pure decide step of the reservation (lookup or
//     assumed facts, decide, write; docs/eventstore.md#the-reservation-lookup-decide-write);
//   - reads: an aggregate's stream, one event by id, a command by slot, the
//     head position, the segment listing and whole segments (for the relay);
//   - recovery: Repair resolves reservations whose writer crashed, Reindex
//     rebuilds every table from the segments alone;
//   - shards (docs/eventstore.md#shards): a log of N shards, fixed when the
//     store is created (EVENT_STORE_SHARDS, default 1, the layout from
//     before shards); an aggregate lives in ShardOf its key, each shard has
//     its own head and positions, and a group over many shards is still one
//     reservation statement and one segment. Readers by one global position
//     refuse N > 1 (ShardsNotSupportedError) until they are per shard.
//
// # Guarantee kept
//
// No lost work (docs/architecture.md#no-lost-work): Append acknowledges an envelope only after its
// line is durable in a segment (conditional create returned) and its index
// row is committed. Every failure between reservation and commit leaves
// evidence — a reserved row naming the segment key it expects — that Repair
// (and the relay) resolve: the segment exists → the rows are committed; it
// never appeared → they are marked abandoned, visibly. Abandoned is final:
// the relay may have passed the position for good, so a late writer or a
// retry of the same event_id reserves the envelope afresh, at a new
// position, and it is published in order. Nothing is dropped silently, and
// the segments alone suffice to rebuild the index.
//
// See docs/eventstore.md for the layout, the protocol, crash cases and knobs.
package eventstore
