// Package relay provides sluice's store-to-Kafka publisher (docs/relay.md): it
// tails the event store's segment log (LIST after the checkpoint, parallel
// whole-segment GETs), publishes every envelope line byte for byte as one
// Kafka record in position order (idempotent producer, acks=all, topic
// routing, key per docs/architecture.md#aggregate-identity, headers), and records its progress in a fenced
// checkpoint object (checkpoints/{name}.json, conditional PUT with If-Match).
//
// # Guarantee kept
//
// No lost work (docs/architecture.md#no-lost-work): the checkpoint advances only over the contiguous
// prefix of positions whose records Kafka acknowledged, that were parked
// durably in sluice.relay_parked, or that the index resolved as abandoned — and an abandoned range is remembered in
// pending_gaps and re-checked for the bounded lookback, so a late writer's
// events are still published (late, counted). A reservation whose writer is
// still in flight holds back only the aggregates its rows name; everything
// else keeps flowing, while the checkpoint waits for the gap to resolve.
// Every resolution of a gap is a metric and a log line; nothing is skipped
// silently. Delivery is at least once: a crash between a Kafka
// acknowledgement and the checkpoint write re-publishes at most that last
// unsaved flush batch.
//
// Never wedged by one record: a record Kafka refuses for a reason of its
// own (too large, a topic it will not create) is retried a bounded number
// of times and then parked with its reason — written to Postgres before the
// checkpoint may pass it, counted, logged — and publishing goes on;
// `sluice relay parked` republishes or drops it. Outages (shared/failure)
// are never parked: they pause the relay, readiness red, until they end.
// The producer and the topics it creates share one size budget derived
// from the store's envelope limit (kafka.MessageBudget), so a stored
// envelope is producible unless a broker's own limit is lower.
//
// # High availability
//
// Several replicas may run. One holds the leader lease (a row in
// sluice.relay_leases with a fencing epoch); the others stand by and take
// over when the lease expires (a graceful stop releases it at once). The
// leader writes its epoch into the checkpoint; a relay that finds a newer
// epoch there has been fenced and stops publishing.
//
// See docs/relay.md for operations: checkpoint, gaps, lookback, HA and the
// runbooks of `sluice relay gaps`, `sluice relay checkpoint set`,
// `sluice relay republish` and `sluice relay parked`.
package relay
