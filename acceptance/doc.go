// Package acceptance is sluice's operational acceptance suite (issue #10):
// it proves the four guarantees of docs/architecture.md#the-guarantees on the whole pipeline, the way an
// operator sees it. Every scenario runs the real binary (`sluice api`,
// `sluice relay`, `sluice instance-worker`, `sluice projection-worker`, and
// the operator commands `sluice verify`, `sluice relay checkpoint set`,
// `sluice store cat`, `sluice dlq redrive`) as separate processes against a
// real Postgres database, a real MinIO server, an in-process kfake Kafka
// cluster and the in-repo Elasticsearch test server, both embedded in the
// test process so that faults can be injected.
//
// The scenarios and the guarantees they prove:
//
//   - duplicate publish (checkpoint rollback, relay crashes): §0.1 at most
//     one side effect per event_id, §0.2 no lost work;
//   - instance-worker and projection-worker crash points: §0.1, §0.2;
//   - out-of-order delivery on both topics: §0.3 per-aggregate order;
//   - one event_id delivered to two consumers at once: §0.1;
//   - retry, backoff, DLQ after max attempts, operator redrive: §0.4
//     explicit failure, §0.1;
//   - aggregate_id normalisation end to end: §0.1 and §4 (no collisions);
//   - registry (Postgres) outage: §0.4 explicit pause, §0.2;
//   - a late commit on one shard: an API process frozen with SIGSTOP
//     between its reservation and its commit, longer than the relay's
//     lookback (issue #33): §0.2 no lost work, §0.3 per-aggregate order,
//     and the other shards not held up;
//   - the chaos soak (kills, Postgres and MinIO cuts, Kafka faults,
//     Elasticsearch 429/503 under a steady load): all four at once.
//
// Each scenario ends with `sluice verify` plus direct checks of the
// registry rows, the event store index, Elasticsearch versions and write
// counts, the history documents and the DLQ topics. The package holds no
// production code; see docs/acceptance.md for how to run it and `make soak`
// for the long chaos run.
package acceptance
