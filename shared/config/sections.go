package config

import (
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The sections below are declared here until each moves to the package it
// configures (docs/architecture.md, "Configuration").

var bucketName = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

// Log configures structured logging.
type Log struct {
	Level  string `env:"SLUICE_LOG_LEVEL" envDefault:"info" doc:"Minimum log level: debug, info, warn or error."`
	Format string `env:"SLUICE_LOG_FORMAT" envDefault:"json" doc:"Log format: json (one JSON object per line) or text."`
}

// HTTP configures the per-process observability server.
type HTTP struct {
	Addr string `env:"SLUICE_HTTP_ADDR" envDefault:":9090" doc:"Listen address of the /metrics, /livez and /readyz server of every service. off disables it (an empty value means the default)."`
}

// Runtime configures the Go runtime of a sluice process. The Go runtime
// reads both variables itself at start-up; sluice applies GOGC's default
// when it is unset (GCPercent).
type Runtime struct {
	GOGC       string `env:"GOGC" envDefault:"400" doc:"Garbage-collector target of the Go runtime: a collection starts when the heap has grown by this percentage over the live heap (off: never). Go's own default is 100; sluice's is 400, which took about a quarter off the pipeline's p99 at 1,000 commands/s for about 100 MB more memory in sluice dev (docs/benchmarks.md). Bound the heap with GOMEMLIMIT."`
	GOMEMLIMIT string `env:"GOMEMLIMIT" doc:"Soft memory limit of the Go runtime, read by the runtime itself: a byte count (536870912) or one with a B, KiB, MiB, GiB or TiB suffix (900MiB), or off. Near it the collector runs more often, whatever GOGC says. The Kubernetes manifests set it to the container's memory limit through the downward API (docs/deploy.md)."`
}

// GCPercent is GOGC as debug.SetGCPercent takes it (-1 for off, or any
// negative value). It expects a validated configuration.
func (r Runtime) GCPercent() int {
	n, err := strconv.Atoi(r.GOGC)
	if err != nil || n < 0 {
		return -1 // off
	}
	return n
}

// Postgres configures the connection shared by the event-store index and the
// processed-event registry.
type Postgres struct {
	URL      Secret `env:"DATABASE_URL" file:"true" doc:"Postgres connection string (postgres://user:pass@host:5432/db?sslmode=...). Required by every service; sluice dev starts a local server when unset."`
	MaxConns int    `env:"DATABASE_MAX_CONNS" envDefault:"16" doc:"Maximum connections in the pool of one process."`
}

// EventStore configures the segment log (docs/eventstore.md).
type EventStore struct {
	Backend                 string        `env:"EVENT_STORE_BACKEND" envDefault:"s3" doc:"Object storage backend: s3 (AWS S3, MinIO, any S3-compatible store) or file (a local directory, single host)."`
	Bucket                  string        `env:"EVENT_STORE_BUCKET" envDefault:"sluice-events" doc:"Bucket (s3) holding segments/ and checkpoints/."`
	FileDir                 string        `env:"EVENT_STORE_FILE_DIR" envDefault:"./data/events" doc:"Root directory of the file backend; the bucket is a folder below it."`
	S3Endpoint              string        `env:"EVENT_STORE_S3_ENDPOINT" doc:"S3 endpoint URL (http://minio:9000). Empty uses AWS's regional endpoint."`
	S3Region                string        `env:"EVENT_STORE_S3_REGION" envDefault:"us-east-1" doc:"S3 region."`
	S3AccessKeyID           string        `env:"EVENT_STORE_S3_ACCESS_KEY_ID" file:"true" doc:"Static access key id. Empty uses the default AWS credential chain."`
	S3SecretAccessKey       Secret        `env:"EVENT_STORE_S3_SECRET_ACCESS_KEY" file:"true" doc:"Static secret access key (never logged)."`
	S3PathStyle             bool          `env:"EVENT_STORE_S3_PATH_STYLE" envDefault:"true" doc:"Use path-style addressing (needed by MinIO)."`
	GroupCommitMaxWait      time.Duration `env:"EVENT_STORE_GROUP_COMMIT_MAX_WAIT" envDefault:"2ms" doc:"Longest time the committer gathers appends into one group."`
	GroupCommitMaxEvents    int           `env:"EVENT_STORE_GROUP_COMMIT_MAX_EVENTS" envDefault:"500" doc:"Most envelopes in one group (one segment)."`
	IdempotencyMismatchMode string        `env:"EVENT_STORE_IDEMPOTENCY_MISMATCH_MODE" envDefault:"error" doc:"Same event_id with a different payload: error (reject with a conflict) or warn (log and return the stored event)."`
	SequenceAllocatorMode   string        `env:"EVENT_STORE_SEQUENCE_ALLOCATOR_MODE" envDefault:"postgres" doc:"postgres (the store assigns sequence numbers atomically) or off (the caller supplies sequence_number)."`
	AppendTimeout           time.Duration `env:"EVENT_STORE_APPEND_TIMEOUT" envDefault:"30s" doc:"Age after which a reserved-but-uncommitted append is treated as crashed (relay repair/abandon)."`
	ObjectTimeout           time.Duration `env:"EVENT_STORE_OBJECT_TIMEOUT" envDefault:"5s" doc:"Deadline of one object-storage call, retries included, plus transfer time at 1 MiB/s: a hung store fails appends with 503 after it instead of blocking them."`
	IndexRetention          time.Duration `env:"EVENT_STORE_INDEX_RETENTION" envDefault:"168h" doc:"How long full index rows are kept beyond every relay checkpoint."`
	MaxEnvelopeBytes        int           `env:"EVENT_STORE_MAX_ENVELOPE_BYTES" envDefault:"1048576" doc:"Largest accepted envelope, encoded."`
	MaxDataDepth            int           `env:"EVENT_STORE_MAX_DATA_DEPTH" envDefault:"64" doc:"Deepest accepted nesting of the data object."`
	MaxMetadataBytes        int           `env:"EVENT_STORE_MAX_METADATA_BYTES" envDefault:"16384" doc:"Largest accepted metadata object, encoded."`
}

// Relay configures the store-to-Kafka publisher (docs/relay.md; seed names kept).
type Relay struct {
	Name                     string        `env:"EVENT_PUBLISHER_NAME" envDefault:"default" doc:"Relay name; the checkpoint object is checkpoints/{name}.json unless EVENT_PUBLISHER_CHECKPOINT_KEY is set."`
	CheckpointKey            string        `env:"EVENT_PUBLISHER_CHECKPOINT_KEY" doc:"Object key of the checkpoint (default checkpoints/{EVENT_PUBLISHER_NAME}.json)."`
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
	CheckpointInterval       time.Duration `env:"EVENT_PUBLISHER_CHECKPOINT_INTERVAL" envDefault:"100ms" doc:"Longest time between two checkpoint writes while there is progress to save."`
	ParkAfterAttempts        int           `env:"EVENT_PUBLISHER_PARK_AFTER_ATTEMPTS" envDefault:"3" doc:"Attempts at a record Kafka refuses for a reason of its own (too large, topic refused) before the relay parks it in sluice.relay_parked and moves on; outages are retried without limit."`
}

// Kafka configures the brokers and topics (docs/architecture.md#security-and-bad-input).
type Kafka struct {
	Brokers           []string `env:"KAFKA_BROKERS" envDefault:"localhost:9092" envSeparator:"," doc:"Comma-separated seed brokers."`
	TopicPrefix       string   `env:"KAFKA_TOPIC_PREFIX" envDefault:"sluice." doc:"Prefix of the default topic names."`
	GroupPrefix       string   `env:"KAFKA_GROUP_PREFIX" docDefault:"KAFKA_TOPIC_PREFIX" doc:"Prefix of every consumer group id ({prefix}instance-worker, {prefix}projection-{name}-v{N}), so that two pipelines on one cluster never share a group. Empty keeps the unprefixed ids of earlier versions; a worker whose prefixed group has committed nothing yet first takes over the unprefixed group's offsets (docs/operations.md)."`
	CommandsTopic     string   `env:"COMMANDS_TOPIC" docDefault:"{prefix}commands" doc:"Commands topic."`
	EventsTopic       string   `env:"EVENTS_TOPIC" docDefault:"{prefix}events" doc:"Domain events topic."`
	CommandsDLQTopic  string   `env:"COMMANDS_DLQ_TOPIC" docDefault:"{prefix}commands.dlq" doc:"Dead-letter topic of the instance worker."`
	EventsDLQTopic    string   `env:"EVENTS_DLQ_TOPIC" docDefault:"{prefix}events.dlq" doc:"Dead-letter topic of the projection worker."`
	TopicPartitions   int      `env:"KAFKA_TOPIC_PARTITIONS" envDefault:"12" doc:"Partitions of topics created at start-up."`
	ReplicationFactor int      `env:"KAFKA_TOPIC_REPLICATION_FACTOR" envDefault:"3" doc:"Replication factor of topics created at start-up (1 in dev)."`
	TLS               bool     `env:"KAFKA_TLS" envDefault:"false" doc:"Connect with TLS."`
	SASLMechanism     string   `env:"KAFKA_SASL_MECHANISM" doc:"SASL mechanism: empty, PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512."`
	SASLUsername      string   `env:"KAFKA_SASL_USERNAME" file:"true" doc:"SASL user."`
	SASLPassword      Secret   `env:"KAFKA_SASL_PASSWORD" file:"true" doc:"SASL password (never logged)."`
	MaxMessageBytes   int      `env:"KAFKA_MAX_MESSAGE_BYTES" envDefault:"0" docDefault:"EVENT_STORE_MAX_ENVELOPE_BYTES + EVENT_STORE_MAX_METADATA_BYTES + 4096" doc:"Largest record batch the relay produces and max.message.bytes of the topics it creates (0 = derived from the envelope limit); a value below the derived budget fails sluice config check."`
}

// Registry configures the processed-event registry (docs/registry.md).
type Registry struct {
	Enabled           bool          `env:"ENABLE_PROCESSED_EVENT_REGISTRY" envDefault:"true" doc:"Must be true: the registry is not optional, and false is refused at start-up."`
	Owner             string        `env:"PROCESSED_EVENT_OWNER" docDefault:"hostname" doc:"Stable owner identity of this worker; a restarted worker with the same owner reclaims its in-flight rows at once."`
	LeaseTimeout      time.Duration `env:"PROCESSED_EVENT_LEASE_TIMEOUT_SECONDS" envDefault:"900" doc:"Lease of a claim; an expired claim may be taken by another owner."`
	HeartbeatInterval time.Duration `env:"PROCESSED_EVENT_HEARTBEAT_INTERVAL_SECONDS" envDefault:"30" doc:"Heartbeat interval of a claim; must be shorter than the lease."`
	RetentionDays     int           `env:"PROCESSED_EVENT_RETENTION_DAYS" envDefault:"7" doc:"Age after which done and skipped_stale rows are pruned."`
}

// Worker configures the Kafka worker runtime (docs/worker-runtime.md).
type Worker struct {
	Concurrency              int           `env:"WORKER_CONCURRENCY" envDefault:"16" doc:"Records of different aggregates processed at once per worker."`
	InstanceMaxRetryAttempts int           `env:"INSTANCE_WORKER_MAX_RETRY_ATTEMPTS" envDefault:"5" doc:"Attempts of a retryable instance-worker failure before the DLQ."`
	ProjectionMaxRetries     int           `env:"PROJECTION_WORKER_MAX_RETRIES" envDefault:"5" doc:"Attempts of a retryable projection failure before the DLQ."`
	RetryBackoffBase         time.Duration `env:"WORKER_RETRY_BACKOFF_BASE" envDefault:"200ms" doc:"Base of the exponential retry backoff (with jitter)."`
	RetryBackoffCap          time.Duration `env:"WORKER_RETRY_BACKOFF_CAP" envDefault:"30s" doc:"Cap of the retry backoff."`
	ShutdownTimeout          time.Duration `env:"SHUTDOWN_TIMEOUT" envDefault:"30s" doc:"Time a worker has after SIGTERM to drain in-flight work and commit."`
	SessionTimeout           time.Duration `env:"KAFKA_SESSION_TIMEOUT" envDefault:"45s" doc:"Consumer-group session timeout of the workers: a worker killed without a clean shutdown keeps its partitions this long. 6s to 30m (the brokers' default group.min/max.session.timeout.ms)."`
	PausePoll                time.Duration `env:"WORKER_PAUSE_POLL_INTERVAL" envDefault:"2s" doc:"How often a worker reads its group's pause flag (sluice consumer pause/resume): a pause or resume takes effect within this time."`
}

// Elasticsearch configures the read-model cluster (docs/projectionworker.md).
type Elasticsearch struct {
	URLs         []string `env:"ELASTICSEARCH_URLS" envDefault:"http://localhost:9200" envSeparator:"," doc:"Comma-separated Elasticsearch node URLs."`
	APIKey       Secret   `env:"ELASTICSEARCH_API_KEY" file:"true" doc:"API key (never logged)."`
	Username     string   `env:"ELASTICSEARCH_USERNAME" file:"true" doc:"Basic-auth user."`
	Password     Secret   `env:"ELASTICSEARCH_PASSWORD" file:"true" doc:"Basic-auth password (never logged)."`
	IndexPrefix  string   `env:"ELASTICSEARCH_INDEX_PREFIX" envDefault:"sluice_" doc:"Prefix of every index and alias sluice creates."`
	BulkMaxDocs  int      `env:"ELASTICSEARCH_BULK_MAX_DOCS" envDefault:"1000" doc:"Most operations in one bulk request."`
	BulkMaxBytes int      `env:"ELASTICSEARCH_BULK_MAX_BYTES" envDefault:"5242880" doc:"Largest bulk request body."`
	// RequestTimeout bounds every Elasticsearch request of the workers
	// (readmodel.NewClient), so that a frozen cluster is an outage within
	// one timeout instead of a hang.
	RequestTimeout time.Duration `env:"ELASTICSEARCH_REQUEST_TIMEOUT" envDefault:"10s" doc:"Deadline of each Elasticsearch request (connect to last byte of the answer); a request past it counts as an Elasticsearch outage."`
}

// API configures the command API (docs/api.md).
type API struct {
	Addr         string   `env:"SLUICE_API_ADDR" envDefault:":8080" doc:"Listen address of the command API."`
	Tokens       []Secret `env:"SLUICE_API_TOKENS" envSeparator:"," file:"true" doc:"Comma-separated bearer tokens; when set, every /v1 request needs one."`
	MaxBodyBytes int      `env:"SLUICE_API_MAX_BODY_BYTES" envDefault:"1048576" doc:"Largest accepted request body."`
	MaxInFlight  int      `env:"SLUICE_API_MAX_IN_FLIGHT" envDefault:"1024" doc:"Most /v1 requests served at once; one more is answered 429 too_many_requests with Retry-After at once, rather than queued until clients time out."`
	// AdminToken and AdminReadToken guard the admin API (/admin/v1/,
	// docs/console.md); without either, it answers 401 to every request.
	AdminToken     Secret `env:"SLUICE_ADMIN_TOKEN" file:"true" doc:"Bearer token of the admin API's operator role (reads and actions); unset: no operator."`
	AdminReadToken Secret `env:"SLUICE_ADMIN_READ_TOKEN" file:"true" doc:"Bearer token of the admin API's read-only role; unset: no reader. Without either token the admin API answers 401."`
}

// Testing holds the crash-point knobs used by the crash tests (docs/worker-runtime.md#crash-points).
type Testing struct {
	CrashPoint     string `env:"SLUICE_CRASH_POINT" doc:"<worker>:<point>: exit with code 42 at that point, once. Tests only."`
	CrashMarkerDir string `env:"SLUICE_CRASH_MARKER_DIR" doc:"Directory of the once-only crash marker files."`
}

// Derive applies "off" (an empty address disables the server).
func (h *HTTP) Derive() {
	if strings.EqualFold(h.Addr, "off") {
		h.Addr = ""
	}
}

// Derive defaults the owner to the hostname.
func (r *Registry) Derive() {
	if r.Owner == "" {
		if h, err := os.Hostname(); err == nil {
			r.Owner = h
		}
	}
}

// Derive defaults the flush batch to the batch size and the checkpoint key
// to the relay's name.
func (r *Relay) Derive() {
	if r.KafkaFlushBatchSize == 0 {
		r.KafkaFlushBatchSize = r.BatchSize
	}
	if r.CheckpointKey == "" {
		r.CheckpointKey = "checkpoints/" + r.Name + ".json"
	}
}

// Group returns the consumer group id of a worker's base group name
// ("instance-worker", "projection-history-v1"): GroupPrefix + base.
func (c Kafka) Group(base string) string { return c.GroupPrefix + base }

// Derive names the topics left unset after KAFKA_TOPIC_PREFIX.
func (c *Kafka) Derive() {
	for dst, suffix := range map[*string]string{
		&c.CommandsTopic: "commands", &c.EventsTopic: "events",
		&c.CommandsDLQTopic: "commands.dlq", &c.EventsDLQTopic: "events.dlq",
	} {
		if *dst == "" {
			*dst = c.TopicPrefix + suffix
		}
	}
}

// Validate checks the section; every problem is a *VarError.
func (c Log) Validate() error {
	k := &Checker{}
	k.OneOf("SLUICE_LOG_LEVEL", c.Level, "debug", "info", "warn", "error")
	k.OneOf("SLUICE_LOG_FORMAT", c.Format, "json", "text")
	return k.Err()
}

// Validate checks the section; every problem is a *VarError.
func (c Postgres) Validate() error {
	k := &Checker{}
	k.AtLeast("DATABASE_MAX_CONNS", int64(c.MaxConns), 1)
	if u := c.URL.Value(); u != "" {
		if reason := postgresURLProblem(u); reason != "" {
			k.Fail("DATABASE_URL", "", "%s", reason)
		}
	}
	return k.Err()
}

// Validate checks the section; every problem is a *VarError.
func (c Runtime) Validate() error {
	k := &Checker{}
	if _, err := strconv.Atoi(c.GOGC); err != nil && c.GOGC != "off" {
		k.Fail("GOGC", c.GOGC, "must be a percentage (an integer; negative means off) or off, as the Go runtime reads it")
	}
	if m := c.GOMEMLIMIT; m != "" && !validMemLimit(m) {
		k.Fail("GOMEMLIMIT", m, "must be a byte count as the Go runtime reads it: an integer number of bytes (536870912, what the Kubernetes downward API gives with divisor 1), optionally with a B, KiB, MiB, GiB or TiB suffix (900MiB), or off")
	}
	return k.Err()
}

// Validate checks the section; every problem is a *VarError.
func (es EventStore) Validate() error {
	k := &Checker{}
	k.OneOf("EVENT_STORE_BACKEND", es.Backend, "s3", "file")
	if !bucketName.MatchString(es.Bucket) {
		k.Fail("EVENT_STORE_BUCKET", es.Bucket, "must be a valid bucket name (3-63 characters: a-z, 0-9, '.', '-')")
	}
	if es.Backend == "file" && es.FileDir == "" {
		k.Fail("EVENT_STORE_FILE_DIR", "", "must be set when EVENT_STORE_BACKEND=file")
	}
	if es.S3Endpoint != "" {
		if u, err := url.Parse(es.S3Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			k.Fail("EVENT_STORE_S3_ENDPOINT", es.S3Endpoint, "must be an http:// or https:// URL")
		}
	}
	if (es.S3AccessKeyID == "") != (es.S3SecretAccessKey == "") {
		k.Fail("EVENT_STORE_S3_ACCESS_KEY_ID", "", "EVENT_STORE_S3_ACCESS_KEY_ID and EVENT_STORE_S3_SECRET_ACCESS_KEY(_FILE) must be set together")
	}
	k.Positive("EVENT_STORE_GROUP_COMMIT_MAX_WAIT", es.GroupCommitMaxWait)
	k.AtLeast("EVENT_STORE_GROUP_COMMIT_MAX_EVENTS", int64(es.GroupCommitMaxEvents), 1)
	k.OneOf("EVENT_STORE_IDEMPOTENCY_MISMATCH_MODE", es.IdempotencyMismatchMode, "error", "warn")
	k.OneOf("EVENT_STORE_SEQUENCE_ALLOCATOR_MODE", es.SequenceAllocatorMode, "postgres", "off")
	k.Positive("EVENT_STORE_APPEND_TIMEOUT", es.AppendTimeout)
	k.Positive("EVENT_STORE_OBJECT_TIMEOUT", es.ObjectTimeout)
	k.Positive("EVENT_STORE_INDEX_RETENTION", es.IndexRetention)
	k.AtLeast("EVENT_STORE_MAX_ENVELOPE_BYTES", int64(es.MaxEnvelopeBytes), 1024)
	k.AtLeast("EVENT_STORE_MAX_DATA_DEPTH", int64(es.MaxDataDepth), 1)
	k.AtLeast("EVENT_STORE_MAX_METADATA_BYTES", int64(es.MaxMetadataBytes), 256)
	return k.Err()
}

// Validate checks the section; every problem is a *VarError.
func (r Relay) Validate() error {
	k := &Checker{}
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
	k.Positive("EVENT_PUBLISHER_LEADER_LEASE_SECONDS", r.LeaderLease)
	k.AtLeast("EVENT_PUBLISHER_PARALLEL_GETS", int64(r.ParallelGets), 1)
	k.Positive("EVENT_PUBLISHER_STALL_SECONDS", r.StallAfter)
	return k.Err()
}

// Validate checks the section; every problem is a *VarError.
func (kf Kafka) Validate() error {
	k := &Checker{}
	if len(kf.Brokers) == 0 {
		k.Fail("KAFKA_BROKERS", "", "must name at least one broker")
	}
	for _, b := range kf.Brokers {
		if strings.TrimSpace(b) == "" || !strings.Contains(b, ":") {
			k.Fail("KAFKA_BROKERS", strings.Join(kf.Brokers, ","), "every broker must be host:port")
			break
		}
	}
	k.AtLeast("KAFKA_TOPIC_PARTITIONS", int64(kf.TopicPartitions), 1)
	k.AtLeast("KAFKA_TOPIC_REPLICATION_FACTOR", int64(kf.ReplicationFactor), 1)
	k.OneOf("KAFKA_SASL_MECHANISM", kf.SASLMechanism, "", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
	return k.Err()
}

// Validate checks the section; every problem is a *VarError.
func (rg Registry) Validate() error {
	k := &Checker{}
	if !rg.Enabled {
		k.Fail("ENABLE_PROCESSED_EVENT_REGISTRY", "false", "the processed-event registry is not optional: without it duplicates, crashes and replays would repeat side effects (docs/architecture.md#the-guarantees, docs/registry.md); remove the variable or set it to true")
	}
	if rg.Owner == "" {
		k.Fail("PROCESSED_EVENT_OWNER", "", "must be set (the hostname could not be read)")
	}
	k.Positive("PROCESSED_EVENT_LEASE_TIMEOUT_SECONDS", rg.LeaseTimeout)
	k.Positive("PROCESSED_EVENT_HEARTBEAT_INTERVAL_SECONDS", rg.HeartbeatInterval)
	if rg.HeartbeatInterval >= rg.LeaseTimeout {
		k.Fail("PROCESSED_EVENT_HEARTBEAT_INTERVAL_SECONDS", rg.HeartbeatInterval.String(), "must be shorter than PROCESSED_EVENT_LEASE_TIMEOUT_SECONDS (%s)", rg.LeaseTimeout)
	}
	k.AtLeast("PROCESSED_EVENT_RETENTION_DAYS", int64(rg.RetentionDays), 1)
	return k.Err()
}

// Validate checks the section; every problem is a *VarError.
func (w Worker) Validate() error {
	k := &Checker{}
	k.AtLeast("WORKER_CONCURRENCY", int64(w.Concurrency), 1)
	k.AtLeast("INSTANCE_WORKER_MAX_RETRY_ATTEMPTS", int64(w.InstanceMaxRetryAttempts), 1)
	k.AtLeast("PROJECTION_WORKER_MAX_RETRIES", int64(w.ProjectionMaxRetries), 1)
	k.Positive("WORKER_RETRY_BACKOFF_BASE", w.RetryBackoffBase)
	if w.RetryBackoffCap < w.RetryBackoffBase {
		k.Fail("WORKER_RETRY_BACKOFF_CAP", w.RetryBackoffCap.String(), "must be at least WORKER_RETRY_BACKOFF_BASE (%s)", w.RetryBackoffBase)
	}
	k.Positive("SHUTDOWN_TIMEOUT", w.ShutdownTimeout)
	if w.SessionTimeout < 6*time.Second || w.SessionTimeout > 30*time.Minute {
		k.Fail("KAFKA_SESSION_TIMEOUT", w.SessionTimeout.String(), "must be between 6s and 30m (the brokers' group.min.session.timeout.ms and group.max.session.timeout.ms defaults)")
	}
	return k.Err()
}

// Validate checks the section; every problem is a *VarError.
func (e Elasticsearch) Validate() error {
	k := &Checker{}
	if len(e.URLs) == 0 {
		k.Fail("ELASTICSEARCH_URLS", "", "must name at least one URL")
	}
	for _, s := range e.URLs {
		if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			k.Fail("ELASTICSEARCH_URLS", s, "every entry must be an http:// or https:// URL")
		}
	}
	k.AtLeast("ELASTICSEARCH_BULK_MAX_DOCS", int64(e.BulkMaxDocs), 1)
	k.AtLeast("ELASTICSEARCH_BULK_MAX_BYTES", int64(e.BulkMaxBytes), 1024)
	k.Positive("ELASTICSEARCH_REQUEST_TIMEOUT", e.RequestTimeout)
	return k.Err()
}

// Validate checks the section; every problem is a *VarError.
func (c API) Validate() error {
	k := &Checker{}
	k.AtLeast("SLUICE_API_MAX_BODY_BYTES", int64(c.MaxBodyBytes), 1024)
	k.AtLeast("SLUICE_API_MAX_IN_FLIGHT", int64(c.MaxInFlight), 1)
	return k.Err()
}

// Validate checks the section; every problem is a *VarError.
func (c Testing) Validate() error {
	k := &Checker{}
	if cp := c.CrashPoint; cp != "" {
		if wk, p, ok := strings.Cut(cp, ":"); !ok || wk == "" || p == "" {
			k.Fail("SLUICE_CRASH_POINT", cp, "must be <worker>:<point>, e.g. instanceworker:after_claim")
		}
		if c.CrashMarkerDir == "" {
			k.Fail("SLUICE_CRASH_MARKER_DIR", "", "must be set when SLUICE_CRASH_POINT is set")
		}
	}
	return k.Err()
}
