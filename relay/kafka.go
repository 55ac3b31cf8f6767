package relay

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/sluicehq/sluice/shared/config"
)

// KafkaOpts returns the client options for the configured brokers, TLS and
// SASL (SPEC §14). The password never appears in errors.
func KafkaOpts(k config.Kafka) ([]kgo.Opt, error) {
	opts := []kgo.Opt{kgo.SeedBrokers(k.Brokers...)}
	if k.TLS {
		opts = append(opts, kgo.DialTLSConfig(&tls.Config{MinVersion: tls.VersionTLS12}))
	}
	user, pass := k.SASLUsername, k.SASLPassword.Value()
	switch strings.ToUpper(k.SASLMechanism) {
	case "":
	case "PLAIN":
		opts = append(opts, kgo.SASL(plain.Auth{User: user, Pass: pass}.AsMechanism()))
	case "SCRAM-SHA-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha256Mechanism()))
	case "SCRAM-SHA-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()))
	default:
		return nil, fmt.Errorf("relay: KAFKA_SASL_MECHANISM %q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", k.SASLMechanism)
	}
	return opts, nil
}

// ProducerOpts are the producer settings of SPEC §6.1: idempotent (the
// default), acks=all, bounded buffering; records are never failed by a
// delivery timeout (an outage pauses the relay instead).
func ProducerOpts(maxBuffered int) []kgo.Opt {
	return []kgo.Opt{
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.MaxBufferedRecords(max(maxBuffered, 1000)),
		kgo.ProducerLinger(0),
	}
}

// EnsureTopics creates the topics that do not exist yet with the
// configured partitions and replication factor; TOPIC_ALREADY_EXISTS is
// success.
func EnsureTopics(ctx context.Context, cl *kgo.Client, partitions, replication int, topics ...string) error {
	if len(topics) == 0 {
		return nil
	}
	adm := kadm.NewClient(cl)
	rs, err := adm.CreateTopics(ctx, int32(partitions), int16(replication), nil, topics...)
	if err != nil {
		return fmt.Errorf("relay: create topics %v: %w", topics, err)
	}
	var errs []error
	for _, r := range rs.Sorted() {
		if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
			errs = append(errs, fmt.Errorf("relay: create topic %s: %w", r.Topic, r.Err))
		}
	}
	return errors.Join(errs...)
}
