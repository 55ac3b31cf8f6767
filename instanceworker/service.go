package instanceworker

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/elastic/go-elasticsearch/v8"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/config"
	"github.com/sluicehq/sluice/shared/crashpoint"
	"github.com/sluicehq/sluice/shared/kafka"
	"github.com/sluicehq/sluice/shared/observability"
	"github.com/sluicehq/sluice/worker"
)

// Deps are the resources a Service runs on; the caller owns and closes them.
type Deps struct {
	// Pool holds the processed-event registry (the registry role,
	// REGISTRY_DATABASE_URL: docs/scale-out.md); Store has its own. Pool,
	// Store and ES are required.
	Pool  *pgxpool.Pool
	Store Store
	// ES is the Elasticsearch client (readmodel.NewClient).
	ES      *elasticsearch.Client
	Logger  *slog.Logger
	Metrics prometheus.Registerer
	Health  *observability.Health
	// TracerProvider traces each command (docs/tracing.md); nil: off.
	TracerProvider trace.TracerProvider
}

// Config is what the instance worker reads of the process configuration: the
// sections it shares with the other services, each declared by the package
// it configures (shared/config is the mechanism; pipeline/sluiceconfig fills it
// for the sluice binary, and config.Parse reads it alone), and the knobs of
// its handler that have no variable.
type Config struct {
	Kafka         kafka.Config
	EventStore    eventstore.Config
	Registry      registry.Config
	Worker        worker.Settings
	Elasticsearch readmodel.Config
	Testing       crashpoint.Config

	// The knobs below have no variable of their own (Go only); New applies
	// their defaults when zero.

	// IndexVersion is the instances index version (default
	// readmodel.DefaultVersion).
	IndexVersion int
	// ESRetry repeats transient Elasticsearch failures (429, 5xx, transport)
	// within one attempt at a command (default 3 repetitions, 50 ms to 2 s),
	// so that a short 429 storm does not use up the command's attempts.
	ESRetry readmodel.Retry
	// RebuildProgressEvery is how often the rebuild of a lost index logs
	// its progress (default DefaultRebuildProgressEvery, 5 s).
	RebuildProgressEvery time.Duration
}

// withDefaults returns c with the defaults of what the handler reads when
// left zero: ELASTICSEARCH_INDEX_PREFIX, the WORKER_* section (on the last
// of the INSTANCE_WORKER_MAX_RETRY_ATTEMPTS, a document write that still
// fails after the domain event was appended finishes the command as
// applied with a stale read model instead of dead-lettering it) and the
// Go-only knobs.
func (c Config) withDefaults() Config {
	if c.Elasticsearch.IndexPrefix == "" {
		c.Elasticsearch.IndexPrefix = readmodel.DefaultConfig().IndexPrefix
	}
	config.FillZero(&c.Worker) // as the runtime fills its copy
	if c.IndexVersion <= 0 {
		c.IndexVersion = readmodel.DefaultVersion
	}
	if c.ESRetry == (readmodel.Retry{}) {
		c.ESRetry = readmodel.Retry{Tries: 3, Base: 50 * time.Millisecond, Cap: 2 * time.Second}
	}
	if c.RebuildProgressEvery <= 0 {
		c.RebuildProgressEvery = DefaultRebuildProgressEvery
	}
	return c
}

// Option is a test hook of a Service (docs/architecture.md, "One
// construction convention"); production passes none. The crash points come
// from the Testing section (SLUICE_CRASH_POINT).
type Option func(*hooks)

type hooks struct {
	kafkaOpts []kgo.Opt
}

// WithKafkaOpts adds client options to the runtime's Kafka client, after
// its own (tests: a short session timeout, a logger); TLS and SASL come
// from the configuration.
func WithKafkaOpts(opts ...kgo.Opt) Option {
	return func(h *hooks) { h.kafkaOpts = append(h.kafkaOpts, opts...) }
}

// Service is a running instance worker: the runtime consuming the commands
// topic with a Worker as handler.
type Service struct {
	cfg    Config
	worker *Worker
	cons   *worker.Consumer
	reg    *registry.Registry
	log    *slog.Logger
}

// New builds the instance worker of `sluice instance-worker` (and `sluice
// dev`) from the process configuration: registry (handler
// "instanceworker", wait-for-predecessor), consumer group "instance-worker"
// on COMMANDS_TOPIC with dead letters to COMMANDS_DLQ_TOPIC, crash points
// from SLUICE_CRASH_POINT. Run it with Run.
func New(cfg Config, d Deps, opts ...Option) (*Service, error) {
	if !cfg.Registry.Enabled {
		return nil, errors.New("instanceworker: ENABLE_PROCESSED_EVENT_REGISTRY=false is not supported: the registry is not optional")
	}
	if d.Pool == nil || d.Store == nil || d.ES == nil {
		return nil, errors.New("instanceworker: Pool, Store and ES are required")
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	var h hooks
	for _, o := range opts {
		o(&h)
	}
	cfg = cfg.withDefaults()
	reg, err := registry.New(cfg.Registry.WithRetry(cfg.Worker.InstanceRetry()), registry.Deps{Pool: d.Pool})
	if err != nil {
		return nil, err
	}
	crash, err := crashpoint.New(cfg.Testing.CrashPoint, cfg.Testing.CrashMarkerDir)
	if err != nil {
		return nil, err
	}
	w, err := newWorker(cfg, d, reg, crash)
	if err != nil {
		return nil, err
	}
	cons, err := worker.New(worker.Config{
		Settings: cfg.Worker, MaxAttempts: cfg.Worker.InstanceMaxRetryAttempts, Kafka: cfg.Kafka,
		Topic: cfg.Kafka.CommandsTopic, Group: cfg.Kafka.Group(GroupName), AdoptGroup: GroupName, DLQTopic: cfg.Kafka.CommandsDLQTopic,
		HandlerName: HandlerName, Policy: claim.WaitForPredecessor, Limits: cfg.EventStore.Limits,
	}, worker.Deps{
		Registry: reg, Handler: w, Pause: reg,
		Logger: d.Logger, Metrics: d.Metrics, Health: d.Health, TracerProvider: d.TracerProvider,
	}, worker.WithCrasher(crash, HandlerName), worker.WithKafkaOpts(h.kafkaOpts...))
	if err != nil {
		return nil, err
	}
	if d.Health != nil {
		d.Health.AddReadiness(HandlerName+":postgres", reg.Check)
		d.Health.AddReadiness(HandlerName+":elasticsearch", w.Availability().Check)
	}
	return &Service{cfg: cfg, worker: w, cons: cons, reg: reg, log: d.Logger}, nil
}

// Worker returns the handler.
func (s *Service) Worker() *Worker { return s.worker }

// Consumer returns the runtime.
func (s *Service) Consumer() *worker.Consumer { return s.cons }

// Run creates the commands and DLQ topics if missing (KAFKA_TOPIC_PARTITIONS,
// KAFKA_TOPIC_REPLICATION_FACTOR; failures are logged, not fatal), then
// consumes until ctx ends and drains (SHUTDOWN_TIMEOUT).
func (s *Service) Run(ctx context.Context) error {
	s.ensureTopics(ctx)
	// A lost instances index is rebuilt beside the consumer
	// (docs/instanceworker.md#read-model-lost); Run waits for it.
	defer s.worker.serveRebuilds(ctx)()
	s.checkLost(ctx, s.cons.Client())
	s.log.Info("instance worker running", "topic", s.cfg.Kafka.CommandsTopic, "group", s.cfg.Kafka.Group(GroupName), "dlq", s.cfg.Kafka.CommandsDLQTopic)
	err := s.cons.Run(ctx)
	s.log.Info("instance worker stopped")
	return err
}

func (s *Service) ensureTopics(ctx context.Context) {
	k := s.cfg.Kafka
	if err := kafka.EnsureTopics(ctx, s.cons.Client(), k, k.CommandsTopic, k.CommandsDLQTopic); err != nil {
		s.log.Warn("create topics", "err", err)
	}
}
