package relay

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/shared/config"
	"github.com/sluicehq/sluice/shared/crashpoint"
	"github.com/sluicehq/sluice/shared/kafka"
	"github.com/sluicehq/sluice/shared/observability"
)

// TopicRoute overrides the topics of one aggregate type (docs/relay.md#what-it-does-per-cycle: the
// routing table is overridable per aggregate type). An empty field keeps
// the default topic for that kind.
type TopicRoute struct {
	Commands string
	Events   string
}

// Options configure a Relay. Config and Kafka carry the EVENT_PUBLISHER_* and
// KAFKA_* knobs; the rest are Go-only.
type Options struct {
	// Config holds the EVENT_PUBLISHER_* knobs; its zero fields take the
	// defaults of its tags (a zero MetricsLogInterval stays off).
	Config Config
	// Kafka holds brokers, topic names, partitions/replication for topic
	// bootstrap, TLS and SASL.
	Kafka kafka.Config
	// AppendTimeout is EVENT_STORE_APPEND_TIMEOUT: reserved rows younger
	// than this are in flight (wait); older ones are repaired or abandoned.
	// Default: EVENT_STORE_APPEND_TIMEOUT's. It must equal the store's own
	// setting.
	AppendTimeout time.Duration
	// Routes overrides topics per aggregate type.
	Routes map[string]TopicRoute
	// Logger receives the relay's log lines. Default slog.Default().
	Logger *slog.Logger
	// Registerer receives the relay_* metrics. Default: none (metrics are
	// still kept, for the metrics log line).
	Registerer prometheus.Registerer
	// Health receives the readiness check "relay" and the liveness check
	// "relay-loop". Optional.
	Health *observability.Health
	// TracerProvider traces each publish as a producer span continuing the
	// stored event's traceparent, which the record's traceparent header
	// then names (docs/tracing.md). nil or a no-op provider: off.
	TracerProvider trace.TracerProvider
	// Crasher holds the crash points of docs/worker-runtime.md#crash-points (relay after_produce,
	// before_checkpoint). Optional.
	Crasher *crashpoint.Crasher
	// Holder names this replica in the lease table. Default hostname plus
	// a random suffix (unique per process).
	Holder string
	// Wake, when set, is an extra wake-up source (MinIO bucket
	// notifications, minioext.ListenSegments).
	Wake <-chan struct{}
	// KafkaOpts are appended to the producer client's options (tests).
	KafkaOpts []kgo.Opt
	// MaxWindow bounds how far (in positions) the relay publishes past a
	// position the checkpoint cannot pass yet (a young gap). Default 100,000.
	MaxWindow int64
	// SkipTopicBootstrap disables the creation of missing topics at start.
	SkipTopicBootstrap bool
	// CheckpointInterval is the longest time between two checkpoint writes
	// while there is progress to save (the writes run in the background,
	// one at a time). Default Config.CheckpointInterval.
	CheckpointInterval time.Duration
	// CheckpointMaxRecords bounds the records produced since the last
	// durable checkpoint, and with it what a crash re-publishes: at the
	// bound the relay waits for a checkpoint write before producing more.
	// A write starts in the background when half of it was acknowledged.
	// Default Config.CheckpointMaxRecords; values below the
	// flush batch size are raised to it.
	CheckpointMaxRecords int

	// MaxMessageBytes is the one Kafka size budget (kafka.MessageBudget):
	// the producer's largest record batch and the max.message.bytes of the
	// topics the relay creates. Default: the budget of the default
	// envelope and metadata limits, or Kafka.MaxMessageBytes as the
	// process configuration derived it (kafka.Budget).
	MaxMessageBytes int
	// ObjectStoreTimeout bounds every object-storage call of the relay
	// (segment LIST and GET, checkpoint read and write): a store that
	// hangs fails the call, turns readiness red and is retried, instead of
	// blocking the relay silently. Default 10 s.
	ObjectStoreTimeout time.Duration

	// ackHook, when set, is called after every flush with the acknowledged
	// event ids (benchmarks).
	ackHook func(ids []string, at time.Time)
}

// settings are Options with every default applied.
type settings struct {
	Options
	flushBatch     int
	lease          time.Duration
	ckptInterval   time.Duration
	ckptMaxRecords int
}

func (o Options) withDefaults() (settings, error) {
	s := settings{Options: o}
	c := &s.Config
	// The defaults of the EVENT_PUBLISHER_* tags for what the caller left
	// unset, but a zero metrics interval: it turns the log line off.
	config.FillZero(c, "EVENT_PUBLISHER_METRICS_LOG_INTERVAL_SECONDS")
	c.Derive()
	c.DedupCheckpointMaxEvents = min(c.DedupCheckpointMaxEvents, c.DedupMaxEvents)
	s.flushBatch = c.KafkaFlushBatchSize
	s.ckptInterval = s.CheckpointInterval
	if s.ckptInterval <= 0 {
		s.ckptInterval = c.CheckpointInterval
	}
	s.ckptMaxRecords = s.CheckpointMaxRecords
	if s.ckptMaxRecords <= 0 {
		s.ckptMaxRecords = c.CheckpointMaxRecords
	}
	s.ckptMaxRecords = max(s.ckptMaxRecords, s.flushBatch)
	s.lease = c.LeaderLease
	if c.StartTimestamp != "" {
		if _, err := time.Parse(time.RFC3339Nano, c.StartTimestamp); err != nil {
			return s, fmt.Errorf("relay: EVENT_PUBLISHER_START_TIMESTAMP %q: %w", c.StartTimestamp, err)
		}
	}
	if s.AppendTimeout <= 0 {
		s.AppendTimeout = eventstore.DefaultConfig().AppendTimeout
	}
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	if s.Holder == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = rand.Read(b[:])
		s.Holder = host + "-" + hex.EncodeToString(b[:])
	}
	if s.MaxMessageBytes <= 0 {
		s.MaxMessageBytes = kafka.Budget(s.Kafka)
	}
	s.Kafka.MaxMessageBytes = s.MaxMessageBytes
	if s.ObjectStoreTimeout <= 0 {
		s.ObjectStoreTimeout = 10 * time.Second
	}
	if s.MaxWindow <= 0 {
		s.MaxWindow = 100000
	}
	k := &s.Kafka
	k.Derive() // the topics left unset, after the prefix
	if k.TopicPartitions <= 0 {
		k.TopicPartitions = kafka.DefaultConfig().TopicPartitions
	}
	if k.ReplicationFactor <= 0 {
		k.ReplicationFactor = 1 // a library caller's cluster: one broker, unlike KAFKA_TOPIC_REPLICATION_FACTOR's
	}
	return s, nil
}
