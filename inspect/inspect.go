package inspect

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/elastic/go-elasticsearch/v8"
	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/relay"
	"github.com/sluicehq/sluice/shared/envelope"
)

// Errors callers branch on (errors.Is).
var (
	// ErrNotFound: no committed event has the id, as event_id or as
	// command_id.
	ErrNotFound = errors.New("inspect: not found")
	// ErrInvalid: the request itself is malformed (an empty id, a bad
	// aggregate type).
	ErrInvalid = errors.New("inspect: invalid request")
)

// Defaults of the settings.
const (
	DefaultScanLimit = 5000
	DefaultClockSkew = time.Minute
	DefaultPageSize  = 50
	MaxPageSize      = 500
)

// Handler names one worker of the pipeline: its registry handler, its
// consumer group and the kind of event it consumes. Trace shows a handler
// that has no row for an event yet as pending, and names the group of an
// offset commit by its handler.
type Handler struct {
	Name  string
	Group string
	Kind  envelope.Kind
}

// SequenceReader returns an aggregate's last handed-out sequence number
// (*eventstore.Store implements it).
type SequenceReader interface {
	LastSequence(ctx context.Context, aggregateType, aggregateID string) (int64, error)
}

// settings are what an Inspector works with, made by New from its Config
// and Deps (and its Options).
type settings struct {
	Store     *eventstore.Store
	Registry  *registry.Registry
	Sequences SequenceReader
	// Handlers are the workers of the deployment (instance worker,
	// projections).
	Handlers []Handler
	// Router routes an envelope to its topic as the relay does.
	Router *relay.Router
	// Checkpoint and Parked are the relay's checkpoint and parked records;
	// RelayName is the relay's name (EVENT_PUBLISHER_NAME).
	Checkpoint *relay.CheckpointStore
	Parked     *relay.ParkedStore
	RelayName  string
	// KafkaOpts connect to the brokers (kafka.Opts); nil: no Kafka.
	KafkaOpts []kgo.Opt
	// ES reads documents; IndexPrefix is ELASTICSEARCH_INDEX_PREFIX.
	ES          *elasticsearch.Client
	IndexPrefix string
	// ScanLimit bounds the records read back per lookup of a published
	// record (default 5000); ClockSkew is how far before the append the
	// read-back starts (default 1 minute), for clocks that disagree.
	ScanLimit int
	ClockSkew time.Duration
}

// Inspector answers Trace and Aggregate. It is safe for concurrent use;
// Close releases its Kafka client.
type Inspector struct {
	o   settings
	kcl *kgo.Client
	adm *kadm.Client
}

// build returns an Inspector of o.
func build(o settings) (*Inspector, error) {
	if o.Store == nil || o.Registry == nil || o.Sequences == nil {
		return nil, errors.New("inspect: Deps.Store, Registry and Sequences are required")
	}
	if o.ScanLimit <= 0 {
		o.ScanLimit = DefaultScanLimit
	}
	if o.ClockSkew <= 0 {
		o.ClockSkew = DefaultClockSkew // the trace's tolerance, not the default of SLUICE_AUTH_OIDC_CLOCK_SKEW
	}
	if o.RelayName == "" {
		o.RelayName = "default"
	}
	in := &Inspector{o: o}
	if o.KafkaOpts != nil {
		cl, err := kgo.NewClient(o.KafkaOpts...)
		if err != nil {
			return nil, fmt.Errorf("inspect: kafka client: %w", err)
		}
		in.kcl, in.adm = cl, kadm.NewClient(cl)
	}
	return in, nil
}

// Close releases the Kafka client.
func (in *Inspector) Close() {
	if in.kcl != nil {
		in.kcl.Close()
	}
}

// States of a step.
const (
	StateDone    = "done"    // the step happened
	StatePending = "pending" // not yet (or still running)
	StateFailed  = "failed"  // failed; will be retried
	StateDead    = "dead"    // failed for good (DLQ)
	StateParked  = "parked"  // the relay parked the record
	StateSkipped = "skipped" // finished without effect (stale, dropped)
	StateUnknown = "unknown" // cannot be told (a dependency unreachable or not configured)
)

// Step is one step of an event's way through the pipeline. Only the fields
// of its kind are set.
type Step struct {
	// Step: accepted, emitted, appended, published, parked, handled,
	// document, offset_commit.
	Step  string    `json:"step"`
	State string    `json:"state"`
	At    time.Time `json:"at,omitzero"`
	// Detail says what the state means in words.
	Detail string `json:"detail,omitempty"`

	Position  int64  `json:"position,omitempty"`
	Sequence  int64  `json:"sequence,omitempty"`
	Segment   string `json:"segment,omitempty"`
	Topic     string `json:"topic,omitempty"`
	Partition *int32 `json:"partition,omitempty"`
	Offset    *int64 `json:"offset,omitempty"`

	Handler     string    `json:"handler,omitempty"`
	Status      string    `json:"status,omitempty"`
	Attempts    int       `json:"attempts,omitempty"`
	Owner       string    `json:"owner,omitempty"`
	StartedAt   time.Time `json:"started_at,omitzero"`
	NextAttempt time.Time `json:"next_attempt_at,omitzero"`
	Error       string    `json:"error,omitempty"`
	Outcome     string    `json:"outcome,omitempty"`

	Index   string `json:"index,omitempty"`
	DocID   string `json:"doc_id,omitempty"`
	Version *int64 `json:"version,omitempty"`

	Group     string `json:"group,omitempty"`
	Committed *int64 `json:"committed_offset,omitempty"`
}

// EventTrace is the way of one stored event.
type EventTrace struct {
	EventID       string    `json:"event_id"`
	Kind          string    `json:"kind"`
	EventType     string    `json:"event_type"`
	AggregateType string    `json:"aggregate_type"`
	AggregateID   string    `json:"aggregate_id"`
	Sequence      int64     `json:"sequence_number"`
	Position      int64     `json:"position"`
	OccurredAt    time.Time `json:"occurred_at,omitzero"`
	// Principal is who appended it (metadata.principal, docs/security.md#who-did-it).
	Principal string `json:"principal,omitempty"`
	Steps     []Step `json:"steps"`
}

// Trace is the answer of Inspector.Trace: the command (when there is one)
// and the domain event of its slot, each with its steps in order.
type Trace struct {
	ID        string       `json:"id"`
	CommandID string       `json:"command_id,omitempty"`
	Events    []EventTrace `json:"events"`
	// Warnings name the sources that could not be read (the steps they
	// answer are "unknown").
	Warnings []string `json:"warnings,omitempty"`
}

// eventIDForCommand is api.EventIDForCommand (the api package is on this
// floor; a test keeps the two equal): a UUID command_id is the command's
// event_id, any other is mapped to a name-based UUID.
func eventIDForCommand(commandID string) string {
	if envelope.IsCanonicalUUID(commandID) && commandID != uuid.Nil.String() {
		return commandID
	}
	return uuid.NewSHA1(envelope.Namespace(), []byte("sluice:command:"+commandID)).String()
}
