package eventstore

import (
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/shared/envelope"
)

// metrics are the store's Prometheus collectors (docs/architecture.md#observability): where a
// group's time goes, how large groups are, and what appends came to. The
// store creates them unregistered; a service registers Collectors() on its
// registry.
type metrics struct {
	stage   *prometheus.HistogramVec // stage: gather, reserve, put, commit
	events  prometheus.Histogram     // accepted envelopes per group
	appends *prometheus.CounterVec   // outcome
	settled prometheus.Counter       // positions released at once after a write that did not happen
	// headWait: per shard, the time a reservation's write statement waited
	// for the shard's head row (its lock), measured in the statement.
	headWait *prometheus.HistogramVec
}

// newMetrics creates the store's collectors with the series of every stage
// and outcome at 0, so that dashboards and alerts see them before the first
// append (issue 23.5).
func newMetrics(shards int) *metrics {
	m := &metrics{
		stage: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_eventstore_stage_duration_seconds",
			Help:    "Time a group commit spends per step: gather (oldest envelope's wait before its group started), reserve (the reservation round trips, flush included), put (the segment's conditional create), commit.",
			Buckets: prometheus.ExponentialBuckets(0.00025, 2, 16)}, []string{"stage"}),
		events: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_eventstore_group_events",
			Help:    "Envelopes reserved per group commit (one segment each).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 10)}),
		appends: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_eventstore_appends_total",
			Help: "Envelopes appended, by outcome: stored, duplicate (idempotent retry), conflict (OCC), invalid, slot (slot rules), mismatch (idempotency mismatch, rejected or answered with the stored event in warn mode), unavailable (object storage unreachable or not answering in time), error."},
			[]string{"outcome"}),
		settled: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_eventstore_released_positions_total",
			Help: "Reserved positions a writer marked abandoned at once because its segment PUT definitely did not happen (the relay passes them without waiting for EVENT_STORE_APPEND_TIMEOUT)."}),
		headWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_eventstore_head_lock_wait_seconds",
			Help:    "Per shard, how long a reservation waited for the shard's head row (log_head) inside its write statement: the row lock wait plus microseconds of the update, measured with the database clock.",
			Buckets: prometheus.ExponentialBuckets(0.00001, 4, 10)}, []string{"shard"}),
	}
	for sh := range shards {
		m.headWait.WithLabelValues(strconv.Itoa(sh))
	}
	for _, st := range []string{"gather", "reserve", "put", "commit"} {
		m.stage.WithLabelValues(st)
	}
	for _, o := range []string{"stored", "duplicate", "conflict", "invalid", "slot", "mismatch", "unavailable", "error"} {
		m.appends.WithLabelValues(o)
	}
	return m
}

// Collectors returns the store's metrics for a service's registry:
// sluice_eventstore_stage_duration_seconds{stage},
// sluice_eventstore_group_events, sluice_eventstore_appends_total{outcome},
// sluice_eventstore_released_positions_total and
// sluice_eventstore_head_lock_wait_seconds{shard}.
func (s *Store) Collectors() []prometheus.Collector {
	return []prometheus.Collector{s.m.stage, s.m.events, s.m.appends, s.m.settled, s.m.headWait}
}

// observeStage adds a group's time in one step to the benchmark's sums and
// to the stage histogram.
func (s *Store) observeStage(sum *atomic.Int64, stage string, d time.Duration) {
	sum.Add(int64(d))
	s.m.stage.WithLabelValues(stage).Observe(d.Seconds())
}

// countResults counts the outcome of each of an Append's results.
func (m *metrics) countResults(rs []Result) {
	for _, r := range rs {
		m.appends.WithLabelValues(outcome(r)).Inc()
	}
}

func outcome(r Result) string {
	var (
		ce *ConflictError
		ve *envelope.ValidationError
		se *SlotError
		me *IdempotencyMismatchError
		ue *UnavailableError
	)
	switch err := r.Err; {
	case err == nil && r.Mismatch != nil: // warn mode returned the stored event
		return "mismatch"
	case err == nil && r.Duplicate:
		return "duplicate"
	case err == nil:
		return "stored"
	case errors.As(err, &ce):
		return "conflict"
	case errors.As(err, &ve):
		return "invalid"
	case errors.As(err, &se):
		return "slot"
	case errors.As(err, &me):
		return "mismatch"
	case errors.As(err, &ue):
		return "unavailable"
	default:
		return "error"
	}
}
