package relay

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/shared/failure"
)

// metrics are the relay's collectors (docs/architecture.md#observability), labelled with the relay
// name and the shard its leader publishes (one set per shard; "0" for a
// store of one shard). Every name carries the sluice_ prefix, and every labelled series
// whose label values are known at start exists at 0 from newMetrics on, so
// that dashboards and rate()/increase() alerts see a series before its
// first event.
type metrics struct {
	published    *prometheus.CounterVec // topic
	late         prometheus.Counter
	dedupSkipped prometheus.Counter
	gaps         *prometheus.CounterVec // resolution
	plans        *prometheus.CounterVec // how a cycle found its segments
	notes        *prometheus.CounterVec // commit-stream notifications by kind
	produceErrs  prometheus.Counter
	fenced       prometheus.Counter
	flush        prometheus.Histogram
	lag          prometheus.Gauge
	head         prometheus.Gauge
	checkpoint   prometheus.Gauge
	pendingGaps  prometheus.Gauge
	held         prometheus.Gauge
	leader       prometheus.Gauge
	parkedTotal  *prometheus.CounterVec // reason
	parked       prometheus.Gauge
	objErrs      *prometheus.CounterVec // op, class
	objStalled   prometheus.Gauge
}

// newMetrics creates the relay's collectors, registers them on reg (when
// not nil) and creates, at 0, the series of every known label value: the
// topics the relay publishes to (topics), the gap resolutions, cycle plans,
// notification kinds, park reasons and object-store operations and failure
// classes.
func newMetrics(reg prometheus.Registerer, name, shard string, topics []string) *metrics {
	cl := prometheus.Labels{"relay": name, "shard": shard}
	m := &metrics{
		published: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_relay_published_total", ConstLabels: cl,
			Help: "Records published and acknowledged by Kafka, by topic (late publications included)."}, []string{"topic"}),
		late: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_relay_late_published_total", ConstLabels: cl,
			Help: "Events of a pending (abandoned) gap published late because their writer committed them within the lookback."}),
		dedupSkipped: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_relay_dedup_skipped_total", ConstLabels: cl,
			Help: "Events not re-published because their id is in the recent-id set (already acknowledged)."}),
		gaps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_relay_gap_resolutions_total", ConstLabels: cl,
			Help: "Positions resolved by the relay's hole and gap rules (docs/relay.md), by resolution (committed_direct, repaired_committed, abandoned, no_index_row, expired, late_published)."},
			[]string{"resolution"}),
		plans: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_relay_cycles_total", ConstLabels: cl,
			Help: "Publishing cycles by how they found their segments: list (LIST after the checkpoint), index (every position up to the head committed or in flight: GET by the index's keys, no LIST), hint (commit notifications that continue the checkpoint: their segments, without the head and index queries) or idle (nothing committed past the checkpoint, last LIST less than a poll interval ago)."},
			[]string{"plan"}),
		notes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_relay_notifications_total", ConstLabels: cl,
			Help: "Notifications taken from the event store's commit stream, by kind: committed (a block readable: a wake-up and a hint), reserved (ignored), abandoned, resync (the stream reconnected or dropped notifications; the next cycle reads the head)."},
			[]string{"kind"}),
		produceErrs: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_relay_produce_errors_total", ConstLabels: cl,
			Help: "Records Kafka did not acknowledge (they are produced again; the checkpoint does not pass them)."}),
		fenced: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_relay_fenced_total", ConstLabels: cl,
			Help: "Times this relay found a newer epoch in the checkpoint or lost its lease and stopped publishing."}),
		flush: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_relay_flush_seconds", ConstLabels: cl,
			Help: "Time from the flush call to Kafka's acknowledgement of every record of a batch.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}),
		lag: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_relay_lag", ConstLabels: cl,
			Help: "Event-store head position minus the checkpoint position."}),
		head: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_relay_head_position", ConstLabels: cl,
			Help: "Highest committed position of the event store, as last seen."}),
		checkpoint: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_relay_checkpoint_position", ConstLabels: cl,
			Help: "Position of the durable checkpoint."}),
		pendingGaps: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_relay_pending_gaps", ConstLabels: cl,
			Help: "Abandoned ranges in the checkpoint still re-checked within the lookback."}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_relay_held_events", ConstLabels: cl,
			Help: "Events held back in the last cycle because a young reservation names their aggregate."}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_relay_leader", ConstLabels: cl,
			Help: "1 while this replica holds the leader lease and publishes."}),
		parkedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_relay_parked_total", ConstLabels: cl,
			Help: "Records Kafka refused for a reason of their own, parked in sluice.relay_parked after EVENT_PUBLISHER_PARK_AFTER_ATTEMPTS attempts, by reason (too_large, invalid_topic, topic_collision, rejected)."},
			[]string{"reason"}),
		parked: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_relay_parked_records", ConstLabels: cl,
			Help: "Rows of sluice.relay_parked in state parked (waiting for `sluice relay parked republish|drop`)."}),
		objErrs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_relay_objectstore_errors_total", ConstLabels: cl,
			Help: "Object-storage calls of the relay that failed, by operation (list, get, checkpoint) and class (outage: timeout, refused, 5xx; permanent; unknown). A call that hangs fails after the object-store timeout and counts as an outage."},
			[]string{"op", "class"}),
		objStalled: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_relay_objectstore_stalled", ConstLabels: cl,
			Help: "1 while object storage is unavailable to the relay: a call outstanding for longer than the object-store timeout, or the last call failed as an outage (readiness is red meanwhile)."}),
	}
	for _, t := range topics {
		m.published.WithLabelValues(t)
	}
	for _, v := range []string{"committed_direct", "repaired_committed", "abandoned", "no_index_row", "expired", "late_published", "moved"} {
		m.gaps.WithLabelValues(v)
	}
	for _, v := range []string{"list", "index", "hint", "idle"} {
		m.plans.WithLabelValues(v)
	}
	for _, v := range []string{"committed", "reserved", "abandoned", "resync"} {
		m.notes.WithLabelValues(v)
	}
	for _, v := range []string{ReasonTooLarge, ReasonInvalidTopic, ReasonTopicCollision, ReasonRejected} {
		m.parkedTotal.WithLabelValues(v)
	}
	for _, op := range []string{"list", "get", "checkpoint"} {
		for _, class := range []failure.Class{failure.Outage, failure.Permanent, failure.Unknown} {
			m.objErrs.WithLabelValues(op, class.String())
		}
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.published, m.late, m.dedupSkipped, m.gaps, m.plans, m.notes, m.produceErrs, m.fenced,
			m.flush, m.lag, m.head, m.checkpoint, m.pendingGaps, m.held, m.leader, m.parkedTotal, m.parked, m.objErrs, m.objStalled} {
			// A second relay of the same name in one process (tests)
			// keeps its own collectors unregistered; the shards of one
			// relay differ by their shard label.
			_ = reg.Register(c)
		}
	}
	return m
}

// value reads a counter or gauge (for the metrics log line and tests).
func value(c prometheus.Metric) float64 {
	var d dto.Metric
	if err := c.Write(&d); err != nil {
		return 0
	}
	switch {
	case d.Counter != nil:
		return d.Counter.GetValue()
	case d.Gauge != nil:
		return d.Gauge.GetValue()
	}
	return 0
}

// sumVec sums every child of a counter vector.
func sumVec(v *prometheus.CounterVec) float64 {
	ch := make(chan prometheus.Metric, 64)
	go func() { v.Collect(ch); close(ch) }()
	var s float64
	for m := range ch {
		s += value(m)
	}
	return s
}
