package worker

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/config"
	"github.com/sluicehq/sluice/shared/crashpoint"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/kafka"
	"github.com/sluicehq/sluice/shared/observability"
)

// Handler runs the side effect of one claimed record. It is called only with
// a live registry lease; ctx is cancelled when the lease is lost (stop before
// any further side effect) or when shutdown runs out of time. It returns the
// outcome recorded by mark_done, or an error classified with Retryable,
// Permanent or ConflictErr (unclassified errors are retried). A handler must
// be idempotent: after a crash the same record runs again.
type Handler interface {
	Handle(ctx context.Context, rec *Record) (claim.Outcome, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, rec *Record) (claim.Outcome, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, rec *Record) (claim.Outcome, error) {
	return f(ctx, rec)
}

// Healer is implemented by handlers with the wait-for-predecessor policy
// (docs/registry.md#sequence-guard-policies-per-handler): when a record has waited for its predecessor for the lease
// timeout (ClaimResult.HealDue), Heal processes the missing slots from the
// event store in order (or finishes empty ones with AdvanceTo). The record is
// claimed again right after a successful Heal.
type Healer interface {
	Heal(ctx context.Context, rec *Record, wait claim.Result) error
}

// Registry is what the runtime needs of the processed-event registry, in
// the runtime's own terms: *registry.Registry implements it, and the
// workers pass one in (the runtime does not import the registry: it sits a
// floor below, docs/architecture.md "Floors"). Tests may fake an outage.
type Registry interface {
	ClaimBatch(ctx context.Context, reqs []claim.Request) ([]claim.Result, error)
	Hold(ctx context.Context, lease claim.Lease) (context.Context, func())
	MarkDoneBatch(ctx context.Context, items []claim.Done) ([]error, error)
	MarkFailed(ctx context.Context, lease claim.Lease, f claim.Failure) (claim.FailResult, error)
	Release(ctx context.Context, lease claim.Lease) error
	GetRow(ctx context.Context, handler, eventID string) (claim.Row, error)
	Check(ctx context.Context) error
}

// Record is one Kafka record with its parsed envelope.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	Headers   []kgo.RecordHeader
	Timestamp time.Time
	// Envelope is the parsed value.
	Envelope envelope.Envelope
	// Attempt is the registry attempt number of this run (1 for the first).
	Attempt int
	// Span is the record's span (poll to offset commit), continuing the
	// traceparent header, when tracing is on; nil when off. Handlers hang
	// their steps under it (tracing.StartChild, tracing.Stage).
	Span trace.Span
}

// Config configures a Consumer: every tunable of the runtime for one
// worker (docs/architecture.md, "One construction convention"). New
// applies the defaults noted to the fields left zero.
type Config struct {
	// Settings is the WORKER_* section: Concurrency bounds the aggregates
	// processed at once, by the handler goroutines of all rounds in flight
	// together (a BatchHandler gets one call per round and bounds its own
	// parallelism); RetryBackoffBase and RetryBackoffCap shape local retries
	// (WAIT, IN_PROGRESS, outages, DLQ produce failures): min(cap,
	// base·2^n) with jitter in [0.5, 1), while retries after a failed
	// attempt use the registry's backoff; SessionTimeout is the
	// consumer-group session timeout, how long a member that stopped
	// heartbeating keeps its partitions; ShutdownTimeout bounds the drain
	// after the Run context ends; PausePoll is how often Deps.Pause is read.
	// Its zero fields take the defaults of its tags.
	Settings
	// Kafka is the KAFKA_* configuration the client is built from
	// (kafka.NewClient: brokers, TLS, SASL, the size budget that bounds a
	// dead letter).
	Kafka kafka.Config
	// Topic is consumed by consumer group Group; DLQTopic receives dead
	// letters. All required.
	Topic, Group, DLQTopic string
	// AdoptGroup, when set and not Group, is an earlier id of the same
	// worker's group (the unprefixed one before KAFKA_GROUP_PREFIX): New
	// copies its committed offsets on Topic to Group when Group has none
	// yet (AdoptOffsets), so that a renamed group goes on where the old one
	// stopped instead of re-reading the topic.
	AdoptGroup string
	// HandlerName is the registry handler ("instanceworker",
	// "projection:{name}:v{version}"), also the DLQ record's handler field
	// and the metrics label. Required.
	HandlerName string
	// Policy is the handler's sequence-guard policy. Required.
	Policy claim.Policy
	// MaxAttempts of a retryable failure before the DLQ: the worker's own
	// (Settings.InstanceMaxRetryAttempts or Settings.ProjectionMaxRetries;
	// default claim.DefaultMaxAttempts).
	MaxAttempts int
	// OutageBackoffCap caps the retry delay while the registry is
	// unreachable (default 5 s), so consumption resumes soon after it
	// returns.
	OutageBackoffCap time.Duration
	// MaxPollRecords bounds one poll, and so one batch of claims (default
	// 500). MaxPending pauses fetching while that many records are
	// unfinished (default 10000).
	MaxPollRecords, MaxPending int
	// RoundsInFlight bounds the rounds whose second half (handler, dead
	// letters, mark_done) runs at once, on disjoint aggregates (default 4;
	// 1 = a round's handling waits for the previous one). More rounds let a
	// record that arrives during a slow round start at once instead of
	// queueing behind it.
	RoundsInFlight int
	// DLQMaxBytes bounds a dead letter's size; a dead letter whose full
	// form (the original embedded) would be larger is written in pointer
	// form (DLQRecord.OriginalTruncated). Default and upper bound: the
	// producer's maximum batch size (kgo.ProducerBatchMaxBytes: the size
	// budget of Kafka, kafka.Budget, which the DLQ topics sluice creates
	// also get as max.message.bytes). A broker that refuses a full dead letter as
	// too large (a smaller max.message.bytes on the DLQ topic) gets the
	// pointer form too.
	DLQMaxBytes int
	// Limits are the envelope limits Parse enforces (default
	// envelope.DefaultLimits()).
	Limits envelope.Limits
}

// Deps are the resources of a Consumer; it closes none of them.
type Deps struct {
	// Registry claims and settles the records; Handler runs their side
	// effects. Both required.
	Registry Registry
	Handler  Handler
	// AggregateKey maps an envelope to the registry's aggregate id and the
	// ordering unit. Default: DefaultAggregateKey (envelope.AggregateKey).
	AggregateKey func(envelope.Envelope) string
	Logger       *slog.Logger
	// Metrics receives the runtime's collectors (default: a private registry).
	Metrics prometheus.Registerer
	// TracerProvider traces each record from its poll to its offset commit
	// (docs/tracing.md); nil or a no-op provider: off.
	TracerProvider trace.TracerProvider
	// Health, when set, gets the readiness check "<handler>:registry" (red
	// during a registry outage), one "<handler>:<dependency>" per
	// dependency the handler reported out (red during its outage), and the
	// liveness heartbeat "<handler>:loop".
	Health *observability.Health
	// Pause, when set, is read every PausePoll: while it reports the group
	// paused (an operator's `sluice consumer pause`), the consumer fetches
	// nothing new; what it already fetched finishes and is committed. It
	// stays in the group and ready. An error keeps the last known state.
	Pause PauseSource
}

// Option is a test hook of a Consumer (docs/architecture.md, "One
// construction convention"); production passes none but WithCrasher.
type Option func(*hooks)

type hooks struct {
	crash       *crashpoint.Crasher
	crashWorker string
	kafkaOpts   []kgo.Opt
}

// WithCrasher hands the runtime its crash points after_claim,
// before_mark_done and before_commit, named for worker (the worker that
// runs the runtime, e.g. "instanceworker": "instanceworker:after_claim").
func WithCrasher(c *crashpoint.Crasher, worker string) Option {
	return func(h *hooks) { h.crash, h.crashWorker = c, worker }
}

// WithKafkaOpts adds client options last, after the runtime's own (tests:
// a short session timeout, a logger).
func WithKafkaOpts(opts ...kgo.Opt) Option {
	return func(h *hooks) { h.kafkaOpts = append(h.kafkaOpts, opts...) }
}

// PauseSource says whether an operator paused a consumer group
// (registry.Registry satisfies it).
type PauseSource interface {
	Paused(ctx context.Context, group string) (bool, error)
}

// withDefaults returns c with every default applied, or why c cannot
// configure a consumer.
func (c Config) withDefaults() (Config, error) {
	switch {
	case len(c.Kafka.Brokers) == 0:
		return c, errors.New("consumer: no brokers")
	case c.Topic == "" || c.Group == "" || c.DLQTopic == "":
		return c, errors.New("consumer: Topic, Group and DLQTopic are required")
	case c.HandlerName == "":
		return c, errors.New("consumer: HandlerName is required")
	case !c.Policy.Valid():
		return c, errors.New("consumer: Policy is required")
	}
	config.FillZero(&c.Settings, "WORKER_ROUND_LINGER", "WORKER_COMMIT_INTERVAL") // 0: no linger, a commit every turn
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = claim.DefaultMaxAttempts
	}
	if c.OutageBackoffCap <= 0 {
		c.OutageBackoffCap = 5 * time.Second
	}
	if c.MaxPollRecords <= 0 {
		c.MaxPollRecords = 500
	}
	if c.RoundsInFlight <= 0 {
		c.RoundsInFlight = DefaultRoundsInFlight
	}
	if c.MaxPending <= 0 {
		c.MaxPending = 10000
	}
	if c.Limits == (envelope.Limits{}) {
		c.Limits = envelope.DefaultLimits()
	}
	return c, nil
}

// withDefaults returns d with the defaults of the optional resources, or
// which required one is missing.
func (d Deps) withDefaults() (Deps, error) {
	if d.Registry == nil || d.Handler == nil {
		return d, errors.New("consumer: Registry and Handler are required")
	}
	if d.AggregateKey == nil {
		d.AggregateKey = DefaultAggregateKey
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	if d.Metrics == nil {
		d.Metrics = prometheus.NewRegistry()
	}
	return d, nil
}

// DefaultAggregateKey is envelope.AggregateKey: aggregate_type + ":" +
// aggregate_id, escaped with "~" when the id starts with "~" or "sha256:",
// or for ids too long for the registry aggregate_type + ":sha256:" + the
// hex SHA-256 of the id; distinct aggregates never share a key.
func DefaultAggregateKey(e envelope.Envelope) string {
	return envelope.AggregateKey(e.AggregateType, e.AggregateID)
}

// BatchHandler is an optional interface of a Handler: when the configured
// Handler implements it, the runtime calls HandleBatch once per round with
// every record it claimed in that round instead of calling Handle per
// record. recs are in offset order per partition; all hold live leases
// (ctx is cancelled when one of them is lost or shutdown runs out of time).
// A round selects at most one claimable record per aggregate, so a batch
// holds no two records of one aggregate today; should it, they are in
// offset order and the handler must apply them in that order. Up to
// Config.RoundsInFlight calls run at once, always on disjoint aggregates. It returns one BatchResult per record,
// at the same index; each is settled exactly as Handle's answer would be
// (mark_done in one batch for the successes; retry, DLQ or conflict for
// the failures). Records the handler did not finish because ctx was
// cancelled should report ctx's error.
type BatchHandler interface {
	HandleBatch(ctx context.Context, recs []*Record) []BatchResult
}

// BatchResult is the answer of HandleBatch for one record: what Handle
// would have returned.
type BatchResult struct {
	Outcome claim.Outcome
	Err     error
}
