package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/eventstore/objstore/backend"
	"github.com/sluicehq/sluice/migrations"
	"github.com/sluicehq/sluice/pipeline/sluiceconfig"
	"github.com/sluicehq/sluice/shared/kafka"
	"github.com/sluicehq/sluice/shared/observability"
)

// storeDeps are what the commands that touch the event store open: config,
// logger, the pool of the store role (EVENT_STORE_DATABASE_URL: the index,
// the relay's lease and parked records), bucket (self-tested) and store.
// The close func releases them.
type storeDeps struct {
	cfg    *sluiceconfig.Config
	logger *slog.Logger
	pool   *pgxpool.Pool
	bucket objstore.Bucket
	store  *eventstore.Store
}

// openStoreDeps opens them for a command: an unreachable object store is
// an error at once (the services wait for it instead: runService).
func openStoreDeps(cmd *cobra.Command) (*storeDeps, func(), error) {
	return openDepsWith(cmd, func(ctx context.Context, cfg *sluiceconfig.Config, logger *slog.Logger) (objstore.Bucket, error) {
		return openBucket(ctx, cfg, logger, false)
	})
}

// openDepsWith opens the config, the store role's pool, the bucket (with openBucket's
// choice of self-test and waiting) and the store; the close func releases
// them.
func openDepsWith(cmd *cobra.Command, open func(context.Context, *sluiceconfig.Config, *slog.Logger) (objstore.Bucket, error)) (*storeDeps, func(), error) {
	cfg, logger, err := loadConfig(cmd)
	if err != nil {
		return nil, nil, err
	}
	// A command runs once: a store whose layout cannot be read (Postgres
	// down, migrations not applied) is an error now, not a log line about
	// checking in the background followed by that error.
	cfg.EventStore.LayoutNoWait = true
	pools, err := openPools(cmd, cfg, migrations.RoleStore) // with the servers of EVENT_STORE_SHARD_MAP
	if err != nil {
		return nil, nil, err
	}
	bucket, st, err := openStoreOn(cmd.Context(), cfg, logger, pools, open)
	if err != nil {
		pools.Close()
		return nil, nil, err
	}
	return &storeDeps{cfg: cfg, logger: logger, pool: pools.Store, bucket: bucket, store: st}, func() { _ = st.Close(); pools.Close() }, nil
}

// openStoreOn opens the bucket (with open) and the event store on the
// store role's pools (its own and the shard map's servers); the caller
// closes the store.
func openStoreOn(ctx context.Context, cfg *sluiceconfig.Config, logger *slog.Logger, pools *migrations.Pools,
	open func(context.Context, *sluiceconfig.Config, *slog.Logger) (objstore.Bucket, error)) (objstore.Bucket, *eventstore.Store, error) {
	bucket, err := open(ctx, cfg, logger)
	if err != nil {
		return nil, nil, err
	}
	st, err := eventstore.New(cfg.EventStore, eventstore.Deps{Pool: pools.Store, ShardPools: pools.StoreShards, Bucket: bucket, Logger: logger})
	if err != nil {
		return nil, nil, err
	}
	return bucket, st, nil
}

// openBucket opens the bucket and runs its self-test (backend.Open). With
// wait, an unreachable object store (objstore.ErrUnavailable: refused,
// reset, timeouts, 5xx) is logged and tried again with a capped backoff
// until ctx ends; any other failure (credentials, a missing bucket, a
// backend without conditional create) ends start-up at once. While it
// waits, SLUICE_HTTP_ADDR answers /livez 200 and /readyz 503 (waiting for
// the event store), so that orchestrators see a live, unready service
// rather than a dead one; the service's own server takes the address over
// afterwards.
func openBucket(ctx context.Context, cfg *sluiceconfig.Config, logger *slog.Logger, wait bool) (objstore.Bucket, error) {
	delay := 500 * time.Millisecond
	var stopProbes func()
	defer func() {
		if stopProbes != nil {
			stopProbes()
		}
	}()
	if wait {
		// From the first attempt: a hung endpoint can take a minute to fail.
		stopProbes = serveStartupProbes(cfg.HTTP.Addr, logger, "opening the event store")
	}
	for {
		b, err := backend.Open(ctx, cfg.EventStore)
		if cerr := s3CredentialError(err); cerr != nil {
			return nil, cerr
		}
		if err == nil || !wait || !errors.Is(err, objstore.ErrUnavailable) {
			return b, err
		}
		logger.Warn("event store unreachable at start-up; waiting for it", "err", err, "retry_in", delay)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, errStopped
		case <-t.C:
		}
		delay = min(2*delay, 10*time.Second)
	}
}

// errStopped ends a start-up that was still waiting when the process was
// told to stop (SIGTERM): a clean exit, not a failure.
var errStopped = errors.New("stopped while waiting for the event store")

// serveStartupProbes serves /livez (200) and /readyz (503, reason) on addr
// until the returned func is called; nothing when addr is empty (off) or
// taken. Every other path answers 503 with Retry-After (problem+json code
// "starting"): the API shares its address with the probes, and a client
// calling it while it waits for a dependency must learn to retry, not get
// a 404 that says the route does not exist.
func serveStartupProbes(addr string, logger *slog.Logger, reason string) func() {
	if addr == "" {
		return func() {}
	}
	health := observability.NewHealth()
	health.AddReadiness("startup", func(context.Context) error { return errors.New(reason) })
	mux := observability.Handler(newRegistry(), health)
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.Header().Set("Retry-After", "2")
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(map[string]any{
			"type": api.ProblemTypePrefix + api.CodeStarting, "title": "Service starting", "status": http.StatusServiceUnavailable,
			"code": api.CodeStarting, "error": api.CodeStarting, "detail": reason, "message": reason,
		})
	})
	srv, err := observability.Listen(addr, mux)
	if err != nil {
		logger.Warn("no start-up probes", "err", err)
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ctx) }()
	return func() { cancel(); <-done }
}

// sideTopicReplication is the replication factor of a topic the operator
// names for a command (dlq's handled topic, relay republish --topic):
// KAFKA_TOPIC_REPLICATION_FACTOR when it is set, else -1, the cluster's
// default.replication.factor (KIP-464), not the config default of 3,
// which a one-broker dev Kafka refuses (INVALID_REPLICATION_FACTOR).
func sideTopicReplication(cfg kafka.Config) int {
	if _, set := os.LookupEnv("KAFKA_TOPIC_REPLICATION_FACTOR"); set {
		return cfg.ReplicationFactor
	}
	return -1
}
