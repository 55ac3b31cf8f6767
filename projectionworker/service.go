package projectionworker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/elastic/go-elasticsearch/v8"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/shared/crashpoint"
	"github.com/sluicehq/sluice/shared/kafka"
	"github.com/sluicehq/sluice/shared/observability"
	"github.com/sluicehq/sluice/worker"
)

// MinConcurrency is the least number of aggregates a projection consumer
// handles at once: handlers only wait for their bulk item, and the batch
// size is bounded by how many of them wait together, so projections use
// max(WORKER_CONCURRENCY, MinConcurrency).
const MinConcurrency = 256

// MaxPollRecords bounds one poll, and so one round, of a projection
// consumer: the worker is a worker.BatchHandler, so a round's records go
// to Elasticsearch together (split into bulk requests by
// ELASTICSEARCH_BULK_MAX_DOCS/MAX_BYTES) and to the registry in one claim
// and one mark_done; larger rounds amortise those round trips.
// 1000 rather than 2000: about the same throughput here (6.6k vs 6.2–7.1k
// events/s) at a quarter of the p50 latency.
const MaxPollRecords = 1000

// Deps are the resources a Service runs on; the caller owns and closes them.
type Deps struct {
	// Pool holds the processed-event registry (the registry role,
	// REGISTRY_DATABASE_URL: docs/scale-out.md). Pool and ES are required.
	Pool *pgxpool.Pool
	// ES is the Elasticsearch client (readmodel.NewClient).
	ES      *elasticsearch.Client
	Logger  *slog.Logger
	Metrics prometheus.Registerer
	Health  *observability.Health
	// TracerProvider traces each event (docs/tracing.md); nil: off.
	TracerProvider trace.TracerProvider
}

// Spec selects one projection for a Service.
type Spec struct {
	Projection Projection
	// Version to build; 0 = the live version (the highest version a write
	// alias of the projection points at), else Projection.Version().
	Version int
	Mode    Mode
}

// Config is what the projection worker reads of the process configuration: the
// sections it shares with the other services, each declared by the package
// it configures (shared/config is the mechanism; pipeline/sluiceconfig fills it
// for the sluice binary, and config.Parse reads it alone), and the knobs
// set in Go.
type Config struct {
	Kafka         kafka.Config
	EventStore    eventstore.Config
	Registry      registry.Config
	Worker        worker.Settings
	Elasticsearch readmodel.Config
	Testing       crashpoint.Config

	// The knobs below have no variable of their own (Go only).

	// Projections are the projections the Service runs (at least one, each
	// once): `sluice projection-worker --projection` selects them.
	Projections []Spec
	// VersionCheck is how often a projection that runs at its live version
	// checks whether a rebuild or rollback moved it (default
	// DefaultVersionCheck, 10 s; negative: never).
	VersionCheck time.Duration
}

// withDefaults returns c with the defaults of its Go-only knobs applied.
func (c Config) withDefaults() Config {
	if c.VersionCheck == 0 {
		c.VersionCheck = DefaultVersionCheck
	}
	return c
}

// Option is a test hook of a Service (docs/architecture.md, "One
// construction convention"); production passes none. The crash points come
// from the Testing section (SLUICE_CRASH_POINT).
type Option func(*hooks)

type hooks struct {
	kafkaOpts    []kgo.Opt
	wrapRegistry func(worker.Registry) worker.Registry
}

// WithKafkaOpts adds client options to the Service's Kafka clients, after
// their own (tests: a short session timeout); TLS and SASL come from the
// configuration.
func WithKafkaOpts(opts ...kgo.Opt) Option {
	return func(h *hooks) { h.kafkaOpts = append(h.kafkaOpts, opts...) }
}

// WithRegistryWrapper wraps the registry the consumers use (tests and
// benchmarks: counting round trips, the per-event registry path, faults).
func WithRegistryWrapper(wrap func(worker.Registry) worker.Registry) Option {
	return func(h *hooks) { h.wrapRegistry = wrap }
}

// Service runs projection workers on the events topic: one consumer group
// (projection-{name}-v{version}) and registry handler
// (projection:{name}:v{version}, skip-stale) per projection, one shared
// bulker. Build it with New, run it with Run.
type Service struct {
	cfg   Config // defaults applied (Config.withDefaults)
	d     Deps
	opts  []Option // for the rebuilds of lost read models (lost.go)
	hooks hooks
	reg   *registry.Registry
	bulk  *Bulker
	crash *crashpoint.Crasher
	m     *metrics
	mu    sync.Mutex
	cons  map[string]*worker.Consumer // projection name → consumer (after Start)
	vers  map[string]int
	lost  readmodel.Rebuilds // read models being rebuilt (lost.go)
}

// New builds `sluice projection-worker` (and the projection worker of
// `sluice dev`) from the process configuration: cfg.Projections on
// EVENTS_TOPIC, EVENTS_DLQ_TOPIC, ELASTICSEARCH_* (bulk bounds, index
// prefix), PROJECTION_WORKER_MAX_RETRIES, WORKER_*, PROCESSED_EVENT_*,
// crash points from SLUICE_CRASH_POINT (worker "projectionworker").
func New(cfg Config, d Deps, opts ...Option) (*Service, error) {
	if !cfg.Registry.Enabled {
		return nil, errors.New("projectionworker: ENABLE_PROCESSED_EVENT_REGISTRY=false is not supported: the registry is not optional")
	}
	if d.Pool == nil || d.ES == nil {
		return nil, errors.New("projectionworker: Pool and ES are required")
	}
	if len(cfg.Projections) == 0 {
		return nil, errors.New("projectionworker: no projection selected")
	}
	seen := map[string]bool{}
	for _, s := range cfg.Projections {
		if s.Projection == nil {
			return nil, errors.New("projectionworker: nil projection")
		}
		if err := ValidateName(s.Projection.Name()); err != nil {
			return nil, err
		}
		if seen[s.Projection.Name()] {
			return nil, fmt.Errorf("projectionworker: projection %q selected twice", s.Projection.Name())
		}
		seen[s.Projection.Name()] = true
	}
	cfg = cfg.withDefaults()
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	if d.Metrics == nil {
		d.Metrics = prometheus.NewRegistry()
	}
	var h hooks
	for _, o := range opts {
		o(&h)
	}
	reg, err := registry.New(cfg.Registry.WithRetry(cfg.Worker.ProjectionRetry()), registry.Deps{Pool: d.Pool})
	if err != nil {
		return nil, err
	}
	crash, err := crashpoint.New(cfg.Testing.CrashPoint, cfg.Testing.CrashMarkerDir)
	if err != nil {
		return nil, err
	}
	m := newMetrics(d.Metrics)
	names := make([]string, 0, len(cfg.Projections))
	for _, sp := range cfg.Projections {
		names = append(names, sp.Projection.Name())
	}
	m.zero(names)
	bulk := NewBulker(d.ES, BulkOptions{MaxDocs: cfg.Elasticsearch.BulkMaxDocs, MaxBytes: cfg.Elasticsearch.BulkMaxBytes,
		RequestTimeout: cfg.Elasticsearch.RequestTimeout,
		Observe:        func(n int, dur time.Duration, err error) { m.observeBulk(n, dur, err) }})
	if d.Health != nil {
		d.Health.AddReadiness("projectionworker:postgres", reg.Check)
		d.Health.AddReadiness("projectionworker:elasticsearch", bulk.Check)
	}
	return &Service{cfg: cfg, d: d, opts: opts, hooks: h, reg: reg, bulk: bulk, crash: crash, m: m,
		cons: map[string]*worker.Consumer{}, vers: map[string]int{}}, nil
}

// Bulker returns the shared bulk writer.
func (s *Service) Bulker() *Bulker { return s.bulk }

// Version returns the version a projection runs at (after Start).
func (s *Service) Version(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.vers[name]
}

// Start resolves versions and creates the consumers (Run calls it).
func (s *Service) Start(ctx context.Context) error {
	s.mu.Lock()
	started := len(s.cons) > 0
	s.mu.Unlock()
	if started {
		return nil
	}
	// Built without holding mu: resolving a version may wait for
	// Elasticsearch (startupLiveVersion), and Version must answer meanwhile.
	cons := map[string]*worker.Consumer{}
	vers := map[string]int{}
	discard := func() {
		for _, c := range cons {
			c.Client().Close()
		}
	}
	for _, sp := range s.cfg.Projections {
		p := sp.Projection
		v := sp.Version
		if v <= 0 {
			lv, err := s.startupLiveVersion(ctx, p.Name())
			if err != nil {
				discard()
				return err
			}
			v = p.Version()
			if lv > 0 {
				v = lv
			}
		}
		c, err := s.newConsumer(sp, v)
		if err != nil {
			discard()
			return err
		}
		cons[p.Name()], vers[p.Name()] = c, v
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.cons) > 0 { // started concurrently
		discard()
		return nil
	}
	s.cons, s.vers = cons, vers
	return nil
}

// startupLiveVersion is LiveVersion at start-up: an Elasticsearch that is
// unreachable or overloaded (transport errors, 429, 5xx) is waited for
// with a capped backoff, logged, as an outage while running is (docs/architecture.md#explicit-failure),
// instead of ending the process. Other failures end start-up.
func (s *Service) startupLiveVersion(ctx context.Context, name string) (int, error) {
	wait := readmodel.Retry{Base: 200 * time.Millisecond, Cap: 5 * time.Second}
	for n := 0; ; n++ {
		v, err := LiveVersion(ctx, s.d.ES, s.cfg.Elasticsearch.IndexPrefix, name)
		if err == nil || !readmodel.Transient(ctx, err) {
			return v, err
		}
		s.d.Logger.Warn("projection worker: Elasticsearch unavailable at start-up; waiting for it", "projection", name, "err", err)
		if serr := wait.Sleep(ctx, n); serr != nil {
			return 0, err
		}
	}
}

// newConsumer builds the consumer of projection sp at version v.
func (s *Service) newConsumer(sp Spec, v int) (*worker.Consumer, error) {
	p := sp.Projection
	guard, err := guardOf(p)
	if err != nil {
		return nil, err
	}
	w, err := NewWorker(s.cfg, s.d, Spec{Projection: p, Version: v, Mode: sp.Mode}, s.bulk)
	if err != nil {
		return nil, err
	}
	w.crash = s.crash
	if sp.Version <= 0 { // live-following: a write's 404 rebuilds (lost.go)
		w.onLost = func(scope, reason string) { s.indexLost(sp, v, scope, reason) }
	}
	var reg worker.Registry = s.reg
	if s.hooks.wrapRegistry != nil {
		reg = s.hooks.wrapRegistry(reg)
	}
	co := worker.Config{
		Settings: s.cfg.Worker, MaxAttempts: s.cfg.Worker.ProjectionMaxRetries, Kafka: s.cfg.Kafka,
		Topic: s.cfg.Kafka.EventsTopic, Group: s.cfg.Kafka.Group(GroupName(p.Name(), v)), AdoptGroup: GroupName(p.Name(), v), DLQTopic: s.cfg.Kafka.EventsDLQTopic,
		HandlerName: HandlerName(p.Name(), v), Policy: guard, Limits: s.cfg.EventStore.Limits,
		MaxPollRecords: MaxPollRecords,
	}
	co.Concurrency = max(co.Concurrency, MinConcurrency)
	return worker.New(co, worker.Deps{
		Registry: reg, Handler: w, Pause: s.reg,
		Logger: s.d.Logger, Metrics: s.d.Metrics, Health: s.d.Health, TracerProvider: s.d.TracerProvider,
	}, worker.WithCrasher(s.crash, CrashWorker), worker.WithKafkaOpts(s.hooks.kafkaOpts...))
}

// Run creates the events and DLQ topics if missing (failures are logged),
// starts the consumers and runs them until ctx ends, then drains them
// (SHUTDOWN_TIMEOUT). It returns the first consumer error.
func (s *Service) Run(ctx context.Context) error {
	if err := s.Start(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	first := s.cons[s.cfg.Projections[0].Projection.Name()] // any client can create the topics
	s.mu.Unlock()
	s.ensureTopics(ctx, first.Client())
	// One projection failing stops them all, so that the process exits
	// with the error (and is restarted) instead of running on without it.
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	// A read model found lost is rebuilt beside the live consumers
	// (docs/projectionworker.md#read-model-lost); Run waits for it.
	defer s.serveLost(rctx)()
	for _, sp := range s.cfg.Projections {
		if sp.Version > 0 { // pinned (a rebuild's own service): never checked
			continue
		}
		name := sp.Projection.Name()
		v := s.Version(name)
		lost, why, err := s.readModelLost(ctx, first.Client(), name, v)
		if err != nil {
			s.d.Logger.Warn("projection worker: read model check failed", "projection", name, "err", err)
			continue
		}
		if lost {
			s.startLost(sp, v, why)
		}
	}
	if iv := s.cfg.Registry.PruneInterval; iv > 0 {
		pruned := make(chan struct{})
		defer func() { stop(); <-pruned }() // stop first: the prune ends with rctx
		go func() {
			defer close(pruned)
			_ = s.reg.AutoPrune(rctx, iv, s.pruneRequest, func(n int64, err error) {
				switch {
				case err != nil:
					s.d.Logger.Warn("projection worker: registry prune failed; next try in the prune interval", "err", err)
				case n > 0:
					s.d.Logger.Info("projection worker: registry pruned", "rows", n, "older_than", s.cfg.Registry.Retention())
				}
			})
		}()
	}
	// The first projection that fails stops the others (and the prune,
	// which runs on rctx too); Wait returns its error.
	var g errgroup.Group
	for _, sp := range s.cfg.Projections {
		g.Go(func() error {
			err := s.runProjection(rctx, sp)
			if err != nil {
				stop()
			}
			return err
		})
	}
	err := g.Wait()
	s.d.Logger.Info("projection worker stopped")
	return err
}

// pruneRequest is the automatic prune of this service's handlers: every
// version up to the current one of each projection, rows older than
// PROCESSED_EVENT_RETENTION_DAYS.
func (s *Service) pruneRequest() registry.PruneRequest {
	var only []string
	for _, sp := range s.cfg.Projections {
		for v := 1; v <= s.Version(sp.Projection.Name()); v++ {
			only = append(only, HandlerName(sp.Projection.Name(), v))
		}
	}
	if len(only) == 0 {
		only = []string{"-"} // no version yet: nothing of ours to prune
	}
	return registry.PruneRequest{OlderThan: s.cfg.Registry.Retention(), Only: only}
}

// DefaultVersionCheck is the default of Config.VersionCheck.
const DefaultVersionCheck = 10 * time.Second

// runProjection runs the consumer of one projection until ctx ends. A
// projection that runs at its live version (Spec.Version 0) follows it:
// every Config.VersionCheck it reads the live version, and when a rebuild or
// a rollback moved the aliases (`sluice projection rebuild|rollback`), it
// drains the consumer of the old version and starts one for the new
// version, which resumes from that version's consumer group. Reads through
// the aliases so stay current without a restart.
func (s *Service) runProjection(ctx context.Context, sp Spec) error {
	name := sp.Projection.Name()
	for {
		s.mu.Lock()
		c, v := s.cons[name], s.vers[name]
		s.mu.Unlock()
		s.d.Logger.Info("projection worker running", "projection", name, "version", v,
			"topic", s.cfg.Kafka.EventsTopic, "group", s.cfg.Kafka.Group(GroupName(name, v)))
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- c.Run(cctx) }()
		next, err := s.watchVersion(ctx, sp, v, done)
		cancel()
		if next == 0 {
			return err
		}
		s.d.Logger.Info("projection worker: the live version changed; switching", "projection", name, "from", v, "to", next)
		if err := <-done; err != nil {
			s.d.Logger.Warn("projection worker: draining the old version", "projection", name, "version", v, "err", err)
		}
		nc, err := s.newConsumer(sp, next)
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.cons[name], s.vers[name] = nc, next
		s.mu.Unlock()
	}
}

// watchVersion waits for the consumer (done) and returns its error with
// next 0, or returns the new live version of sp (next > 0) when it differs
// from v. A pinned version (Spec.Version > 0) or a negative
// Config.VersionCheck only waits.
func (s *Service) watchVersion(ctx context.Context, sp Spec, v int, done <-chan error) (next int, err error) {
	every := s.cfg.VersionCheck
	if sp.Version > 0 || every < 0 {
		return 0, <-done
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case err := <-done:
			return 0, err
		case <-t.C:
			lv, err := LiveVersion(ctx, s.d.ES, s.cfg.Elasticsearch.IndexPrefix, sp.Projection.Name())
			if err != nil {
				s.d.Logger.Debug("projection worker: live version check failed", "projection", sp.Projection.Name(), "err", err)
				continue
			}
			if lv > 0 && lv != v {
				return lv, nil
			}
		}
	}
}

func (s *Service) ensureTopics(ctx context.Context, cl *kgo.Client) {
	k := s.cfg.Kafka
	if err := kafka.EnsureTopics(ctx, cl, k, k.EventsTopic, k.EventsDLQTopic); err != nil {
		s.d.Logger.Warn("create topics", "err", err)
	}
}
