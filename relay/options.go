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
	// Config holds the EVENT_PUBLISHER_* knobs.
	Config Config
	// Kafka holds brokers, topic names, partitions/replication for topic
	// bootstrap, TLS and SASL.
	Kafka kafka.Config
	// AppendTimeout is EVENT_STORE_APPEND_TIMEOUT: reserved rows younger
	// than this are in flight (wait); older ones are repaired or abandoned.
	// Default 30 s. It must equal the store's own setting.
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
	// one at a time). Default Config.CheckpointInterval, else 100 ms.
	CheckpointInterval time.Duration
	// CheckpointMaxRecords bounds the records produced since the last
	// durable checkpoint, and with it what a crash re-publishes: at the
	// bound the relay waits for a checkpoint write before producing more.
	// A write starts in the background when half of it was acknowledged.
	// Default Config.CheckpointMaxRecords, else 10,000; values below the
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
	if c.Name == "" {
		c.Name = "default"
	}
	if c.CheckpointKey == "" {
		c.CheckpointKey = "checkpoints/" + c.Name + ".json"
	}
	if c.Lookback <= 0 {
		c.Lookback = 600 * time.Second
	}
	if c.LookbackMaxKeys <= 0 {
		c.LookbackMaxKeys = 50
	}
	if c.DedupMaxEvents <= 0 {
		c.DedupMaxEvents = 10000
	}
	if c.DedupCheckpointMaxEvents <= 0 {
		c.DedupCheckpointMaxEvents = 2000
	}
	c.DedupCheckpointMaxEvents = min(c.DedupCheckpointMaxEvents, c.DedupMaxEvents)
	if c.BatchSize <= 0 {
		c.BatchSize = 200
	}
	s.flushBatch = c.KafkaFlushBatchSize
	if s.flushBatch <= 0 {
		s.flushBatch = c.BatchSize
	}
	s.ckptInterval = s.CheckpointInterval
	if s.ckptInterval <= 0 {
		s.ckptInterval = c.CheckpointInterval
	}
	if s.ckptInterval <= 0 {
		s.ckptInterval = 100 * time.Millisecond
	}
	s.ckptMaxRecords = s.CheckpointMaxRecords
	if s.ckptMaxRecords <= 0 {
		s.ckptMaxRecords = c.CheckpointMaxRecords
	}
	if s.ckptMaxRecords <= 0 {
		s.ckptMaxRecords = 10000
	}
	s.ckptMaxRecords = max(s.ckptMaxRecords, s.flushBatch)
	if c.KafkaFlushTimeout <= 0 {
		c.KafkaFlushTimeout = 10 * time.Second
	}
	if c.PollInterval <= 0 {
		c.PollInterval = time.Second
	}
	if c.LeaderLease <= 0 {
		c.LeaderLease = 10 * time.Second
	}
	s.lease = c.LeaderLease
	if c.ParallelGets <= 0 {
		c.ParallelGets = 8
	}
	if c.StallAfter <= 0 {
		c.StallAfter = 60 * time.Second
	}
	if c.StartTimestamp != "" {
		if _, err := time.Parse(time.RFC3339Nano, c.StartTimestamp); err != nil {
			return s, fmt.Errorf("relay: EVENT_PUBLISHER_START_TIMESTAMP %q: %w", c.StartTimestamp, err)
		}
	}
	if s.AppendTimeout <= 0 {
		s.AppendTimeout = 30 * time.Second
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
	if c.ParkAfterAttempts <= 0 {
		c.ParkAfterAttempts = 3
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
	prefix := k.TopicPrefix
	if k.CommandsTopic == "" {
		k.CommandsTopic = prefix + "commands"
	}
	if k.EventsTopic == "" {
		k.EventsTopic = prefix + "events"
	}
	if k.TopicPartitions <= 0 {
		k.TopicPartitions = 12
	}
	if k.ReplicationFactor <= 0 {
		k.ReplicationFactor = 1
	}
	return s, nil
}
