// Package pipelinetest starts sluice's pipeline in-process for a test,
// from the same table of services (package pipeline) that `sluice dev`
// and the service commands use: a fresh migrated Postgres database, a
// file-backed event store, an embedded Kafka (kfake), the
// Elasticsearch-compatible test server, and the services, all stopped when
// the test ends. The Postgres roles (docs/scale-out.md) share the fresh
// database unless Options.Env names databases of their own
// (EVENT_STORE_DATABASE_URL, REGISTRY_DATABASE_URL), which Start migrates.
package pipelinetest

import (
	"context"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/esserver"
	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore/backend"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/migrations"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/sluiceconfig"
	"github.com/sluicehq/sluice/shared/observability"
)

// Env is a running pipeline.
type Env struct {
	Config *sluiceconfig.Config
	Deps   pipeline.Deps
	// Pool is the main role's pool (DATABASE_URL); Pools holds every
	// role's (the same pool when the roles share the database).
	Pool  *pgxpool.Pool
	Pools *migrations.Pools
	Store *eventstore.Store
	Kafka *testenv.Kafka
	ES    *esserver.Server
	// ESURL and APIURL are the base URLs of Elasticsearch and the API
	// (empty when the api is not among the services).
	ESURL, APIURL string
}

// Options shape the pipeline.
type Options struct {
	// Env is added to the configuration (as environment variables would).
	Env map[string]string
	// Services to run (default: every service of the table).
	Services []string
	// APIRoutes, when set, returns extra routes for the API once the
	// dependencies exist (the admin API).
	APIRoutes func(pipeline.Deps) map[string]http.Handler
}

// Start starts the pipeline; it stops when the test ends.
func Start(t testing.TB, o Options) *Env {
	t.Helper()
	url, pool := testenv.NewMigratedDatabase(t)
	k := testenv.NewKafka(t)
	es := esserver.New()
	ts := httptest.NewServer(es)
	t.Cleanup(ts.Close)
	env := map[string]string{
		"DATABASE_URL": url, "EVENT_STORE_BACKEND": "file", "EVENT_STORE_FILE_DIR": t.TempDir(),
		"KAFKA_BROKERS": strings.Join(k.Brokers, ","), "KAFKA_TOPIC_PARTITIONS": "2", "KAFKA_TOPIC_REPLICATION_FACTOR": "1",
		"ELASTICSEARCH_URLS": ts.URL, "SLUICE_API_ADDR": "127.0.0.1:0",
		"EVENT_PUBLISHER_POLL_INTERVAL": "100ms", "WORKER_RETRY_BACKOFF_BASE": "20ms", "WORKER_RETRY_BACKOFF_CAP": "200ms",
		"SHUTDOWN_TIMEOUT": "5s",
	}
	maps.Copy(env, o.Env)
	cfg, err := sluiceconfig.Load(env)
	if err != nil {
		t.Fatalf("pipelinetest: config: %v", err)
	}
	// Databases of their own for the roles: migrated like `sluice migrate
	// up` does (a no-op on the fresh database), and one pool per database.
	if _, err := migrations.UpDatabases(context.Background(), cfg.Postgres, nil); err != nil {
		t.Fatalf("pipelinetest: migrate: %v", err)
	}
	pools, err := migrations.OpenPools(context.Background(), cfg.Postgres, func(ctx context.Context, db migrations.Database) (*pgxpool.Pool, error) {
		if db.URL == url {
			return pool, nil // the fresh database's, closed by testenv
		}
		p, err := pgxpool.New(ctx, db.URL)
		if err == nil {
			t.Cleanup(p.Close)
		}
		return p, err
	})
	if err != nil {
		t.Fatalf("pipelinetest: pools: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	bucket, err := backend.Open(ctx, cfg.EventStore)
	if err != nil {
		cancel()
		t.Fatalf("pipelinetest: event store: %v", err)
	}
	logger := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	st, err := eventstore.New(cfg.EventStore, eventstore.Deps{Pool: pools.Store, ShardPools: pools.StoreShards, Bucket: bucket, Logger: logger})
	if err != nil {
		cancel()
		t.Fatalf("pipelinetest: event store: %v", err)
	}
	e := &Env{Config: cfg, Pool: pools.Main, Pools: pools, Store: st, Kafka: k, ES: es, ESURL: ts.URL}
	e.Deps = pipeline.Deps{Config: cfg, Logger: logger, Pool: pools.Main, StorePool: pools.Store, RegistryPool: pools.Registry, Bucket: bucket, Store: st,
		Metrics: observability.NewProcessRegistry("test", "test"), Health: observability.NewHealth()}
	po := pipeline.Options{}
	if o.APIRoutes != nil {
		po.APIRoutes = o.APIRoutes(e.Deps)
	}
	names := o.Services
	if len(names) == 0 {
		for _, s := range pipeline.Table() {
			names = append(names, s.Name)
		}
	}
	var wg sync.WaitGroup
	var runners []pipeline.Runner
	stop := func() {
		cancel()
		wg.Wait()
		for _, r := range runners {
			r.Close()
		}
		_ = st.Close()
	}
	for _, name := range names {
		r, err := pipeline.Build(ctx, name, e.Deps, po)
		if err != nil {
			stop()
			t.Fatalf("pipelinetest: build %s: %v", name, err)
		}
		runners = append(runners, r)
		if a, ok := r.(*pipeline.APIRunner); ok {
			e.APIURL = "http://" + a.Addr().String()
		}
		wg.Go(func() {
			if err := r.Run(ctx); err != nil && ctx.Err() == nil {
				t.Errorf("pipelinetest: %s: %v", name, err)
			}
		})
	}
	t.Cleanup(stop)
	return e
}

// WaitFor polls cond every 50 ms until it is true, failing the test after d.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("pipelinetest: %s: not within %s", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// testWriter sends the services' warnings to the test log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
