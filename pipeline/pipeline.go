// Package pipeline is sluice's one table of services: how each of api,
// relay, instance-worker and projection-worker is built from the
// configuration and the process's shared resources, and how it runs. `sluice
// dev` builds them all in one process, each service command builds one, and
// tests start them in-process from the same table, so a service is wired
// the same way wherever it runs (docs/architecture.md, "Service wiring").
//
// The table builds and runs; it opens nothing shared itself. The caller
// opens the Postgres pools of the roles a service uses (Service.Roles,
// docs/scale-out.md), the event store and the Prometheus and health
// registries (once per process, Deps), serves /metrics and the probes, and
// prints. A service that needs extra HTTP routes on the API (the admin API)
// gets them through Options, so this package stays below the ones that
// provide them.
package pipeline

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/elastic/go-elasticsearch/v8"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/auth"
	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/eventstore/objstore/minioext"
	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/migrations"
	"github.com/sluicehq/sluice/pipeline/sluiceconfig"
	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/projectionworker/declarative"
	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/relay"
	"github.com/sluicehq/sluice/schema"
	"github.com/sluicehq/sluice/shared/crashpoint"
	"github.com/sluicehq/sluice/shared/drain"
	"github.com/sluicehq/sluice/shared/observability"
)

// The API's "event store" readiness check is the store's AppendReady.
var _ api.AppendReadier = (*eventstore.Store)(nil)

// Names of the services, as the subcommands of the binary name them.
const (
	API              = "api"
	Relay            = "relay"
	InstanceWorker   = "instance-worker"
	ProjectionWorker = "projection-worker"
)

// Deps are the shared resources of one process that services are built on.
// Store and Bucket may be nil for a process whose services do not need the
// event store (Service.NeedsStore), and a pool nil for one whose services
// do not use its role (Service.Roles).
type Deps struct {
	Config *sluiceconfig.Config
	Logger *slog.Logger
	// Pool, StorePool and RegistryPool are the process's Postgres pools by
	// role (docs/scale-out.md#the-roles): DATABASE_URL's (event schemas, API
	// keys), EVENT_STORE_DATABASE_URL's (the relay's lease and parked
	// records; Store runs on the same pool) and REGISTRY_DATABASE_URL's (the
	// workers' registry, the API's command status). Roles on one URL share
	// one pool (migrations.OpenPools).
	Pool         *pgxpool.Pool
	StorePool    *pgxpool.Pool
	RegistryPool *pgxpool.Pool
	Bucket       objstore.Bucket
	Store        *eventstore.Store
	// Metrics and Health are the process's registries; every service adds
	// its series and checks to them.
	Metrics *prometheus.Registry
	Health  *observability.Health
	// TracerProvider traces every service (docs/tracing.md); nil: off.
	TracerProvider trace.TracerProvider
}

// Options are what a command sets beyond the configuration.
type Options struct {
	// APIListener serves the API; nil listens on APIAddr, else on
	// Config.API.Addr.
	APIListener net.Listener
	APIAddr     string
	// APIRoutes are mounted on the API beside its own routes: pattern
	// (http.ServeMux syntax, e.g. "/admin/") → handler.
	APIRoutes map[string]http.Handler
	// APIKeys are the API keys the API accepts (nil: a store of its own on
	// the pool); the command shares one with the admin API, so that a key
	// revoked there stops working here at once. APIOIDC verifies bearer
	// JWTs (nil: one of its own when SLUICE_AUTH_OIDC_* is set).
	APIKeys *auth.Keys
	APIOIDC *auth.OIDC
	// Projections run by the projection worker (default: history).
	Projections []projectionworker.Spec
}

// Service is one row of the table.
type Service struct {
	Name string
	// NeedsStore is set when the service reads or appends to the event
	// store (Deps.Store and Deps.Bucket required).
	NeedsStore bool
	// Roles returns the Postgres roles whose pools the service uses with
	// the options o (docs/scale-out.md#which-process-opens-which-pool): a
	// process opens those and no other.
	Roles func(o Options) []migrations.Role
	// Build makes the service ready to run; nothing runs yet.
	Build func(ctx context.Context, d Deps, o Options) (Runner, error)
}

// Runner is a built service.
type Runner interface {
	// Run runs the service until ctx ends (then it drains within
	// SHUTDOWN_TIMEOUT) or it fails; an ended ctx is not an error.
	Run(ctx context.Context) error
	// Close releases what Build acquired; after Run, or instead of it.
	Close()
}

// Table returns the services, in the order `sluice dev` starts them.
func Table() []Service {
	return []Service{
		{Name: Relay, NeedsStore: true, Roles: roles(migrations.RoleStore), Build: buildRelay},
		{Name: InstanceWorker, NeedsStore: true, Roles: roles(migrations.RoleStore, migrations.RoleRegistry), Build: buildInstanceWorker},
		{Name: ProjectionWorker, Roles: projectionWorkerRoles, Build: buildProjectionWorker},
		{Name: API, NeedsStore: true, Roles: roles(migrations.RoleMain, migrations.RoleStore, migrations.RoleRegistry), Build: buildAPI},
	}
}

// roles is a Service.Roles that does not depend on the options.
func roles(rs ...migrations.Role) func(Options) []migrations.Role {
	return func(Options) []migrations.Role { return rs }
}

// projectionWorkerRoles: the registry, and the main role's schema registry
// when a declarative projection upcasts (docs/schemas.md#upcasting-on-read).
func projectionWorkerRoles(o Options) []migrations.Role {
	for _, sp := range o.Projections {
		if p, ok := sp.Projection.(*declarative.Projection); ok && p.Upcasts() {
			return []migrations.Role{migrations.RoleRegistry, migrations.RoleMain}
		}
	}
	return []migrations.Role{migrations.RoleRegistry}
}

// pool returns d's pool of role r.
func (d Deps) pool(r migrations.Role) *pgxpool.Pool {
	switch r {
	case migrations.RoleStore:
		return d.StorePool
	case migrations.RoleRegistry:
		return d.RegistryPool
	default:
		return d.Pool
	}
}

// Lookup returns the service called name.
func Lookup(name string) (Service, error) {
	ts := Table()
	if i := slices.IndexFunc(ts, func(s Service) bool { return s.Name == name }); i >= 0 {
		return ts[i], nil
	}
	return Service{}, fmt.Errorf("pipeline: no service %q", name)
}

// Build builds the service called name.
func Build(ctx context.Context, name string, d Deps, o Options) (Runner, error) {
	s, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	if s.NeedsStore && (d.Store == nil || d.Bucket == nil) {
		return nil, fmt.Errorf("pipeline: %s needs the event store", name)
	}
	if d.Config == nil || d.Metrics == nil || d.Health == nil {
		return nil, fmt.Errorf("pipeline: %s needs the config and the metrics and health registries", name)
	}
	for _, r := range s.Roles(o) {
		if d.pool(r) == nil {
			return nil, fmt.Errorf("pipeline: %s needs the Postgres pool of the %s role (%s)", name, r, r.Var())
		}
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	return s.Build(ctx, d, o)
}

// registerStore adds the event store's series to the process registry
// once (the api and the instance worker both append).
func registerStore(d Deps) error {
	for _, c := range d.Store.Collectors() {
		if err := d.Metrics.Register(c); err != nil {
			if are := (prometheus.AlreadyRegisteredError{}); !errors.As(err, &are) {
				return fmt.Errorf("pipeline: event store metrics: %w", err)
			}
		}
	}
	return nil
}

// postgresReady adds a readiness check per distinct pool of roles:
// "postgres" for the first, "postgres:<role>" for a role on a database of
// its own (docs/scale-out.md#health). Roles on one pool are one check, so a
// process on one database reports what it always did.
func postgresReady(d Deps, rs ...migrations.Role) {
	var seen []*pgxpool.Pool
	for _, r := range rs {
		p := d.pool(r)
		if p == nil || slices.Contains(seen, p) {
			continue
		}
		name := "postgres"
		if len(seen) > 0 {
			name += ":" + string(r)
		}
		seen = append(seen, p)
		d.Health.AddReadiness(name, func(ctx context.Context) error { return p.Ping(ctx) })
	}
}

// runner adapts a run and a close func.
type runner struct {
	run   func(context.Context) error
	close func()
}

func (r runner) Run(ctx context.Context) error {
	if err := r.run(ctx); err != nil && !(errors.Is(err, context.Canceled) && ctx.Err() != nil) {
		return err
	}
	return nil
}

func (r runner) Close() {
	if r.close != nil {
		r.close()
	}
}

// buildRelay is `sluice relay`: the store-to-Kafka publisher, with MinIO
// bucket notifications as an extra wake-up on an s3 endpoint.
func buildRelay(ctx context.Context, d Deps, _ Options) (Runner, error) {
	crasher, err := crashpoint.New(d.Config.Testing.CrashPoint, d.Config.Testing.CrashMarkerDir)
	if err != nil {
		return nil, err
	}
	postgresReady(d, migrations.RoleStore)
	deps := relay.Deps{Store: d.Store, Bucket: d.Bucket, Pool: d.StorePool, Kafka: d.Config.Kafka,
		Logger: d.Logger, Registerer: d.Metrics, Health: d.Health, TracerProvider: d.TracerProvider, Crasher: crasher}
	if es := d.Config.EventStore; es.Backend == "s3" && es.S3Endpoint != "" {
		// MinIO bucket notifications as an extra wake-up (hints only).
		if mc, err := minioext.New(minioext.Options{Endpoint: es.S3Endpoint, Region: es.S3Region,
			AccessKeyID: es.S3AccessKeyID, SecretAccessKey: es.S3SecretAccessKey.Value()}); err == nil {
			if ch, err := mc.ListenSegments(ctx, es.Bucket, eventstore.SegmentPrefix); err == nil {
				deps.Wake = ch
			} else {
				d.Logger.Info("relay: no bucket notifications; relying on LISTEN and polling", "err", err)
			}
		}
	}
	r, err := relay.New(d.Config.RelayConfig(), deps)
	if err != nil {
		return nil, err
	}
	return runner{run: r.Run, close: r.Close}, nil
}

// esClient builds the workers' Elasticsearch client and checks once that
// the cluster accepts its credentials: a refusal (401, 403) ends start-up
// with an error naming the variables (readmodel.ErrCredentials); an
// unreachable cluster does not, it is an outage the worker waits out.
func esClient(ctx context.Context, d Deps) (*elasticsearch.Client, error) {
	es, err := readmodel.NewClient(d.Config.Elasticsearch)
	if err != nil {
		return nil, err
	}
	if err := readmodel.CheckCredentials(ctx, es, d.Config.Elasticsearch.RequestTimeout); err != nil {
		return nil, err
	}
	return es, nil
}

// buildInstanceWorker is `sluice instance-worker`: commands → domain events
// and instance documents.
func buildInstanceWorker(ctx context.Context, d Deps, _ Options) (Runner, error) {
	es, err := esClient(ctx, d)
	if err != nil {
		return nil, err
	}
	if err := registerStore(d); err != nil {
		return nil, err
	}
	svc, err := instanceworker.New(d.Config.InstanceWorker(), instanceworker.Deps{
		Pool: d.RegistryPool, Store: d.Store, ES: es, Logger: d.Logger, Metrics: d.Metrics, Health: d.Health,
		TracerProvider: d.TracerProvider,
	})
	if err != nil {
		return nil, err
	}
	return runner{run: svc.Run}, nil
}

// buildProjectionWorker is `sluice projection-worker`: domain events →
// read models, for o.Projections (default history).
func buildProjectionWorker(ctx context.Context, d Deps, o Options) (Runner, error) {
	specs := o.Projections
	if len(specs) == 0 {
		specs = []projectionworker.Spec{{Projection: projectionworker.History{}}}
	}
	es, err := esClient(ctx, d)
	if err != nil {
		return nil, err
	}
	deps := projectionworker.Deps{Pool: d.RegistryPool, ES: es, Logger: d.Logger, Metrics: d.Metrics, Health: d.Health,
		TracerProvider: d.TracerProvider}
	var decl []*declarative.Projection
	var schemas *schema.Registry
	for _, sp := range specs {
		if p, ok := sp.Projection.(*declarative.Projection); ok {
			decl = append(decl, p)
			if p.Upcasts() {
				// upcast: latest reads events through the schema registry
				// (docs/schemas.md#upcasting-on-read); one for the process.
				if schemas == nil {
					schemas = schema.New(d.Pool, d.Config.Schema, d.Logger)
				}
				p.UseUpcaster(schemas)
			}
		}
	}
	cfg := d.Config.ProjectionWorker()
	cfg.Projections = specs
	svc, err := projectionworker.New(cfg, deps)
	if err != nil {
		return nil, err
	}
	if len(decl) == 0 {
		return runner{run: svc.Run}, nil
	}
	return runner{run: func(ctx context.Context) error {
		// A declared version newer than the live one rebuilds blue/green.
		if _, _, err := declarative.RebuildChanged(ctx, d.Config.ProjectionWorker(), deps, decl); err != nil {
			return err
		}
		return svc.Run(ctx)
	}}, nil
}

// APIRunner is the built API: its address is known before it runs.
type APIRunner struct {
	ln      net.Listener
	handler http.Handler
	grace   time.Duration
	logger  *slog.Logger
	health  *observability.Health
	// Auth is true when /v1 requires credentials (SLUICE_API_TOKENS,
	// SLUICE_AUTH_REQUIRED).
	Auth bool
	// TLS is true when the listener speaks TLS (SLUICE_API_TLS_CERT_FILE).
	TLS bool
}

// Addr is the address the API listens on.
func (a *APIRunner) Addr() net.Addr { return a.ln.Addr() }

// Handler is the API's handler (with the extra routes).
func (a *APIRunner) Handler() http.Handler { return a.handler }

// Run serves until ctx ends, then shuts down gracefully (Serve): readiness
// red, open subscriptions ended, requests in flight given up to
// SHUTDOWN_TIMEOUT to finish.
func (a *APIRunner) Run(ctx context.Context) error {
	return Serve(ctx, a.ln, a.handler, ServeOptions{Name: API, Grace: a.grace, Logger: a.logger, Health: a.health})
}

// Close closes the listener (a no-op after Run).
func (a *APIRunner) Close() { _ = a.ln.Close() }

// apiAuthenticator is the authenticator of /v1: API keys, OIDC JWTs, the
// tokens of SLUICE_API_TOKENS and the admin tokens. The admin tokens are
// known here so that on /v1 they are authenticated and hold no /v1
// operation (403 forbidden, docs/security.md#principals) rather than
// answer 401 as an unknown credential.
func apiAuthenticator(cfg *sluiceconfig.Config, keys *auth.Keys, oidc *auth.OIDC) *auth.Authenticator {
	tokens := make([]string, 0, len(cfg.API.Tokens))
	for _, t := range cfg.API.Tokens {
		if t.Value() != "" {
			tokens = append(tokens, t.Value())
		}
	}
	return auth.NewAuthenticator(auth.Options{Keys: keys, OIDC: oidc, Tokens: tokens,
		AdminToken: cfg.API.AdminToken.Value(), AdminReadToken: cfg.API.AdminReadToken.Value(), Required: cfg.Auth.Required})
}

// buildAPI is `sluice api`: the HTTP command API, with o.APIRoutes beside.
func buildAPI(ctx context.Context, d Deps, o Options) (Runner, error) {
	cfg := d.Config
	reg, err := registry.New(cfg.Registry.WithRetry(cfg.Worker.InstanceRetry()), registry.Deps{Pool: d.RegistryPool})
	if err != nil {
		return nil, err
	}
	if err := registerStore(d); err != nil {
		return nil, err
	}
	// The API's readiness is what its appends need: the main role (schemas,
	// API keys) and the store role (the "event store" check). A registry
	// outage does not make it unready: only command-status reads need the
	// registry, and they answer 503 meanwhile (docs/scale-out.md#health).
	postgresReady(d, migrations.RoleMain, migrations.RoleStore)
	keys := o.APIKeys
	if keys == nil {
		keys = auth.NewKeys(d.Pool, auth.KeysOptions{Refresh: cfg.Auth.KeyRefresh, Logger: d.Logger})
	}
	oidc := o.APIOIDC
	if oidc == nil && cfg.Auth.OIDCEnabled() {
		if oidc, err = auth.NewOIDC(ctx, cfg.Auth, nil, d.Logger); err != nil {
			return nil, err
		}
	}
	authn := apiAuthenticator(cfg, keys, oidc)
	h, err := api.New(api.Config{Settings: cfg.API, Limits: cfg.EventStore.Limits}, api.Deps{
		Store: d.Store, Registry: reg, Sequences: d.Store, Logger: d.Logger,
		Auth: authn, RateLimits: auth.NewLimiter(cfg.Auth),
		Metrics: d.Metrics, Health: d.Health, TracerProvider: d.TracerProvider,
		Events: d.Store, Commits: api.StoreCommits(ctx, d.Store),
		Schemas: schema.New(d.Pool, cfg.Schema, d.Logger),
	})
	if err != nil {
		return nil, err
	}
	if len(o.APIRoutes) > 0 {
		mux := http.NewServeMux()
		for pattern, rh := range o.APIRoutes {
			mux.Handle(pattern, rh)
		}
		mux.Handle("/", h)
		h = mux
	}
	ln := o.APIListener
	if ln == nil {
		addr := o.APIAddr
		if addr == "" {
			addr = cfg.API.Addr
		}
		if ln, err = net.Listen("tcp", addr); err != nil {
			return nil, fmt.Errorf("api: listen %s: %w (set SLUICE_API_ADDR)", addr, err)
		}
	}
	useTLS := cfg.API.TLSCertFile != ""
	if useTLS {
		tc, err := TLSConfig(cfg.API.TLSCertFile, cfg.API.TLSKeyFile, d.Logger)
		if err != nil {
			_ = ln.Close()
			return nil, err
		}
		ln = tls.NewListener(ln, tc)
	}
	return &APIRunner{ln: ln, handler: h, grace: cfg.Worker.ShutdownTimeout, logger: d.Logger,
		health: d.Health, Auth: authn.Required(), TLS: useTLS}, nil
}

// ServeOptions are how Serve drains.
type ServeOptions struct {
	// Name names the service in errors and log lines ("api").
	Name string
	// Grace bounds the drain: requests in flight get up to Grace to
	// finish (SHUTDOWN_TIMEOUT; default 30 s).
	Grace  time.Duration
	Logger *slog.Logger
	// Health, when set, gets the readiness check "shutdown", failing from
	// the moment ctx ends, so that /readyz turns red before anything else
	// stops.
	Health *observability.Health
}

// errShuttingDown is the reason of the "shutdown" readiness check.
var errShuttingDown = errors.New("shutting down: draining requests in flight")

// Serve serves h on ln until ctx is done, then shuts down gracefully
// (docs/operations.md#rolling-restart-with-sse-subscribers): it turns
// readiness red (o.Health), signals every request through its context
// (drain.Signal) so that long-lived ones (Server-Sent Events) end at once
// and new ones are refused, then closes the listener and waits up to
// o.Grace for the requests in flight. http.Server.Shutdown alone would
// wait out the whole grace for a stream that never ends.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, o ServeOptions) error {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Name == "" {
		o.Name = "http"
	}
	grace := o.Grace
	if grace <= 0 {
		grace = 30 * time.Second
	}
	stopping := make(chan struct{})
	base := drain.WithSignal(context.WithoutCancel(ctx), stopping)
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(o.Logger.Handler(), slog.LevelWarn),
		// Requests are not cancelled by the shutdown (the ones in flight
		// finish); they see it through drain.Signal.
		BaseContext: func(net.Listener) context.Context { return base },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("%s: serve: %w", o.Name, err)
	case <-ctx.Done():
	}
	start := time.Now()
	if o.Health != nil {
		o.Health.AddReadiness("shutdown", func(context.Context) error { return errShuttingDown })
	}
	o.Logger.Info(o.Name+": shutting down: readiness red; ending open streams, finishing requests in flight", "grace", grace)
	close(stopping)
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		return fmt.Errorf("%s: serve: %w", o.Name, serr)
	}
	if err != nil {
		return fmt.Errorf("%s: shutdown: %w", o.Name, err)
	}
	o.Logger.Info(o.Name+": drained", "took", time.Since(start).Round(time.Millisecond))
	return nil
}
