package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/sluicehq/sluice/esserver"
	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/eventstore/objstore/backend"
	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/internal/localpg"
	"github.com/sluicehq/sluice/migrations"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/sluiceconfig"
	"github.com/sluicehq/sluice/shared/config"
	"github.com/sluicehq/sluice/shared/observability"
	"github.com/sluicehq/sluice/shared/tracing"
)

// devPart is one piece of the pipeline as `sluice dev` sees it: either
// running, or not built yet — sluice dev says so plainly and never pretends.
type devPart struct {
	name    string
	running bool
	detail  string
}

// devFlags are the knobs of `sluice dev`.
type devFlags struct {
	dataDir   string
	pgPort    int
	esAddr    string
	kafkaAddr string
	setupOnly bool
	// wrapES, when set, wraps the Elasticsearch test server's handler
	// (the pipeline benchmark observes document writes with it).
	wrapES func(http.Handler) http.Handler
	// tracerProvider, when set, traces every part (tests record spans
	// with it); nil builds one from the OTEL_* environment.
	tracerProvider trace.TracerProvider
}

func newDevCmd() *cobra.Command {
	var f devFlags
	c := &cobra.Command{
		Use:   "dev",
		Short: "Run the whole pipeline in one process on embedded defaults (first run, demos)",
		Long: `sluice dev starts everything sluice needs in one process, on embedded defaults:
a local PostgreSQL in the data directory when DATABASE_URL is unset, the schema
migrations, the file-backend event store, an embedded Kafka (kfake, persisted in
the data directory), the Elasticsearch-compatible test server (persisted in the data
directory), and the api, relay, instance worker and projection worker. Parts that do not
exist yet are listed as missing. The operator console is at /console/ on the api; without
SLUICE_ADMIN_TOKEN, sluice dev makes an admin token, prints it and keeps it in the data
directory (admin-token, mode 0600) for the next run. Stop it with Ctrl-C; a restart on the same
data directory brings everything back. One sluice dev owns a data directory at a time.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, logger, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			return runDev(cmd.Context(), cmd.OutOrStdout(), cfg, logger, f)
		},
	}
	fl := c.Flags()
	fl.StringVar(&f.dataDir, "data-dir", envOr("SLUICE_DEV_DATA_DIR", ".dev"), "directory for dev data (postgres, events, kafka, elasticsearch)")
	fl.IntVar(&f.pgPort, "postgres-port", 54329, "port of the local PostgreSQL started when DATABASE_URL is unset")
	fl.StringVar(&f.esAddr, "es-addr", "127.0.0.1:9200", "listen address of the Elasticsearch-compatible test server")
	fl.StringVar(&f.kafkaAddr, "kafka-addr", "127.0.0.1:9092", "listen address of the embedded Kafka (kfake)")
	fl.BoolVar(&f.setupOnly, "setup-only", false, "start and check everything, print the status, then stop")
	return c
}

func runDev(parent context.Context, out io.Writer, cfg *sluiceconfig.Config, logger *slog.Logger, f devFlags) error {
	// One owner per data dir: a second sluice dev would adopt this one's
	// Postgres, then stop it on exit. It is released last, after every
	// part (the Elasticsearch server's final snapshot too) has stopped.
	lock, err := lockDevDataDir(f.dataDir, devOwner{
		PID: os.Getpid(), PostgresPort: f.pgPort, ESAddr: f.esAddr, KafkaAddr: f.kafkaAddr, APIAddr: cfg.API.Addr,
	})
	if err != nil {
		return err
	}
	defer lock.release()

	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	// The services run in one group until ctx ends; the first that fails
	// cancels the others and stops dev with its error.
	g, gctx := errgroup.WithContext(ctx)
	d := &devRun{out: out, cfg: cfg, logger: logger, f: f, g: g, gctx: gctx}
	defer func() { _ = g.Wait() }()
	defer cancel()

	stopPostgres, err := d.startPostgres(ctx)
	if err != nil {
		return err
	}
	defer stopPostgres()
	if err := d.migrate(ctx); err != nil {
		return err
	}
	// One pool per distinct database of the roles: one, unless
	// EVENT_STORE_DATABASE_URL or REGISTRY_DATABASE_URL name others.
	pools, err := migrations.OpenPools(ctx, cfg.Postgres, func(ctx context.Context, db migrations.Database) (*pgxpool.Pool, error) {
		return pgxpool.New(ctx, db.URL)
	})
	if err != nil {
		return err
	}
	defer pools.Close()
	bucket, store, err := d.openEventStore(ctx, pools)
	if err != nil {
		return err
	}
	defer func() { _ = store.Close() }()
	kc, err := d.startKafka()
	if err != nil {
		return err
	}
	defer kc.Close()
	esURL, err := d.startElasticsearch()
	if err != nil {
		return err
	}
	tp, stopTracing, err := d.tracerProvider(ctx)
	if err != nil {
		return err
	}
	defer stopTracing()

	deps := pipeline.Deps{Config: cfg, Logger: logger, Pool: pools.Main, StorePool: pools.Store, RegistryPool: pools.Registry, Bucket: bucket, Store: store,
		Metrics: newRegistry(), Health: observability.NewHealth(), TracerProvider: tp}
	// The console needs a token; dev makes one when none is set.
	tok, err := devAdminToken(cfg, f.dataDir)
	if err != nil {
		return err
	}
	routes, a, closeRoutes, err := apiRoutes(deps)
	if err != nil {
		return err
	}
	defer closeRoutes()
	apiURL, closeServices, err := d.startServices(ctx, deps, routes, a)
	// A service is closed after its Run returned (the relay's producers, a
	// worker's clients), also when a later one failed to build: stop the
	// group and wait for it first.
	defer func() {
		cancel()
		_ = g.Wait()
		closeServices()
	}()
	if err != nil {
		return err
	}
	if err := d.startObservability(deps); err != nil {
		return err
	}

	printDevStatus(out, d.parts, apiURL, esURL, cfg.Elasticsearch.IndexPrefix)
	printConsoleAccess(out, apiURL, tok)
	if f.setupOnly {
		return nil
	}
	fmt.Fprintln(out, "running; press Ctrl-C to stop")
	<-gctx.Done()
	if ctx.Err() != nil {
		return nil // the parent ended: Ctrl-C
	}
	return context.Cause(gctx) // a service failed
}

// devRun is one run of sluice dev while it starts its parts: what they
// share, and the status lines they leave for printDevStatus.
type devRun struct {
	out    io.Writer
	cfg    *sluiceconfig.Config
	logger *slog.Logger
	f      devFlags
	parts  []devPart
	// g runs the services on gctx; see goRun.
	g    *errgroup.Group
	gctx context.Context
}

func (d *devRun) part(name, detail string) {
	d.parts = append(d.parts, devPart{name, true, detail})
}

// goRun runs a service until the group's context ends; a service that
// fails stops dev.
func (d *devRun) goRun(name string, run func(context.Context) error) {
	d.g.Go(func() error {
		if err := run(d.gctx); err != nil && d.gctx.Err() == nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	})
}

// startPostgres starts a local PostgreSQL in the data dir unless
// DATABASE_URL names one; stop stops what it started.
func (d *devRun) startPostgres(ctx context.Context) (stop func(), err error) {
	if d.cfg.Postgres.URL != "" {
		d.part("postgres", "DATABASE_URL")
		return func() {}, nil
	}
	dir := filepath.Join(d.f.dataDir, "postgres")
	fmt.Fprintf(d.out, "starting a local PostgreSQL in %s (port %d) — set DATABASE_URL to use your own\n", dir, d.f.pgPort)
	pg, err := localpg.Start(ctx, dir, d.f.pgPort)
	if err != nil {
		return nil, err
	}
	d.cfg.Postgres.URL = config.Secret(pg.URL)
	d.part("postgres", pg.URL)
	return func() {
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer scancel()
		if err := pg.Stop(sctx); err != nil {
			d.logger.Error("stop local postgres", "err", err)
		}
	}, nil
}

// migrate brings the schema of every database up to date (one, unless
// the role variables name others: docs/scale-out.md).
func (d *devRun) migrate(ctx context.Context) error {
	res, err := migrations.UpDatabases(ctx, d.cfg.Postgres, nil)
	if err != nil {
		return err
	}
	n := 0
	for _, r := range res {
		n += len(r.Applied)
	}
	detail := fmt.Sprintf("%d applied now, schema current", n)
	if len(res) > 1 {
		detail += fmt.Sprintf(" on %d databases", len(res))
	}
	d.part("migrations", detail)
	return nil
}

// openEventStore opens the event store: the file backend in the data dir
// unless the environment chose one.
func (d *devRun) openEventStore(ctx context.Context, pools *migrations.Pools) (objstore.Bucket, *eventstore.Store, error) {
	cfg := d.cfg
	if os.Getenv("EVENT_STORE_BACKEND") == "" {
		cfg.EventStore.Backend = "file"
		cfg.EventStore.FileDir = filepath.Join(d.f.dataDir, "events")
	}
	bucket, err := backend.Open(ctx, cfg.EventStore)
	if err != nil {
		return nil, nil, err
	}
	store, err := eventstore.New(cfg.EventStore, eventstore.Deps{Pool: pools.Store, ShardPools: pools.StoreShards, Bucket: bucket, Logger: d.logger})
	if err != nil {
		return nil, nil, err
	}
	where := "s3 bucket " + cfg.EventStore.Bucket
	if cfg.EventStore.Backend == "file" {
		where = filepath.Join(cfg.EventStore.FileDir, cfg.EventStore.Bucket)
	}
	d.part("event store ("+cfg.EventStore.Backend+" backend)", where+", self-test passed")
	return bucket, store, nil
}

// startKafka starts the embedded Kafka (kfake), persisted in the data dir,
// and points the config at it.
func (d *devRun) startKafka() (*kfake.Cluster, error) {
	kafkaHost, kafkaPort, err := splitHostPort(d.f.kafkaAddr)
	if err != nil {
		return nil, fmt.Errorf("--kafka-addr: %w", err)
	}
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(kafkaPort),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) {
			return net.Listen(network, net.JoinHostPort(kafkaHost, fmt.Sprint(kafkaPort)))
		}),
		kfake.DataDir(filepath.Join(d.f.dataDir, "kafka")), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(3))
	if err != nil {
		return nil, fmt.Errorf("embedded kafka on %s: %w", d.f.kafkaAddr, err)
	}
	d.cfg.Kafka.Brokers = kc.ListenAddrs()
	d.cfg.Kafka.ReplicationFactor = 1
	d.cfg.Kafka.TopicPartitions = 3
	d.part("kafka (embedded kfake)", d.cfg.Kafka.Brokers[0]+", data in "+filepath.Join(d.f.dataDir, "kafka"))
	return kc, nil
}

// startElasticsearch serves the Elasticsearch-compatible test server,
// persisted in the data dir, as a service, and returns its URL.
func (d *devRun) startElasticsearch() (string, error) {
	esLn, err := net.Listen("tcp", d.f.esAddr)
	if err != nil {
		return "", fmt.Errorf("elasticsearch test server: listen %s: %w (set --es-addr, or stop what holds the port)", d.f.esAddr, err)
	}
	esURL := "http://" + esLn.Addr().String()
	esDir := filepath.Join(d.f.dataDir, "elasticsearch")
	esSrv, err := esserver.Open(esDir)
	if err != nil {
		_ = esLn.Close()
		return "", fmt.Errorf("elasticsearch test server: %w", err)
	}
	var esHandler http.Handler = esSrv
	if d.f.wrapES != nil {
		esHandler = d.f.wrapES(esHandler)
	}
	d.goRun("elasticsearch test server", func(ctx context.Context) error {
		err := serveHTTP(ctx, esLn, esHandler)
		// Close after the last request: it compacts the log into a snapshot.
		if cerr := esSrv.Close(); cerr != nil {
			d.logger.Error("close elasticsearch test server", "err", cerr)
		}
		return err
	})
	d.cfg.Elasticsearch.URLs = []string{esURL}
	rec := esSrv.Recovery()
	d.part("elasticsearch test server", fmt.Sprintf("%s (Elasticsearch 8 API subset; data in %s: %d indices, %d documents restored)",
		esURL, esDir, rec.Indices, rec.Documents))
	if rec.TornBytes > 0 {
		d.logger.Warn("elasticsearch test server: dropped the torn end of its log (a write cut off by a crash, never acknowledged)",
			"bytes", rec.TornBytes, "dir", esDir)
	}
	return esURL, nil
}

// tracerProvider is the one of the flags, or one built from the OTEL_*
// environment; stop flushes what this built.
func (d *devRun) tracerProvider(ctx context.Context) (tp trace.TracerProvider, stop func(), err error) {
	if d.f.tracerProvider != nil {
		return d.f.tracerProvider, func() {}, nil
	}
	tr, err := tracing.Setup(ctx, "sluice-dev", version, d.cfg.Tracing.Headers.Value())
	if err != nil {
		return nil, nil, err
	}
	return tr.TracerProvider(), func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		_ = tr.Shutdown(sctx)
	}, nil
}

// startServices builds and runs every service of the one table every
// service command uses, and returns the api's URL; closeAll closes the
// ones built, the last built first, once their Run returned (also when
// err is not nil).
func (d *devRun) startServices(ctx context.Context, deps pipeline.Deps, routes map[string]http.Handler, a apiAuth) (apiURL string, closeAll func(), err error) {
	var built []pipeline.Runner
	closeAll = func() {
		for i := len(built) - 1; i >= 0; i-- {
			built[i].Close()
		}
	}
	cfg := d.cfg
	for _, svc := range pipeline.Table() {
		r, err := pipeline.Build(ctx, svc.Name, deps, pipeline.Options{APIRoutes: routes, APIKeys: a.keys, APIOIDC: a.oidc})
		if err != nil {
			return "", closeAll, err
		}
		built = append(built, r)
		d.goRun(svc.Name, r.Run)
		var detail string
		switch svc.Name {
		case pipeline.Relay:
			detail = "store → " + cfg.Kafka.CommandsTopic + ", " + cfg.Kafka.EventsTopic
		case pipeline.InstanceWorker:
			detail = "group " + cfg.Kafka.Group(instanceworker.GroupName)
		case pipeline.ProjectionWorker:
			// The history projection (the instance worker owns the live
			// instance documents; `sluice projection rebuild` rebuilds them).
			detail = "projection history → " + cfg.Elasticsearch.IndexPrefix + "{db}_history"
		case pipeline.API:
			apiURL = "http://" + r.(*pipeline.APIRunner).Addr().String()
			detail = apiURL + "/openapi.json"
		}
		d.part(svc.Name, detail)
	}
	return apiURL, closeAll, nil
}

// startObservability serves metrics and health when HTTP_ADDR is set.
func (d *devRun) startObservability(deps pipeline.Deps) error {
	if d.cfg.HTTP.Addr == "" {
		return nil
	}
	obs, err := observability.Listen(d.cfg.HTTP.Addr, observability.Handler(deps.Metrics, deps.Health))
	if err != nil {
		return err
	}
	d.goRun("metrics/health", obs.Serve)
	d.part("metrics/health", "http://"+obs.Addr()+"/readyz")
	return nil
}

func printDevStatus(out io.Writer, parts []devPart, apiURL, esURL, prefix string) {
	missing := 0
	fmt.Fprintln(out, "\nsluice dev:")
	for _, p := range parts {
		state := "running"
		if !p.running {
			state = "MISSING"
			missing++
		}
		fmt.Fprintf(out, "  %-34s %-8s %s\n", p.name, state, p.detail)
	}
	if missing > 0 {
		fmt.Fprintf(out, "\n%d of %d parts are not built yet (listed as MISSING above).\n", missing, len(parts))
	}
	fmt.Fprintf(out, `
Tour — create an instance through the API, then read it back from Elasticsearch:

  curl -s -X POST %[1]s/v1/dbs/shop/classes/orders/instances \
       -H 'Content-Type: application/json' -d '{"instance_id":"42","data":{"total":10}}'
  curl -s %[1]s/v1/dbs/shop/classes/orders/instances/42          # folded from the event store
  curl -s '%[2]s/%[3]sshop_instances/_search?pretty'             # the read model in Elasticsearch

`, apiURL, esURL, prefix)
}

// serveHTTP serves h on ln until ctx ends, then shuts down gracefully.
func serveHTTP(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}
}

func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	var port int
	if _, err := fmt.Sscanf(p, "%d", &port); err != nil {
		return "", 0, fmt.Errorf("port %q: %w", p, err)
	}
	return host, port, nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// devLockName is the lock file of a dev data dir.
const devLockName = "sluice-dev.lock"

// errDevDataDirInUse means another sluice dev owns the data dir.
var errDevDataDirInUse = errors.New("the data dir is in use by another sluice dev")

// devOwner is what a running sluice dev writes into its lock file, so that a
// second one can say who holds the data dir.
type devOwner struct {
	PID          int    `json:"pid"`
	PostgresPort int    `json:"postgres_port"`
	ESAddr       string `json:"elasticsearch_addr"`
	KafkaAddr    string `json:"kafka_addr"`
	APIAddr      string `json:"api_addr"`
}

// devLock is an exclusive flock on <data-dir>/sluice-dev.lock, held for the
// whole life of sluice dev. The kernel drops it when the process dies, so a
// crashed sluice dev never leaves a stale lock behind.
type devLock struct{ f *os.File }

// lockDevDataDir takes the data dir for this process, or fails at once with
// errDevDataDirInUse naming the owner's PID and ports.
func lockDevDataDir(dir string, me devOwner) (*devLock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	path := filepath.Join(dir, devLockName)
	fl, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("data dir lock: %w", err)
	}
	if err := syscall.Flock(int(fl.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer func() { _ = fl.Close() }()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("data dir lock %s: %w", path, err)
		}
		owner := "an unknown process"
		var o devOwner
		if b, rerr := io.ReadAll(fl); rerr == nil && json.Unmarshal(b, &o) == nil && o.PID > 0 {
			owner = fmt.Sprintf("pid %d (postgres port %d, elasticsearch %s, kafka %s, api %s)", o.PID, o.PostgresPort, o.ESAddr, o.KafkaAddr, o.APIAddr)
		}
		return nil, fmt.Errorf("%w: %s is held by %s; stop that sluice dev first, or pass another --data-dir", errDevDataDirInUse, dir, owner)
	}
	b, _ := json.Marshal(me)
	werr := fl.Truncate(0)
	if werr == nil {
		_, werr = fl.WriteAt(append(b, '\n'), 0)
	}
	if err := werr; err != nil {
		_ = fl.Close()
		return nil, fmt.Errorf("data dir lock %s: %w", path, err)
	}
	return &devLock{f: fl}, nil
}

// release drops the lock (the file stays; its content is stale until the
// next owner rewrites it).
func (l *devLock) release() { _ = l.f.Close() }
