// Package projectionworker provides sluice's projection worker (docs/projectionworker.md): the
// projection model (a named, versioned Go value that turns domain events into
// Elasticsearch bulk operations), the built-in projections `instances` and
// `history`, the batched bulk writer, the worker service that runs
// projections on the shared worker runtime (worker), and the
// blue/green rebuild, rollback and status operations, with the plans their
// dry runs print (PlanRebuild, PlanRollback), behind `sluice projection …`
// and the admin API.
//
// The guarantees it keeps (docs/architecture.md#the-guarantees):
//
//   - §0.1 at most one side effect per event_id: every write runs under a
//     registry claim (handler projection:{name}:v{version}, skip-stale) and is
//     idempotent in Elasticsearch itself — current-state documents carry
//     version = sequence_number with version_type = external, history
//     documents use _id = event_id with op_type = create — so a re-run after a
//     crash answers 409 ("already applied") and changes nothing.
//   - §0.2 no lost work: a record's Handle returns only after Elasticsearch
//     acknowledged every bulk item of the event; the runtime marks it done and
//     commits its offset only afterwards, so a partial bulk failure never
//     commits past the failed record.
//   - §0.3 per-aggregate order: external versions make a stale event a 409
//     that is counted (sluice_projection_conflicts_total) and never applied;
//     deletes are versioned tombstones, so a late older event cannot
//     resurrect a deleted document.
//   - §0.4 explicit failure: mapping errors dead-letter that event only; an
//     Elasticsearch outage (the bulk request fails as a whole) pauses the
//     worker, turns readiness red and resumes by itself.
//
// docs/projectionworker.md is the operator guide.
package projectionworker
