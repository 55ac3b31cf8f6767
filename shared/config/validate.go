package config

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
)

var bucketName = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

// checker collects VarErrors.
type checker struct {
	errs []error
}

func (k *checker) fail(name, value, format string, args ...any) {
	if isSecret(name) {
		value = "" // a credential is never echoed, not even a wrong one (docs/architecture.md#security-and-bad-input)
	}
	k.errs = append(k.errs, &VarError{Var: name, Value: value, Reason: fmt.Sprintf(format, args...)})
}

func (k *checker) oneOf(name, v string, allowed ...string) {
	for _, a := range allowed {
		if v == a {
			return
		}
	}
	k.fail(name, v, "must be one of %s", strings.Join(allowed, ", "))
}

func (k *checker) atLeast(name string, v, minimum int64) {
	if v < minimum {
		k.fail(name, strconv.FormatInt(v, 10), "must be at least %d", minimum)
	}
}

func (k *checker) positive(name string, d time.Duration) {
	if d <= 0 {
		k.fail(name, d.String(), "must be greater than zero")
	}
}

// Validate checks every section and returns all problems, each a *VarError
// naming its variable.
func (c *Config) Validate() error {
	k := &checker{}
	k.oneOf("SLUICE_LOG_LEVEL", c.Log.Level, "debug", "info", "warn", "error")
	k.oneOf("SLUICE_LOG_FORMAT", c.Log.Format, "json", "text")
	c.Tracing.validate(k)
	k.atLeast("DATABASE_MAX_CONNS", int64(c.Postgres.MaxConns), 1)
	if u := c.Postgres.URL.Value(); u != "" {
		if reason := postgresURLProblem(u); reason != "" {
			k.fail("DATABASE_URL", "", "%s", reason)
		}
	}
	if _, err := strconv.Atoi(c.Runtime.GOGC); err != nil && c.Runtime.GOGC != "off" {
		k.fail("GOGC", c.Runtime.GOGC, "must be a percentage (an integer; negative means off) or off, as the Go runtime reads it")
	}
	if m := c.Runtime.GOMEMLIMIT; m != "" && !validMemLimit(m) {
		k.fail("GOMEMLIMIT", m, "must be a byte count as the Go runtime reads it: an integer number of bytes (536870912, what the Kubernetes downward API gives with divisor 1), optionally with a B, KiB, MiB, GiB or TiB suffix (900MiB), or off")
	}

	es := c.EventStore
	k.oneOf("EVENT_STORE_BACKEND", es.Backend, "s3", "file")
	if !bucketName.MatchString(es.Bucket) {
		k.fail("EVENT_STORE_BUCKET", es.Bucket, "must be a valid bucket name (3-63 characters: a-z, 0-9, '.', '-')")
	}
	if es.Backend == "file" && es.FileDir == "" {
		k.fail("EVENT_STORE_FILE_DIR", "", "must be set when EVENT_STORE_BACKEND=file")
	}
	if es.S3Endpoint != "" {
		if u, err := url.Parse(es.S3Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			k.fail("EVENT_STORE_S3_ENDPOINT", es.S3Endpoint, "must be an http:// or https:// URL")
		}
	}
	if (es.S3AccessKeyID == "") != (es.S3SecretAccessKey == "") {
		k.fail("EVENT_STORE_S3_ACCESS_KEY_ID", "", "EVENT_STORE_S3_ACCESS_KEY_ID and EVENT_STORE_S3_SECRET_ACCESS_KEY(_FILE) must be set together")
	}
	k.positive("EVENT_STORE_GROUP_COMMIT_MAX_WAIT", es.GroupCommitMaxWait)
	k.atLeast("EVENT_STORE_GROUP_COMMIT_MAX_EVENTS", int64(es.GroupCommitMaxEvents), 1)
	k.oneOf("EVENT_STORE_IDEMPOTENCY_MISMATCH_MODE", es.IdempotencyMismatchMode, "error", "warn")
	k.oneOf("EVENT_STORE_SEQUENCE_ALLOCATOR_MODE", es.SequenceAllocatorMode, "postgres", "off")
	k.positive("EVENT_STORE_APPEND_TIMEOUT", es.AppendTimeout)
	k.positive("EVENT_STORE_OBJECT_TIMEOUT", es.ObjectTimeout)
	k.positive("EVENT_STORE_INDEX_RETENTION", es.IndexRetention)
	k.atLeast("EVENT_STORE_MAX_ENVELOPE_BYTES", int64(es.MaxEnvelopeBytes), 1024)
	k.atLeast("EVENT_STORE_MAX_DATA_DEPTH", int64(es.MaxDataDepth), 1)
	k.atLeast("EVENT_STORE_MAX_METADATA_BYTES", int64(es.MaxMetadataBytes), 256)

	r := c.Relay
	if r.Name == "" || strings.ContainsAny(r.Name, "/\\") {
		k.fail("EVENT_PUBLISHER_NAME", r.Name, "must be non-empty and contain no '/'")
	}
	k.atLeast("EVENT_PUBLISHER_START_POSITION", r.StartPosition, 0)
	if r.StartTimestamp != "" {
		if _, err := time.Parse(time.RFC3339Nano, r.StartTimestamp); err != nil {
			k.fail("EVENT_PUBLISHER_START_TIMESTAMP", r.StartTimestamp, "must be an RFC 3339 time (2026-01-02T15:04:05Z)")
		}
	}
	if r.StartPosition > 0 && r.StartTimestamp != "" {
		k.fail("EVENT_PUBLISHER_START_TIMESTAMP", r.StartTimestamp, "set either EVENT_PUBLISHER_START_POSITION or EVENT_PUBLISHER_START_TIMESTAMP, not both")
	}
	if r.Lookback < 0 {
		k.fail("EVENT_PUBLISHER_LOOKBACK_SECONDS", r.Lookback.String(), "must not be negative")
	}
	k.atLeast("EVENT_PUBLISHER_LOOKBACK_MAX_KEYS", int64(r.LookbackMaxKeys), 1)
	k.atLeast("EVENT_PUBLISHER_DEDUP_MAX_EVENTS", int64(r.DedupMaxEvents), 0)
	k.atLeast("EVENT_PUBLISHER_DEDUP_CHECKPOINT_MAX_EVENTS", int64(r.DedupCheckpointMaxEvents), 0)
	if r.DedupCheckpointMaxEvents > r.DedupMaxEvents {
		k.fail("EVENT_PUBLISHER_DEDUP_CHECKPOINT_MAX_EVENTS", strconv.Itoa(r.DedupCheckpointMaxEvents), "must not exceed EVENT_PUBLISHER_DEDUP_MAX_EVENTS (%d)", r.DedupMaxEvents)
	}
	k.atLeast("EVENT_PUBLISHER_BATCH_SIZE", int64(r.BatchSize), 1)
	k.atLeast("EVENT_PUBLISHER_KAFKA_FLUSH_BATCH_SIZE", int64(r.KafkaFlushBatchSize), 1)
	k.positive("EVENT_PUBLISHER_KAFKA_FLUSH_TIMEOUT_SECONDS", r.KafkaFlushTimeout)
	if r.MetricsLogInterval < 0 {
		k.fail("EVENT_PUBLISHER_METRICS_LOG_INTERVAL_SECONDS", r.MetricsLogInterval.String(), "must not be negative")
	}
	k.positive("EVENT_PUBLISHER_POLL_INTERVAL", r.PollInterval)
	k.atLeast("EVENT_PUBLISHER_CHECKPOINT_MAX_RECORDS", int64(r.CheckpointMaxRecords), 1)
	k.positive("EVENT_PUBLISHER_CHECKPOINT_INTERVAL", r.CheckpointInterval)
	k.positive("EVENT_PUBLISHER_LEADER_LEASE_SECONDS", r.LeaderLease)
	k.atLeast("EVENT_PUBLISHER_PARALLEL_GETS", int64(r.ParallelGets), 1)
	k.positive("EVENT_PUBLISHER_STALL_SECONDS", r.StallAfter)

	kf := c.Kafka
	if len(kf.Brokers) == 0 {
		k.fail("KAFKA_BROKERS", "", "must name at least one broker")
	}
	for _, b := range kf.Brokers {
		if strings.TrimSpace(b) == "" || !strings.Contains(b, ":") {
			k.fail("KAFKA_BROKERS", strings.Join(kf.Brokers, ","), "every broker must be host:port")
			break
		}
	}
	k.atLeast("KAFKA_TOPIC_PARTITIONS", int64(kf.TopicPartitions), 1)
	k.atLeast("KAFKA_TOPIC_REPLICATION_FACTOR", int64(kf.ReplicationFactor), 1)
	k.oneOf("KAFKA_SASL_MECHANISM", kf.SASLMechanism, "", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

	rg := c.Registry
	if !rg.Enabled {
		k.fail("ENABLE_PROCESSED_EVENT_REGISTRY", "false", "the processed-event registry is not optional: without it duplicates, crashes and replays would repeat side effects (docs/architecture.md#the-guarantees, docs/registry.md); remove the variable or set it to true")
	}
	if rg.Owner == "" {
		k.fail("PROCESSED_EVENT_OWNER", "", "must be set (the hostname could not be read)")
	}
	k.positive("PROCESSED_EVENT_LEASE_TIMEOUT_SECONDS", rg.LeaseTimeout)
	k.positive("PROCESSED_EVENT_HEARTBEAT_INTERVAL_SECONDS", rg.HeartbeatInterval)
	if rg.HeartbeatInterval >= rg.LeaseTimeout {
		k.fail("PROCESSED_EVENT_HEARTBEAT_INTERVAL_SECONDS", rg.HeartbeatInterval.String(), "must be shorter than PROCESSED_EVENT_LEASE_TIMEOUT_SECONDS (%s)", rg.LeaseTimeout)
	}
	k.atLeast("PROCESSED_EVENT_RETENTION_DAYS", int64(rg.RetentionDays), 1)

	w := c.Worker
	k.atLeast("WORKER_CONCURRENCY", int64(w.Concurrency), 1)
	k.atLeast("INSTANCE_WORKER_MAX_RETRY_ATTEMPTS", int64(w.InstanceMaxRetryAttempts), 1)
	k.atLeast("PROJECTION_WORKER_MAX_RETRIES", int64(w.ProjectionMaxRetries), 1)
	k.positive("WORKER_RETRY_BACKOFF_BASE", w.RetryBackoffBase)
	if w.RetryBackoffCap < w.RetryBackoffBase {
		k.fail("WORKER_RETRY_BACKOFF_CAP", w.RetryBackoffCap.String(), "must be at least WORKER_RETRY_BACKOFF_BASE (%s)", w.RetryBackoffBase)
	}
	k.positive("SHUTDOWN_TIMEOUT", w.ShutdownTimeout)
	if w.SessionTimeout < 6*time.Second || w.SessionTimeout > 30*time.Minute {
		k.fail("KAFKA_SESSION_TIMEOUT", w.SessionTimeout.String(), "must be between 6s and 30m (the brokers' group.min.session.timeout.ms and group.max.session.timeout.ms defaults)")
	}

	e := c.Elasticsearch
	if len(e.URLs) == 0 {
		k.fail("ELASTICSEARCH_URLS", "", "must name at least one URL")
	}
	for _, s := range e.URLs {
		if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			k.fail("ELASTICSEARCH_URLS", s, "every entry must be an http:// or https:// URL")
		}
	}
	k.atLeast("ELASTICSEARCH_BULK_MAX_DOCS", int64(e.BulkMaxDocs), 1)
	k.atLeast("ELASTICSEARCH_BULK_MAX_BYTES", int64(e.BulkMaxBytes), 1024)
	k.positive("ELASTICSEARCH_REQUEST_TIMEOUT", e.RequestTimeout)

	k.atLeast("SLUICE_API_MAX_BODY_BYTES", int64(c.API.MaxBodyBytes), 1024)
	k.atLeast("SLUICE_API_MAX_IN_FLIGHT", int64(c.API.MaxInFlight), 1)

	if cp := c.Testing.CrashPoint; cp != "" {
		if w, p, ok := strings.Cut(cp, ":"); !ok || w == "" || p == "" {
			k.fail("SLUICE_CRASH_POINT", cp, "must be <worker>:<point>, e.g. instanceworker:after_claim")
		}
		if c.Testing.CrashMarkerDir == "" {
			k.fail("SLUICE_CRASH_MARKER_DIR", "", "must be set when SLUICE_CRASH_POINT is set")
		}
	}
	return errors.Join(k.errs...)
}
