package sluiceconfig

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/shared/config"
)

func TestDefaults(t *testing.T) {
	c, err := Load(map[string]string{"PROCESSED_EVENT_OWNER": "w1"})
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"group commit wait", c.EventStore.GroupCommitMaxWait, 5 * time.Millisecond},
		{"group commit events", c.EventStore.GroupCommitMaxEvents, 500},
		{"bucket", c.EventStore.Bucket, "sluice-events"},
		{"lease", c.Registry.LeaseTimeout, 900 * time.Second},
		{"heartbeat", c.Registry.HeartbeatInterval, 30 * time.Second},
		{"retention", c.Registry.RetentionDays, 7},
		{"lookback", c.Relay.Lookback, 600 * time.Second},
		{"lookback keys", c.Relay.LookbackMaxKeys, 50},
		{"dedup", c.Relay.DedupMaxEvents, 10000},
		{"dedup checkpoint", c.Relay.DedupCheckpointMaxEvents, 2000},
		{"batch", c.Relay.BatchSize, 200},
		{"flush batch = batch", c.Relay.KafkaFlushBatchSize, 200},
		{"flush timeout", c.Relay.KafkaFlushTimeout, 10 * time.Second},
		{"poll", c.Relay.PollInterval, time.Second},
		{"checkpoint key", c.Relay.CheckpointKey, "checkpoints/default.json"},
		{"commands topic", c.Kafka.CommandsTopic, "sluice.commands"},
		{"events dlq topic", c.Kafka.EventsDLQTopic, "sluice.events.dlq"},
		{"partitions", c.Kafka.TopicPartitions, 12},
		{"rf", c.Kafka.ReplicationFactor, 3},
		{"instance retries", c.Worker.InstanceMaxRetryAttempts, 5},
		{"projection retries", c.Worker.ProjectionMaxRetries, 5},
		{"shutdown", c.Worker.ShutdownTimeout, 30 * time.Second},
		{"owner", c.Registry.Owner, "w1"},
		{"mismatch mode", c.EventStore.IdempotencyMismatchMode, "error"},
		{"max envelope", c.EventStore.MaxEnvelopeBytes, 1 << 20},
		{"gc percent", c.Runtime.GCPercent(), 400},
		{"memory limit", c.Runtime.GOMEMLIMIT, ""},
	}
	for _, tc := range checks {
		if fmt.Sprint(tc.got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}

func TestOverridesAndDerived(t *testing.T) {
	c, err := Load(map[string]string{
		"KAFKA_TOPIC_PREFIX":                         "acme.",
		"EVENTS_TOPIC":                               "custom-events",
		"EVENT_PUBLISHER_POLL_INTERVAL":              "0.25",
		"EVENT_STORE_GROUP_COMMIT_MAX_WAIT":          "7ms",
		"KAFKA_BROKERS":                              "a:9092,b:9092",
		"EVENT_PUBLISHER_NAME":                       "r2",
		"EVENT_PUBLISHER_KAFKA_FLUSH_BATCH_SIZE":     "50",
		"PROCESSED_EVENT_LEASE_TIMEOUT_SECONDS":      "5",
		"PROCESSED_EVENT_HEARTBEAT_INTERVAL_SECONDS": "1",
		"SLUICE_API_TOKENS":                          "t1,t2",
		"SLUICE_HTTP_ADDR":                           "off",
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.Kafka.CommandsTopic != "acme.commands" || c.Kafka.EventsTopic != "custom-events" {
		t.Errorf("topics: %q %q", c.Kafka.CommandsTopic, c.Kafka.EventsTopic)
	}
	if c.Relay.PollInterval != 250*time.Millisecond || c.EventStore.GroupCommitMaxWait != 7*time.Millisecond {
		t.Errorf("durations: %v %v", c.Relay.PollInterval, c.EventStore.GroupCommitMaxWait)
	}
	if len(c.Kafka.Brokers) != 2 || c.Relay.CheckpointKey != "checkpoints/r2.json" || c.Relay.KafkaFlushBatchSize != 50 {
		t.Errorf("brokers %v key %q flush %d", c.Kafka.Brokers, c.Relay.CheckpointKey, c.Relay.KafkaFlushBatchSize)
	}
	if len(c.API.Tokens) != 2 || c.API.Tokens[1].Value() != "t2" {
		t.Errorf("tokens: %d", len(c.API.Tokens))
	}
	if c.HTTP.Addr != "" {
		t.Errorf("SLUICE_HTTP_ADDR=off: addr %q, want disabled", c.HTTP.Addr)
	}
}

// Every bad value fails with an error that names its variable.
func TestInvalidValuesNameTheVariable(t *testing.T) {
	cases := []struct {
		env     map[string]string
		wantVar string
		wantMsg string
	}{
		{map[string]string{"EVENT_STORE_GROUP_COMMIT_MAX_EVENTS": "lots"}, "EVENT_STORE_GROUP_COMMIT_MAX_EVENTS", "invalid value"},
		{map[string]string{"EVENT_STORE_GROUP_COMMIT_MAX_EVENTS": "0"}, "EVENT_STORE_GROUP_COMMIT_MAX_EVENTS", "at least 1"},
		{map[string]string{"EVENT_STORE_GROUP_COMMIT_MAX_WAIT": "soon"}, "EVENT_STORE_GROUP_COMMIT_MAX_WAIT", "not a duration"},
		{map[string]string{"EVENT_STORE_BACKEND": "gcs"}, "EVENT_STORE_BACKEND", "one of s3, file"},
		{map[string]string{"EVENT_STORE_BUCKET": "Bad_Bucket"}, "EVENT_STORE_BUCKET", "bucket name"},
		{map[string]string{"EVENT_STORE_IDEMPOTENCY_MISMATCH_MODE": "ignore"}, "EVENT_STORE_IDEMPOTENCY_MISMATCH_MODE", "error, warn"},
		{map[string]string{"EVENT_STORE_S3_ENDPOINT": "minio:9000"}, "EVENT_STORE_S3_ENDPOINT", "http://"},
		{map[string]string{"EVENT_STORE_S3_ACCESS_KEY_ID": "only-id"}, "EVENT_STORE_S3_ACCESS_KEY_ID", "together"},
		{map[string]string{"ENABLE_PROCESSED_EVENT_REGISTRY": "false"}, "ENABLE_PROCESSED_EVENT_REGISTRY", "not optional"},
		{map[string]string{"ENABLE_PROCESSED_EVENT_REGISTRY": "maybe"}, "ENABLE_PROCESSED_EVENT_REGISTRY", "invalid value"},
		{map[string]string{"PROCESSED_EVENT_HEARTBEAT_INTERVAL_SECONDS": "900"}, "PROCESSED_EVENT_HEARTBEAT_INTERVAL_SECONDS", "shorter than"},
		{map[string]string{"PROCESSED_EVENT_LEASE_TIMEOUT_SECONDS": "-1"}, "PROCESSED_EVENT_LEASE_TIMEOUT_SECONDS", "greater than zero"},
		{map[string]string{"EVENT_PUBLISHER_START_TIMESTAMP": "yesterday"}, "EVENT_PUBLISHER_START_TIMESTAMP", "RFC 3339"},
		{map[string]string{"EVENT_PUBLISHER_DEDUP_CHECKPOINT_MAX_EVENTS": "20000"}, "EVENT_PUBLISHER_DEDUP_CHECKPOINT_MAX_EVENTS", "must not exceed"},
		{map[string]string{"EVENT_PUBLISHER_POLL_INTERVAL": "0"}, "EVENT_PUBLISHER_POLL_INTERVAL", "greater than zero"},
		{map[string]string{"EVENT_PUBLISHER_CHECKPOINT_MAX_RECORDS": "0"}, "EVENT_PUBLISHER_CHECKPOINT_MAX_RECORDS", "at least 1"},
		{map[string]string{"EVENT_PUBLISHER_CHECKPOINT_INTERVAL": "0"}, "EVENT_PUBLISHER_CHECKPOINT_INTERVAL", "greater than zero"},
		{map[string]string{"KAFKA_BROKERS": "localhost"}, "KAFKA_BROKERS", "host:port"},
		{map[string]string{"KAFKA_SASL_MECHANISM": "GSSAPI"}, "KAFKA_SASL_MECHANISM", "one of"},
		{map[string]string{"WORKER_CONCURRENCY": "0"}, "WORKER_CONCURRENCY", "at least 1"},
		{map[string]string{"WORKER_RETRY_BACKOFF_CAP": "1ms"}, "WORKER_RETRY_BACKOFF_CAP", "at least WORKER_RETRY_BACKOFF_BASE"},
		{map[string]string{"KAFKA_SESSION_TIMEOUT": "2s"}, "KAFKA_SESSION_TIMEOUT", "between 6s and 30m"},
		{map[string]string{"KAFKA_SESSION_TIMEOUT": "1h"}, "KAFKA_SESSION_TIMEOUT", "between 6s and 30m"},
		{map[string]string{"ELASTICSEARCH_URLS": "es:9200"}, "ELASTICSEARCH_URLS", "http://"},
		{map[string]string{"SLUICE_LOG_LEVEL": "loud"}, "SLUICE_LOG_LEVEL", "one of"},
		{map[string]string{"GOGC": "lots"}, "GOGC", "as the Go runtime reads it"},
		{map[string]string{"GOGC": "OFF"}, "GOGC", "as the Go runtime reads it"},
		{map[string]string{"SLUICE_CRASH_POINT": "relay"}, "SLUICE_CRASH_POINT", "<worker>:<point>"},
		{map[string]string{"EVENT_STORE_S3_SECRET_ACCESS_KEY_FILE": "/nonexistent/secret"}, "EVENT_STORE_S3_SECRET_ACCESS_KEY_FILE", "cannot read file"},
	}
	for _, tc := range cases {
		t.Run(tc.wantVar+"/"+tc.wantMsg, func(t *testing.T) {
			_, err := Load(tc.env)
			if err == nil {
				t.Fatalf("Load(%v) succeeded, want an error naming %s", tc.env, tc.wantVar)
			}
			var ve *config.VarError
			if !errors.As(err, &ve) || ve.Var != tc.wantVar {
				t.Fatalf("error %q does not carry VarError for %s", err, tc.wantVar)
			}
			if !strings.Contains(err.Error(), tc.wantVar) || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("error %q should name %s and say %q", err, tc.wantVar, tc.wantMsg)
			}
		})
	}
}

func TestAllErrorsReported(t *testing.T) {
	_, err := Load(map[string]string{"WORKER_CONCURRENCY": "0", "KAFKA_TOPIC_PARTITIONS": "0"})
	if err == nil || !strings.Contains(err.Error(), "WORKER_CONCURRENCY") || !strings.Contains(err.Error(), "KAFKA_TOPIC_PARTITIONS") {
		t.Fatalf("want both variables named, got %v", err)
	}
}

func TestSecretFileAndRedaction(t *testing.T) {
	f := t.TempDir() + "/secret"
	if err := os.WriteFile(f, []byte("s3cr3t-value\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(map[string]string{
		"EVENT_STORE_S3_ACCESS_KEY_ID":          "id",
		"EVENT_STORE_S3_SECRET_ACCESS_KEY_FILE": f,
		"DATABASE_URL":                          "postgres://u:dbpass@h/db",
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.EventStore.S3SecretAccessKey.Value() != "s3cr3t-value" {
		t.Fatalf("secret from file: %q", c.EventStore.S3SecretAccessKey.Value())
	}
	var sb strings.Builder
	slog.New(slog.NewJSONHandler(&sb, nil)).Info("cfg", "config", c)
	out := sb.String() + fmt.Sprintf("%v %+v", c, c)
	for _, leak := range []string{"s3cr3t-value", "dbpass"} {
		if strings.Contains(out, leak) {
			t.Fatalf("secret %q leaked into output: %s", leak, out)
		}
	}
}

// docs/configuration.md is generated from the code; this keeps it in sync.
func TestConfigurationDocMatchesCode(t *testing.T) {
	got, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatalf("read docs/configuration.md: %v (regenerate with `make docs`)", err)
	}
	if string(got) != Markdown() {
		t.Fatal("docs/configuration.md is out of date: run `make docs` and commit the result")
	}
	seen := map[string]bool{}
	for _, v := range Vars() {
		if seen[v.Key] {
			t.Errorf("variable %s declared twice", v.Key)
		}
		seen[v.Key] = true
		if v.Doc == "" {
			t.Errorf("variable %s has no doc", v.Key)
		}
	}
}

// TestGCPercent: GOGC as the Go runtime reads it, as debug.SetGCPercent
// takes it.
func TestGCPercent(t *testing.T) {
	for _, tc := range []struct {
		gogc string
		want int
	}{{"", 400}, {"100", 100}, {"0", 0}, {"off", -1}, {"-1", -1}} {
		env := map[string]string{"PROCESSED_EVENT_OWNER": "w1"}
		if tc.gogc != "" {
			env["GOGC"] = tc.gogc
		}
		c, err := Load(env)
		if err != nil {
			t.Fatalf("GOGC=%q: %v", tc.gogc, err)
		}
		if got := c.Runtime.GCPercent(); got != tc.want {
			t.Errorf("GOGC=%q: GCPercent() = %d, want %d", tc.gogc, got, tc.want)
		}
	}
}

// Consumer group ids follow the topic prefix unless KAFKA_GROUP_PREFIX
// says otherwise; set empty it keeps the unprefixed ids (issue 27 item 3).
func TestGroupPrefix(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"default", map[string]string{}, "sluice.instance-worker"},
		{"follows the topic prefix", map[string]string{"KAFKA_TOPIC_PREFIX": "staging."}, "staging.instance-worker"},
		{"own setting", map[string]string{"KAFKA_TOPIC_PREFIX": "staging.", "KAFKA_GROUP_PREFIX": "team-a."}, "team-a.instance-worker"},
		{"empty keeps the unprefixed id", map[string]string{"KAFKA_TOPIC_PREFIX": "staging.", "KAFKA_GROUP_PREFIX": ""}, "instance-worker"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.env["PROCESSED_EVENT_OWNER"] = "w1"
			cfg, err := Load(c.env)
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.Kafka.Group("instance-worker"); got != c.want {
				t.Fatalf("group %q, want %q", got, c.want)
			}
		})
	}
}
