// Package worker provides sluice's Kafka worker runtime (docs/worker-runtime.md), shared by
// the instance worker and the projection workers: a franz-go consumer group
// with manual commits and read_committed isolation that runs every record
// through parse → registry claim → handler side effect → mark_done → offset
// commit, in that order. Parse reads either Kafka record format, detected
// per record (shared/recordformat, docs/kafka.md), so a topic may hold both.
//
// The guarantees it keeps (docs/architecture.md#the-guarantees):
//
//   - §0.1 at most one side effect per event_id: no handler runs without a
//     CLAIMED registry lease (kept alive by Registry.Hold, whose loss cancels
//     the handler's context); duplicates, stale events and dead events are
//     acknowledged without running the handler.
//   - §0.2 no lost work ("commit last"): a partition's offset is committed
//     only up to the highest contiguous record that is finished — registry
//     row done (or skipped, or dead with its DLQ record acknowledged by
//     Kafka). Rebalances are blocked while a batch is in flight
//     (BlockRebalanceOnPoll) and OnPartitionsRevoked commits only the done
//     prefix, so in-flight work is never committed.
//   - §0.3 per-aggregate order: records of one aggregate run one at a time in
//     offset order; records of different aggregates run concurrently, bounded
//     by Config.Concurrency. A record the registry answers WAIT (a missing
//     predecessor) does not block the records behind it, so a predecessor
//     that arrives later on the topic can run and unblock it.
//   - §0.4 explicit failure: parse errors and exhausted or permanent failures
//     go to the dead-letter topic with the record shape of docs/worker-runtime.md#the-dead-letter-record before the
//     offset moves; a dead letter too large to embed its original is written
//     in pointer form instead of blocking its partition. An outage of a
//     dependency — the registry (registry.ErrUnavailable) or one the handler
//     reports (OutageError, or an error failure.Classify calls an outage) —
//     pauses consumption without spending an attempt: no DLQ, no commit past
//     it, the claim kept and heartbeated; readiness names the dependency and
//     turns red, and the runtime resumes by itself. A panicking handler call
//     is recovered into a retryable error; the process never crash-loops.
//
// Handlers classify their failures with Retryable, Permanent, ConflictErr
// and Outage (errors.As-friendly types); unclassified errors are retried
// (or paused on, when failure.Classify calls them an outage).
// docs/failures.md is the table of dependency failures.
// docs/worker-runtime.md is the operator guide.
package worker
