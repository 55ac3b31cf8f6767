// Package kafka builds every Kafka client of sluice and creates its topics,
// from the one KAFKA_* configuration: the relay's producers, the workers'
// consumer-group clients (which also produce dead letters), the projection
// rebuild and the operator commands (republish, dlq, consumer offsets).
//
// It keeps two guarantees that used to depend on which process happened to
// run first:
//
//   - Every client connects the same way: seed brokers, TLS (1.2 or later)
//     and SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) as configured, and
//     produces with acks=all, no linger and the one size budget as its
//     largest record batch (Budget).
//   - Every topic sluice creates gets KAFKA_TOPIC_PARTITIONS,
//     KAFKA_TOPIC_REPLICATION_FACTOR and the size budget as
//     max.message.bytes (TopicSpec, EnsureTopics), whichever process
//     creates it; a topic that exists keeps its settings. Records are never
//     produced to a topic the broker would auto-create with other settings
//     (docs/architecture.md#no-lost-work).
//
// The size budget (MessageBudget) is the one number from the event store to
// the broker: any envelope the store accepted can be produced unless the
// broker's own limit is lower (then the relay parks the record;
// docs/relay.md).
package kafka

import (
	"crypto/tls"
	"fmt"
	"math"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/sluicehq/sluice/shared/config"
	"github.com/sluicehq/sluice/shared/envelope"
)

// Budget is the size budget of c: KAFKA_MAX_MESSAGE_BYTES as the loaded
// configuration derived it (EVENT_STORE_MAX_ENVELOPE_BYTES plus the key and
// header bound when unset), or, for a configuration built by hand with it
// zero, the budget of the default envelope limits.
func Budget(c Config) int {
	if c.MaxMessageBytes > 0 {
		return c.MaxMessageBytes
	}
	return MessageBudget(envelope.DefaultLimits().MaxEnvelopeBytes, envelope.DefaultLimits().MaxMetadataBytes)
}

// TopicSpec is how sluice creates a missing topic: KAFKA_TOPIC_PARTITIONS,
// KAFKA_TOPIC_REPLICATION_FACTOR and max.message.bytes = Budget.
func TopicSpec(c Config) Spec {
	return Spec{Partitions: c.TopicPartitions, Replication: c.ReplicationFactor, MaxMessageBytes: Budget(c)}
}

// Opts returns the client options of c: seed brokers, TLS, SASL and the
// producer settings every sluice client shares — acks=all (with franz-go's
// default idempotence), no linger, and Budget as the largest record batch
// (ProducerBatchMaxBytes). Consumers and admin clients get the producer
// settings too: they cost nothing, and the workers produce dead letters
// with their consumer client. The SASL password never appears in errors.
func Opts(c Config) ([]kgo.Opt, error) {
	opts := []kgo.Opt{kgo.SeedBrokers(c.Brokers...)}
	if c.TLS {
		opts = append(opts, kgo.DialTLSConfig(&tls.Config{MinVersion: tls.VersionTLS12}))
	}
	user, pass := c.SASLUsername, c.SASLPassword.Value()
	switch c.SASLMechanism {
	case "":
	case "PLAIN":
		opts = append(opts, kgo.SASL(plain.Auth{User: user, Pass: pass}.AsMechanism()))
	case "SCRAM-SHA-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha256Mechanism()))
	case "SCRAM-SHA-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()))
	default:
		return nil, &config.VarError{Var: "KAFKA_SASL_MECHANISM", Value: c.SASLMechanism, Reason: "must be one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (or empty)"}
	}
	return append(opts,
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
		kgo.ProducerBatchMaxBytes(int32(min(Budget(c), math.MaxInt32))),
	), nil
}

// NewClient returns a client with Opts(c) followed by extra (which may
// override them: a consumer group, consumed partitions, test hooks).
func NewClient(c Config, extra ...kgo.Opt) (*kgo.Client, error) {
	opts, err := Opts(c)
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka: client: %w", err)
	}
	return cl, nil
}

// MaxBuffered bounds the records a producer buffers before Produce blocks
// (docs/relay.md#what-it-does-per-cycle: bounded buffering); at least 1,000, so that a small flush
// batch does not starve the pipeline.
func MaxBuffered(n int) kgo.Opt { return kgo.MaxBufferedRecords(max(n, 1000)) }
