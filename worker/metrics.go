package worker

import (
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/failure"
)

// metrics are the runtime's collectors; several consumers in one process
// (sluice dev) share them through the handler label.
type metrics struct {
	records *prometheus.CounterVec   // handler, outcome
	stage   *prometheus.HistogramVec // handler, stage
	lag     *prometheus.GaugeVec     // handler, topic, partition
	retries *prometheus.CounterVec   // handler, reason
	dlq     *prometheus.CounterVec   // handler, error_class
	outage  *prometheus.GaugeVec     // handler (the registry's; kept beside depOutage)
	// depOutage is 1 while a dependency is out, by dependency ("registry",
	// "elasticsearch", "objectstore", "postgres", "kafka", "unknown").
	depOutage *prometheus.GaugeVec   // handler, dependency
	panics    *prometheus.CounterVec // handler, call
	dlqPtr    *prometheus.CounterVec // handler, reason
	commits   *prometheus.CounterVec // handler
	paused    *prometheus.GaugeVec   // handler: 1 once an operator pause has taken effect (Quiesced)
	// probes counts the tries of a dependency in outage once its backoff
	// ran out (the rounds that call it again to see whether it is back).
	probes *prometheus.CounterVec // handler, dependency
	// age is, per finished record, the time from its envelope's
	// occurred_at to the end of its handling: for the instance worker,
	// from the API's accept to the instance document written (the
	// request-to-readable latency the console shows); for a projection,
	// from the command's accept to the projection written (a domain event
	// keeps its command's occurred_at).
	age *prometheus.HistogramVec // handler
	// kafkaReqs counts the requests the consumer's Kafka client writes, by
	// request (Fetch, OffsetCommit, Heartbeat, Produce for dead letters…):
	// the Kafka side of the work per record (kafkaRequests).
	kafkaReqs *prometheus.CounterVec // handler, request
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		records: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_worker_records_total",
			Help: "Records finished by the worker runtime, by outcome (applied, rejected, conflict, ignored, duplicate, stale, dead, parse_error)."},
			[]string{"handler", "outcome"}),
		stage: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_worker_stage_duration_seconds",
			Help:    "Latency of the runtime's stages (claim, handle, mark_done, dlq, commit, end_to_end).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, []string{"handler", "stage"}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_worker_consumer_lag",
			Help: "High watermark minus committed offset, per partition."}, []string{"handler", "topic", "partition"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_worker_retries_total",
			Help: "Records put back for a later attempt, by reason (failed, wait, in_progress, retry_later, outage, lease_lost, dlq_produce)."},
			[]string{"handler", "reason"}),
		dlq: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_worker_dlq_records_total",
			Help: "Dead-letter records produced and acknowledged, by error class."}, []string{"handler", "error_class"}),
		outage: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_worker_registry_outage",
			Help: "1 while the registry is unreachable and consumption is paused."}, []string{"handler"}),
		depOutage: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_worker_dependency_outage",
			Help: "1 while a dependency (registry, elasticsearch, objectstore, postgres, kafka, unknown) is unavailable and the handler's work is paused."},
			[]string{"handler", "dependency"}),
		panics: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_worker_handler_panics_total",
			Help: "Handler calls that panicked and were recovered, by call (handle, handle_batch, heal)."}, []string{"handler", "call"}),
		dlqPtr: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_worker_dlq_truncated_total",
			Help: "Dead letters written in pointer form (the original value left out), by reason (size, too_large)."}, []string{"handler", "reason"}),
		commits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_worker_offset_commits_total",
			Help: "Offset commits made."}, []string{"handler"}),
		paused: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_worker_paused",
			Help: "1 once an operator pause of the worker's consumer group (sluice consumer pause) has taken effect: fetching is paused and every record fetched before is finished and committed, so nothing is handled until the resume."}, []string{"handler"}),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_worker_outage_probes_total",
			Help: "Tries of a dependency in outage (registry, elasticsearch, objectstore, postgres, kafka, unknown) after its backoff ran out: the rounds that call it again to see whether it is back. It grows while an outage lasts."},
			[]string{"handler", "dependency"}),
		age: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_worker_event_age_seconds",
			Help:    "Time from a finished record's occurred_at (the API's accept of its command) to the end of its handling: request to readable.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 20)}, []string{"handler"}),
		kafkaReqs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_worker_kafka_requests_total",
			Help: "Requests written to Kafka by the worker's client, by request (Fetch, OffsetCommit, Heartbeat, Produce of dead letters, …): with sluice_worker_records_total, the Kafka round trips per record."},
			[]string{"handler", "request"}),
	}
	m.records = register(reg, m.records)
	m.stage = register(reg, m.stage)
	m.lag = register(reg, m.lag)
	m.retries = register(reg, m.retries)
	m.dlq = register(reg, m.dlq)
	m.outage = register(reg, m.outage)
	m.commits = register(reg, m.commits)
	m.depOutage = register(reg, m.depOutage)
	m.panics = register(reg, m.panics)
	m.dlqPtr = register(reg, m.dlqPtr)
	m.paused = register(reg, m.paused)
	m.probes = register(reg, m.probes)
	m.age = register(reg, m.age)
	m.kafkaReqs = register(reg, m.kafkaReqs)
	return m
}

// zero creates, at 0, the handler's series whose label values are known at
// start (the outcomes, retry reasons, error classes, dependencies, panic
// calls, truncation reasons and stages named in the metrics' Help), so that
// dashboards and rate()/increase() alerts see every series before its first
// event. Only the lag's partitions are unknown until assignment.
func (m *metrics) zero(handler string) {
	m.paused.WithLabelValues(handler).Set(0)
	for _, v := range []string{string(claim.OutcomeApplied), string(claim.OutcomeRejected), string(claim.OutcomeConflict),
		string(claim.OutcomeIgnored), "duplicate", string(claim.OutcomeStale), "dead", "parse_error"} {
		m.records.WithLabelValues(handler, v)
	}
	for _, v := range []string{"failed", "wait", "in_progress", "retry_later", "outage", "lease_lost", "claim_error",
		"batch_invalid", "batch_aborted", "dlq_produce", "dlq_too_large"} {
		m.retries.WithLabelValues(handler, v)
	}
	for _, v := range []string{ClassParse, ClassPermanent, ClassRetryable} {
		m.dlq.WithLabelValues(handler, v)
	}
	m.outage.WithLabelValues(handler)
	for _, v := range []string{DependencyRegistry, failure.Elasticsearch, failure.ObjectStore, failure.Postgres, failure.Kafka, dependencyUnknown} {
		m.depOutage.WithLabelValues(handler, v)
		m.probes.WithLabelValues(handler, v)
	}
	for _, v := range []string{"handle", "handle_batch", "heal"} {
		m.panics.WithLabelValues(handler, v)
	}
	for _, v := range []string{truncSize, truncTooLarge} {
		m.dlqPtr.WithLabelValues(handler, v)
	}
	for _, v := range []string{"claim", "handle", "mark_done", "dlq", "commit", "end_to_end"} {
		m.stage.WithLabelValues(handler, v)
	}
	m.commits.WithLabelValues(handler)
	m.age.WithLabelValues(handler)
	for _, k := range []kmsg.Key{kmsg.Fetch, kmsg.OffsetCommit} {
		m.kafkaReqs.WithLabelValues(handler, k.Name())
	}
}

// kafkaRequests is the consumer client's hook that counts the requests it
// writes (metrics.kafkaReqs), one counter per request key, looked up once.
type kafkaRequests struct {
	vec     *prometheus.CounterVec
	handler string
	mu      sync.Mutex
	byKey   map[int16]prometheus.Counter
}

var _ kgo.HookBrokerWrite = (*kafkaRequests)(nil)

// OnBrokerWrite counts one request written (or failed to be written: it
// was still sent for).
func (k *kafkaRequests) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, _ error) {
	k.mu.Lock()
	c, ok := k.byKey[key]
	if !ok {
		c = k.vec.WithLabelValues(k.handler, kmsg.NameForKey(key))
		k.byKey[key] = c
	}
	k.mu.Unlock()
	c.Inc()
}

// register registers c, or returns the collector already registered under
// the same name (a second consumer in the same process).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
	}
	return c
}
