package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// FramingBytes bounds the bytes of one relay record batch that are neither
// its value (the envelope line) nor taken from the envelope's metadata: the
// header names (≈110 bytes), the header values copied from bounded envelope
// fields (event_id 36, event_type 128, kind 7, aggregate_type 64,
// aggregate_id 512, sequence_number and position 20 each, content-type 16),
// the default key aggregate_type:aggregate_id (577), the varint framing of
// the record and its headers (≈150) and the record-batch header (61): about
// 1.7 KiB, rounded up to 4 KiB.
const FramingBytes = 4096

// KeyHeadersBound bounds what a relay record adds to its envelope line: the
// key and the headers. Metadata-derived parts (metadata.ordering_key as the
// key, traceparent and tracestate as headers) all come from the one
// metadata object, at most maxMetadataBytes (EVENT_STORE_MAX_METADATA_BYTES)
// together; the rest is FramingBytes.
func KeyHeadersBound(maxMetadataBytes int) int { return max(maxMetadataBytes, 0) + FramingBytes }

// MessageBudget is the one size budget for Kafka: the largest record batch
// the relay produces (franz-go's ProducerBatchMaxBytes) and the
// max.message.bytes of the topics sluice creates. It is the store's envelope
// limit (EVENT_STORE_MAX_ENVELOPE_BYTES, which bounds the stored line) plus
// KeyHeadersBound: with the defaults 1,048,576 + 16,384 + 4,096 = 1,069,056
// bytes.
func MessageBudget(maxEnvelopeBytes, maxMetadataBytes int) int {
	return maxEnvelopeBytes + KeyHeadersBound(maxMetadataBytes)
}

// Spec is how missing topics are created.
type Spec struct {
	Partitions  int
	Replication int
	// MaxMessageBytes, when positive, is the topic's max.message.bytes
	// (MessageBudget); 0 leaves the broker's default.
	MaxMessageBytes int
}

// TopicError is the failure to create one topic. Callers branch on it with
// errors.As: Err is the broker's answer (a *kerr.Error when it refused), and
// Collides names an existing topic that differs only by '.' versus '_' when
// the broker refused the name for that reason.
type TopicError struct {
	Topic    string
	Collides string
	Err      error
}

func (e *TopicError) Error() string {
	if e.Collides != "" {
		return fmt.Sprintf("kafka: create topic %s: collides with existing topic %s ('.' and '_' are the same to Kafka): %v", e.Topic, e.Collides, e.Err)
	}
	return fmt.Sprintf("kafka: create topic %s: %v", e.Topic, e.Err)
}

func (e *TopicError) Unwrap() error { return e.Err }

// ValidName checks a topic name against Kafka's rule: 1 to 249 characters
// of [A-Za-z0-9._-], not "." or "..". An invalid name is refused with
// kerr.InvalidTopicException, as the broker would.
func ValidName(name string) error {
	if name == "" || len(name) > 249 || name == "." || name == ".." {
		return fmt.Errorf("topic name %q: must be 1..249 characters and not \".\" or \"..\": %w", name, kerr.InvalidTopicException)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("topic name %q: character %q is not one of [A-Za-z0-9._-]: %w", name, c, kerr.InvalidTopicException)
		}
	}
	return nil
}

// EnsureTopics creates the topics that do not exist yet as the
// configuration says (TopicSpec: KAFKA_TOPIC_PARTITIONS,
// KAFKA_TOPIC_REPLICATION_FACTOR and the size budget as max.message.bytes).
// Every sluice process creates topics through it or EnsureSpec, so a topic
// has the same settings whichever process created it first.
func EnsureTopics(ctx context.Context, cl *kgo.Client, c Config, names ...string) error {
	return EnsureSpec(ctx, cl, TopicSpec(c), names...)
}

// EnsureSpec creates the topics that do not exist yet with spec;
// TOPIC_ALREADY_EXISTS is success (an existing topic keeps its settings).
// The error joins one *TopicError per topic that could not be created; a
// name that breaks Kafka's rule (ValidName) is refused without asking the
// broker. A request that failed as a whole is returned as it is.
func EnsureSpec(ctx context.Context, cl *kgo.Client, spec Spec, names ...string) error {
	var errs []error
	valid := make([]string, 0, len(names))
	for _, n := range names {
		if err := ValidName(n); err != nil {
			errs = append(errs, &TopicError{Topic: n, Err: err})
			continue
		}
		valid = append(valid, n)
	}
	if len(valid) == 0 {
		return errors.Join(errs...)
	}
	var configs map[string]*string
	if spec.MaxMessageBytes > 0 {
		v := strconv.Itoa(spec.MaxMessageBytes)
		configs = map[string]*string{"max.message.bytes": &v}
	}
	adm := kadm.NewClient(cl)
	rs, err := adm.CreateTopics(ctx, int32(spec.Partitions), int16(spec.Replication), configs, valid...)
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("kafka: create topic %v: %w", valid, err))...)
	}
	for _, r := range rs.Sorted() {
		if r.Err == nil || errors.Is(r.Err, kerr.TopicAlreadyExists) {
			continue
		}
		te := &TopicError{Topic: r.Topic, Err: r.Err}
		if r.ErrMessage != "" {
			te.Err = fmt.Errorf("%w (%s)", r.Err, r.ErrMessage)
		}
		if errors.Is(r.Err, kerr.InvalidTopicException) {
			te.Collides = collision(ctx, adm, r.Topic)
		}
		errs = append(errs, te)
	}
	return errors.Join(errs...)
}

// collision returns an existing topic whose name differs from name only by
// '.' versus '_', or "" (none, or the topics could not be listed).
func collision(ctx context.Context, adm *kadm.Client, name string) string {
	td, err := adm.ListTopics(ctx)
	if err != nil {
		return ""
	}
	norm := strings.ReplaceAll(name, ".", "_")
	for _, t := range td.Names() {
		if t != name && strings.ReplaceAll(t, ".", "_") == norm {
			return t
		}
	}
	return ""
}
