package kafka

import (
	"strings"

	"github.com/sluicehq/sluice/shared/config"
	"github.com/sluicehq/sluice/shared/recordformat"
)

// Config configures the brokers and topics (docs/architecture.md#security-and-bad-input).
type Config struct {
	Brokers           []string      `env:"KAFKA_BROKERS" envDefault:"localhost:9092" envSeparator:"," doc:"Comma-separated seed brokers."`
	TopicPrefix       string        `env:"KAFKA_TOPIC_PREFIX" envDefault:"sluice." doc:"Prefix of the default topic names."`
	GroupPrefix       string        `env:"KAFKA_GROUP_PREFIX" docDefault:"KAFKA_TOPIC_PREFIX" doc:"Prefix of every consumer group id ({prefix}instance-worker, {prefix}projection-{name}-v{N}), so that two pipelines on one cluster never share a group. Empty keeps the unprefixed ids of earlier versions; a worker whose prefixed group has committed nothing yet first takes over the unprefixed group's offsets (docs/operations.md)."`
	CommandsTopic     string        `env:"COMMANDS_TOPIC" docDefault:"{prefix}commands" doc:"Commands topic."`
	EventsTopic       string        `env:"EVENTS_TOPIC" docDefault:"{prefix}events" doc:"Domain events topic."`
	CommandsDLQTopic  string        `env:"COMMANDS_DLQ_TOPIC" docDefault:"{prefix}commands.dlq" doc:"Dead-letter topic of the instance worker."`
	EventsDLQTopic    string        `env:"EVENTS_DLQ_TOPIC" docDefault:"{prefix}events.dlq" doc:"Dead-letter topic of the projection worker."`
	TopicPartitions   int           `env:"KAFKA_TOPIC_PARTITIONS" envDefault:"12" doc:"Partitions of topics created at start-up."`
	ReplicationFactor int           `env:"KAFKA_TOPIC_REPLICATION_FACTOR" envDefault:"3" doc:"Replication factor of topics created at start-up (1 in dev)."`
	TLS               bool          `env:"KAFKA_TLS" envDefault:"false" doc:"Connect with TLS."`
	SASLMechanism     string        `env:"KAFKA_SASL_MECHANISM" doc:"SASL mechanism: empty, PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512."`
	SASLUsername      string        `env:"KAFKA_SASL_USERNAME" file:"true" doc:"SASL user."`
	SASLPassword      config.Secret `env:"KAFKA_SASL_PASSWORD" file:"true" doc:"SASL password (never logged)."`
	RecordFormat      string        `env:"KAFKA_RECORD_FORMAT" envDefault:"envelope" doc:"Format of the records the relay publishes: envelope (the stored envelope as the value) or cloudevents (the binary content mode of the CloudEvents Kafka binding: the data as the value, ce_ headers). Readers detect the format per record, so a rolling restart switches it (docs/kafka.md)."`
	MaxMessageBytes   int           `env:"KAFKA_MAX_MESSAGE_BYTES" envDefault:"0" docDefault:"EVENT_STORE_MAX_ENVELOPE_BYTES + EVENT_STORE_MAX_METADATA_BYTES + 4096" doc:"Largest record batch the relay produces and max.message.bytes of the topics it creates (0 = derived from the envelope limit); a value below the derived budget fails sluice config check."`
}

// DefaultConfig is the section with the defaults of its tags, as a process
// with none of its variables set reads it (before Derive).
func DefaultConfig() Config {
	var c Config
	config.Defaults(&c)
	return c
}

// Format returns the record format the relay publishes
// (KAFKA_RECORD_FORMAT; envelope when unset in a configuration built in Go).
func (c Config) Format() recordformat.Format {
	f, err := recordformat.Parse(c.RecordFormat)
	if err != nil { // Validate refuses it; a hand-built Config falls back
		return recordformat.Envelope
	}
	return f
}

// Group returns the consumer group id of a worker's base group name
// ("instance-worker", "projection-history-v1"): GroupPrefix + base.
func (c Config) Group(base string) string { return c.GroupPrefix + base }

// Derive names the topics left unset after KAFKA_TOPIC_PREFIX.
func (c *Config) Derive() {
	for dst, suffix := range map[*string]string{
		&c.CommandsTopic: "commands", &c.EventsTopic: "events",
		&c.CommandsDLQTopic: "commands.dlq", &c.EventsDLQTopic: "events.dlq",
	} {
		if *dst == "" {
			*dst = c.TopicPrefix + suffix
		}
	}
}

// Validate checks the section; every problem is a *config.VarError.
func (kf Config) Validate() error {
	k := &config.Checker{}
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
	k.OneOf("KAFKA_RECORD_FORMAT", kf.RecordFormat, recordformat.Formats...)
	return k.Err()
}
