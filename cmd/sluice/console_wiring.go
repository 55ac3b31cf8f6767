package main

import (
	"net/http"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/console"
	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/inspect"
	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/pipeline/sluiceconfig"
	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/readmodel"
)

// newInspector opens the trace and aggregate views for the api process:
// the workers are the instance worker and the projections SLUICE_PROJECTIONS
// names (default history, as `sluice projection-worker`).
func newInspector(cfg *sluiceconfig.Config, pool *pgxpool.Pool, store *eventstore.Store, bucket objstore.Bucket, reg *registry.Registry) (*inspect.Inspector, error) {
	es, err := readmodel.NewClient(cfg.Elasticsearch)
	if err != nil {
		return nil, err
	}
	hs := []inspect.Handler{{Name: instanceworker.HandlerName, Group: cfg.Kafka.Group(instanceworker.GroupName), Kind: envelope.KindCommand}}
	list := os.Getenv(projectionsEnv)
	if list == "" {
		list = "history"
	}
	specs, err := parseProjections(list)
	if err != nil {
		return nil, err
	}
	for _, s := range specs {
		n, v := s.Projection.Name(), s.Projection.Version()
		hs = append(hs, inspect.Handler{Name: projectionworker.HandlerName(n, v), Group: cfg.Kafka.Group(projectionworker.GroupName(n, v)), Kind: envelope.KindDomain})
	}
	return inspect.NewFromConfig(inspect.Config{Kafka: cfg.Kafka, Relay: cfg.Relay, Elasticsearch: cfg.Elasticsearch}, inspect.Deps{Pool: pool, Store: store, Bucket: bucket, Registry: reg,
		Sequences: store, ES: es, Handlers: hs})
}

// consoleRoutes are the console's static files (public: every piece of
// data the page shows comes from the admin API, which checks the token).
func consoleRoutes() map[string]http.Handler {
	ch := console.Handler()
	return map[string]http.Handler{console.Path: ch, strings.TrimSuffix(console.Path, "/"): ch}
}
