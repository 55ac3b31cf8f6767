package relay

import (
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/shared/config"
)

// Config configures the store-to-Kafka publisher (docs/relay.md; seed names kept).
type Config struct {
	Name                     string        `env:"EVENT_PUBLISHER_NAME" envDefault:"default" doc:"Relay name; the checkpoint object is checkpoints/{name}.json unless EVENT_PUBLISHER_CHECKPOINT_KEY is set."`
	CheckpointKey            string        `env:"EVENT_PUBLISHER_CHECKPOINT_KEY" doc:"Object key of the checkpoint (default checkpoints/{EVENT_PUBLISHER_NAME}.json); over a store of more than one shard each shard's is the key without .json, then /shard-NNNN.json."`
	StartPosition            int64         `env:"EVENT_PUBLISHER_START_POSITION" envDefault:"0" doc:"Position a new checkpoint starts after (0 = the beginning of the log)."`
	StartTimestamp           string        `env:"EVENT_PUBLISHER_START_TIMESTAMP" doc:"RFC 3339 time a new checkpoint starts at (the first segment committed at or after it). Empty = the beginning."`
	Lookback                 time.Duration `env:"EVENT_PUBLISHER_LOOKBACK_SECONDS" envDefault:"600" doc:"How long pending gaps are re-checked and published late (the bounded lookback)."`
	LookbackMaxKeys          int           `env:"EVENT_PUBLISHER_LOOKBACK_MAX_KEYS" envDefault:"50" doc:"Most pending gaps re-checked per cycle."`
	DedupMaxEvents           int           `env:"EVENT_PUBLISHER_DEDUP_MAX_EVENTS" envDefault:"10000" doc:"Size of the in-memory recent event-id set that suppresses re-publishing."`
	DedupCheckpointMaxEvents int           `env:"EVENT_PUBLISHER_DEDUP_CHECKPOINT_MAX_EVENTS" envDefault:"2000" doc:"Most recent event ids stored in the checkpoint."`
	BatchSize                int           `env:"EVENT_PUBLISHER_BATCH_SIZE" envDefault:"200" doc:"Segments per LIST page and bound on records per cycle."`
	KafkaFlushBatchSize      int           `env:"EVENT_PUBLISHER_KAFKA_FLUSH_BATCH_SIZE" envDefault:"0" docDefault:"EVENT_PUBLISHER_BATCH_SIZE" doc:"Records produced before a flush (0 = the batch size)."`
	KafkaFlushTimeout        time.Duration `env:"EVENT_PUBLISHER_KAFKA_FLUSH_TIMEOUT_SECONDS" envDefault:"10" doc:"Longest wait for Kafka to acknowledge a flush."`
	MetricsLogInterval       time.Duration `env:"EVENT_PUBLISHER_METRICS_LOG_INTERVAL_SECONDS" envDefault:"30" doc:"Interval of the periodic metrics log line (0 disables it)."`
	PollInterval             time.Duration `env:"EVENT_PUBLISHER_POLL_INTERVAL" envDefault:"1" doc:"Fallback poll interval when no LISTEN or bucket notification wakes the relay."`
	LeaderLease              time.Duration `env:"EVENT_PUBLISHER_LEADER_LEASE_SECONDS" envDefault:"10" doc:"Leader lease of one relay replica; a standby takes over after it expires."`
	ParallelGets             int           `env:"EVENT_PUBLISHER_PARALLEL_GETS" envDefault:"8" doc:"Segment GETs in flight at once."`
	StallAfter               time.Duration `env:"EVENT_PUBLISHER_STALL_SECONDS" envDefault:"60" doc:"/readyz turns red when the head grows and the checkpoint has not moved for this long."`
	CheckpointMaxRecords     int           `env:"EVENT_PUBLISHER_CHECKPOINT_MAX_RECORDS" envDefault:"10000" doc:"Most produced records not yet covered by a durable checkpoint: what a relay crash re-publishes at most; a background write starts at half of it (raised to the flush batch size when smaller)."`
	CheckpointInterval       time.Duration `env:"EVENT_PUBLISHER_CHECKPOINT_INTERVAL" envDefault:"1s" doc:"Longest time between two checkpoint writes while there is progress to save (what a crash re-publishes is bounded by EVENT_PUBLISHER_CHECKPOINT_MAX_RECORDS, not by this)."`
	WakeLinger               time.Duration `env:"EVENT_PUBLISHER_WAKE_LINGER" envDefault:"5ms" doc:"How long an idle relay waits after a commit's notification wakes it before its cycle starts, so that the commits notified meanwhile are published by the same cycle (one produce request, one acknowledgement); the segment's read starts at the notification all the same. 0: a cycle per wake-up."`
	ParkAfterAttempts        int           `env:"EVENT_PUBLISHER_PARK_AFTER_ATTEMPTS" envDefault:"3" doc:"Attempts at a record Kafka refuses for a reason of its own (too large, topic refused) before the relay parks it in sluice.relay_parked and moves on; outages are retried without limit."`

	// The tunables below have no variable of their own (Go only); New
	// applies their defaults when zero.

	// AppendTimeout is EVENT_STORE_APPEND_TIMEOUT (eventstore.Config):
	// reserved rows younger than this are in flight (wait); older ones are
	// repaired or abandoned. It must equal the store's own setting.
	// Default: the variable's default.
	AppendTimeout time.Duration
	// Routes overrides topics per aggregate type.
	Routes map[string]TopicRoute
	// Holder names this replica in the lease table. Default hostname plus
	// a random suffix (unique per process).
	Holder string
	// MaxWindow bounds how far (in positions) the relay publishes past a
	// position the checkpoint cannot pass yet (a young gap). Default 100,000.
	MaxWindow int64
	// SkipTopicBootstrap disables the creation of missing topics (at start
	// and before a metadata.kafka_topic's first record).
	SkipTopicBootstrap bool
	// ObjectStoreTimeout bounds every object-storage call of the relay
	// (segment LIST and GET, checkpoint read and write): a store that
	// hangs fails the call, turns readiness red and is retried, instead of
	// blocking the relay silently. Default 10 s.
	ObjectStoreTimeout time.Duration
}

// DefaultConfig is the section with the defaults of its tags, as a process
// with none of its variables set reads it (before Derive).
func DefaultConfig() Config {
	var c Config
	config.Defaults(&c)
	return c
}

// Derive defaults the flush batch to the batch size and the checkpoint key
// to the relay's name.
func (r *Config) Derive() {
	if r.KafkaFlushBatchSize == 0 {
		r.KafkaFlushBatchSize = r.BatchSize
	}
	if r.CheckpointKey == "" {
		r.CheckpointKey = "checkpoints/" + r.Name + ".json"
	}
}

// Validate checks the section; every problem is a *config.VarError.
func (r Config) Validate() error {
	k := &config.Checker{}
	if r.Name == "" || strings.ContainsAny(r.Name, "/\\") {
		k.Fail("EVENT_PUBLISHER_NAME", r.Name, "must be non-empty and contain no '/'")
	}
	k.AtLeast("EVENT_PUBLISHER_START_POSITION", r.StartPosition, 0)
	if r.StartTimestamp != "" {
		if _, err := time.Parse(time.RFC3339Nano, r.StartTimestamp); err != nil {
			k.Fail("EVENT_PUBLISHER_START_TIMESTAMP", r.StartTimestamp, "must be an RFC 3339 time (2026-01-02T15:04:05Z)")
		}
	}
	if r.StartPosition > 0 && r.StartTimestamp != "" {
		k.Fail("EVENT_PUBLISHER_START_TIMESTAMP", r.StartTimestamp, "set either EVENT_PUBLISHER_START_POSITION or EVENT_PUBLISHER_START_TIMESTAMP, not both")
	}
	if r.Lookback < 0 {
		k.Fail("EVENT_PUBLISHER_LOOKBACK_SECONDS", r.Lookback.String(), "must not be negative")
	}
	k.AtLeast("EVENT_PUBLISHER_LOOKBACK_MAX_KEYS", int64(r.LookbackMaxKeys), 1)
	k.AtLeast("EVENT_PUBLISHER_DEDUP_MAX_EVENTS", int64(r.DedupMaxEvents), 0)
	k.AtLeast("EVENT_PUBLISHER_DEDUP_CHECKPOINT_MAX_EVENTS", int64(r.DedupCheckpointMaxEvents), 0)
	if r.DedupCheckpointMaxEvents > r.DedupMaxEvents {
		k.Fail("EVENT_PUBLISHER_DEDUP_CHECKPOINT_MAX_EVENTS", strconv.Itoa(r.DedupCheckpointMaxEvents), "must not exceed EVENT_PUBLISHER_DEDUP_MAX_EVENTS (%d)", r.DedupMaxEvents)
	}
	k.AtLeast("EVENT_PUBLISHER_BATCH_SIZE", int64(r.BatchSize), 1)
	k.AtLeast("EVENT_PUBLISHER_KAFKA_FLUSH_BATCH_SIZE", int64(r.KafkaFlushBatchSize), 1)
	k.Positive("EVENT_PUBLISHER_KAFKA_FLUSH_TIMEOUT_SECONDS", r.KafkaFlushTimeout)
	if r.MetricsLogInterval < 0 {
		k.Fail("EVENT_PUBLISHER_METRICS_LOG_INTERVAL_SECONDS", r.MetricsLogInterval.String(), "must not be negative")
	}
	k.Positive("EVENT_PUBLISHER_POLL_INTERVAL", r.PollInterval)
	k.AtLeast("EVENT_PUBLISHER_CHECKPOINT_MAX_RECORDS", int64(r.CheckpointMaxRecords), 1)
	k.Positive("EVENT_PUBLISHER_CHECKPOINT_INTERVAL", r.CheckpointInterval)
	if r.WakeLinger < 0 {
		k.Fail("EVENT_PUBLISHER_WAKE_LINGER", r.WakeLinger.String(), "must not be negative (0 turns the linger off)")
	}
	k.Positive("EVENT_PUBLISHER_LEADER_LEASE_SECONDS", r.LeaderLease)
	k.AtLeast("EVENT_PUBLISHER_PARALLEL_GETS", int64(r.ParallelGets), 1)
	k.Positive("EVENT_PUBLISHER_STALL_SECONDS", r.StallAfter)
	return k.Err()
}
