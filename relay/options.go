package relay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore"
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

// Deps are the resources a relay works with. Store, Bucket and Pool are
// required.
type Deps struct {
	// Store is the event store the relay tails.
	Store *eventstore.Store
	// Bucket is the store's bucket; it holds the checkpoint.
	Bucket objstore.Bucket
	// Pool holds the lease table and sluice.relay_parked: the store
	// role's database (EVENT_STORE_DATABASE_URL, docs/scale-out.md).
	Pool *pgxpool.Pool
	// Kafka is the cluster the relay publishes to (the KAFKA_* section:
	// brokers, topic names, partitions/replication for topic bootstrap,
	// TLS, SASL, the size budget). The relay builds its producers from it
	// and Close releases them. A zero MaxMessageBytes is the budget of the
	// default envelope and metadata limits (kafka.Budget); zero
	// partitions or replication factor are the section's default and 1.
	Kafka kafka.Config
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
	// Wake, when set, is an extra wake-up source (MinIO bucket
	// notifications, minioext.ListenSegments).
	Wake <-chan struct{}
}

// Option is a test hook of New.
type Option func(*hooks)

// hooks are the test hooks the Options set.
type hooks struct {
	// kafkaOpts are appended to the producer clients' options.
	kafkaOpts []kgo.Opt
	// ackHook, when set, is called after every flush with the acknowledged
	// event ids (benchmarks).
	ackHook func(ids []string, at time.Time)
	// lingerWait, when set, replaces the wake linger's timer (tests hold
	// the relay in it).
	lingerWait func(ctx context.Context, d time.Duration)
	// released, when set, is called after a rebalancing release cancelled
	// the leaderships of shards (tests hold their batches in flight
	// until then).
	released func(shards []int)
	// hbNow, when set, is the clock of the liveness heartbeats (tests
	// age them without waiting).
	hbNow func() time.Time
	// beforeCycle, when set, is called by a shard's leader before each
	// cycle (tests hold one shard's leader there).
	beforeCycle func(ctx context.Context, shard int)
	// repair, when set, is called when a shard's leader needs a repair
	// (hole rule 3; running false) and when it runs Store.Repair
	// (running true).
	repair func(shard int, running bool)
}

// WithKafkaOpts appends opts to the options of the relay's producer
// clients (tests).
func WithKafkaOpts(opts ...kgo.Opt) Option {
	return func(h *hooks) { h.kafkaOpts = append(h.kafkaOpts, opts...) }
}

// withAckHook calls f after every flush with the acknowledged event ids
// (benchmarks).
func withAckHook(f func(ids []string, at time.Time)) Option {
	return func(h *hooks) { h.ackHook = f }
}

// withLingerWait makes the relay call f instead of sleeping out the wake
// linger (tests).
func withLingerWait(f func(ctx context.Context, d time.Duration)) Option {
	return func(h *hooks) { h.lingerWait = f }
}

// withReleased makes the relay call f with the shards a rebalancing
// release just cancelled (tests).
func withReleased(f func(shards []int)) Option {
	return func(h *hooks) { h.released = f }
}

// withHeartbeatClock makes the liveness heartbeats read the time from now
// (tests).
func withHeartbeatClock(now func() time.Time) Option {
	return func(h *hooks) { h.hbNow = now }
}

// withBeforeCycle makes every shard's leader call f before each cycle
// (tests).
func withBeforeCycle(f func(ctx context.Context, shard int)) Option {
	return func(h *hooks) { h.beforeCycle = f }
}

// withRepairHook makes the leaders call f when they need a repair and when
// they run one (tests).
func withRepairHook(f func(shard int, running bool)) Option {
	return func(h *hooks) { h.repair = f }
}

// withDefaults returns c with every default applied: the defaults of the
// EVENT_PUBLISHER_* tags for what the caller left zero (a zero metrics
// interval stays zero: it turns the log line off, and so does a zero wake
// linger: a cycle per wake-up), Derive, and the
// defaults of the Go-only fields.
func (c Config) withDefaults() (Config, error) {
	config.FillZero(&c, "EVENT_PUBLISHER_METRICS_LOG_INTERVAL_SECONDS", "EVENT_PUBLISHER_WAKE_LINGER")
	c.Derive()
	c.DedupCheckpointMaxEvents = min(c.DedupCheckpointMaxEvents, c.DedupMaxEvents)
	c.CheckpointMaxRecords = max(c.CheckpointMaxRecords, c.KafkaFlushBatchSize)
	if c.StartTimestamp != "" {
		if _, err := time.Parse(time.RFC3339Nano, c.StartTimestamp); err != nil {
			return c, fmt.Errorf("relay: EVENT_PUBLISHER_START_TIMESTAMP %q: %w", c.StartTimestamp, err)
		}
	}
	if c.AppendTimeout <= 0 {
		c.AppendTimeout = eventstore.DefaultConfig().AppendTimeout
	}
	if c.Holder == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = rand.Read(b[:])
		c.Holder = host + "-" + hex.EncodeToString(b[:])
	}
	if c.ObjectStoreTimeout <= 0 {
		c.ObjectStoreTimeout = 10 * time.Second
	}
	if c.MaxWindow <= 0 {
		c.MaxWindow = 100000
	}
	return c, nil
}

// kafkaWithDefaults returns k with the size budget, the topics left unset
// (after the prefix), and partitions and replication factor filled.
func kafkaWithDefaults(k kafka.Config) kafka.Config {
	k.MaxMessageBytes = kafka.Budget(k)
	k.Derive()
	if k.TopicPartitions <= 0 {
		k.TopicPartitions = kafka.DefaultConfig().TopicPartitions
	}
	if k.ReplicationFactor <= 0 {
		k.ReplicationFactor = 1 // a library caller's cluster: one broker, unlike KAFKA_TOPIC_REPLICATION_FACTOR's
	}
	return k
}
