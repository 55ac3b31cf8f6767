package relay

import (
	"crypto/tls"
	"fmt"
	"math"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/sluicehq/sluice/shared/config"
)

// KafkaOpts returns the client options for the configured brokers, TLS and
// SASL (docs/architecture.md#security-and-bad-input). The password never appears in errors.
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

// BudgetOpts size the producer to the Kafka size budget (SizeBudget,
// topics.MessageBudget): its largest record batch is maxMessageBytes, the
// number the relay's topics get as max.message.bytes.
func BudgetOpts(maxMessageBytes int) []kgo.Opt {
	if maxMessageBytes <= 0 {
		return nil
	}
	return []kgo.Opt{kgo.ProducerBatchMaxBytes(int32(min(maxMessageBytes, math.MaxInt32)))}
}

// ProducerOpts are the producer settings of docs/relay.md#what-it-does-per-cycle: idempotent (the
// default), acks=all, bounded buffering; records are never failed by a
// delivery timeout (an outage pauses the relay instead).
func ProducerOpts(maxBuffered int) []kgo.Opt {
	return []kgo.Opt{
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.MaxBufferedRecords(max(maxBuffered, 1000)),
		kgo.ProducerLinger(0),
	}
}
