// Package inspect provides the operator's view of one command or one
// aggregate across the whole pipeline (issue 24, items 2 and 3; the web
// console and GET /admin/v1/trace/{id} and /admin/v1/aggregates/{type}/{id}
// show it):
//
//   - Trace follows a command_id or event_id through every step with its
//     time: accepted by the API, appended (position, sequence), published by
//     the relay (topic, partition, offset) or parked, each handler's claim,
//     attempts and errors (the registry), the Elasticsearch document's
//     version, and each consumer group's offset commit. A command is traced
//     together with the domain event of its slot.
//   - Aggregate shows the events of one aggregate, each handler's registry
//     rows and sequence-guard state, and the Elasticsearch document beside
//     the last event.
//
// The guarantee it keeps: it only reads, and costs the pipeline nothing on
// its hot path. Postgres tables are read through their owners' exported
// functions (eventstore, registry, relay); Kafka through metadata,
// ListOffsets, OffsetFetch and a fetch of one partition, never joining a
// group nor committing. Nothing records a published record's offset: the
// relay's checkpoint says whether a position was acknowledged, and Trace
// finds the record itself by reading its partition back from the
// record's timestamp (docs/console.md#trace).
package inspect
