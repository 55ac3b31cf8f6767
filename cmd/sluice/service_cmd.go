package main

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/auth"
	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/inspect"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/sluiceconfig"
	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/shared/observability"
)

// runService runs one service of the pipeline table as its own process:
// it opens what the service needs (the event store waited for at start-up,
// docs/architecture.md), builds it from the table, serves /metrics and the
// probes on SLUICE_HTTP_ADDR (unless the API serves them on that very
// address) until the service has stopped, and runs it until SIGTERM.
// started, when set, is called once the service is built (the api prints
// its address).
func runService(cmd *cobra.Command, name string, o pipeline.Options, started func(pipeline.Deps, pipeline.Runner)) error {
	svc, err := pipeline.Lookup(name)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	cfg, logger, err := loadConfig(cmd)
	if err != nil {
		return err
	}
	// Only the pools of the roles the service uses (docs/scale-out.md).
	pools, err := openPools(cmd, cfg, svc.Roles(o)...)
	if err != nil {
		return err
	}
	defer pools.Close()
	d := pipeline.Deps{Config: cfg, Logger: logger, Pool: pools.Main, StorePool: pools.Store, RegistryPool: pools.Registry}
	if svc.NeedsStore {
		// An object store unreachable at start-up is waited for, as an
		// outage while running would be (docs/architecture.md#explicit-failure).
		bucket, st, err := openStoreOn(ctx, cfg, logger, pools, func(ctx context.Context, cfg *sluiceconfig.Config, logger *slog.Logger) (objstore.Bucket, error) {
			return openBucket(ctx, cfg, logger, true)
		})
		if err != nil {
			return err
		}
		defer func() { _ = st.Close() }()
		d.Bucket, d.Store = bucket, st
	}
	d.Metrics, d.Health = newRegistry(), observability.NewHealth()
	tp, stopTracing, err := startTracing(cmd, d.Config, d.Logger, name)
	if err != nil {
		return err
	}
	defer stopTracing()
	d.TracerProvider = tp
	if name == pipeline.API {
		routes, a, closeRoutes, err := apiRoutes(d)
		if err != nil {
			return err
		}
		defer closeRoutes()
		o.APIRoutes, o.APIKeys, o.APIOIDC = routes, a.keys, a.oidc
	}
	r, err := pipeline.Build(ctx, name, d, o)
	if err != nil {
		return err
	}
	defer r.Close()
	obsAddr := d.Config.HTTP.Addr
	if name == pipeline.API && (obsAddr == o.APIAddr || o.APIAddr == "" && obsAddr == d.Config.API.Addr) {
		obsAddr = "" // the API's own port serves them
	}
	var obsErr chan error
	stopObs := func() {}
	if obsAddr != "" {
		srv, err := observability.Listen(obsAddr, observability.Handler(d.Metrics, d.Health))
		if err != nil {
			return err
		}
		d.Logger.Info(name+": observability server", "addr", srv.Addr())
		// It serves until the service has drained, not only until SIGTERM.
		obsCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		stopObs = cancel
		obsErr = make(chan error, 1)
		go func() { obsErr <- srv.Serve(obsCtx) }()
		defer cancel()
	}
	if started != nil {
		started(d, r)
	}
	err = r.Run(ctx)
	if obsErr != nil {
		stopObs()
		if serr := <-obsErr; serr != nil && err == nil {
			err = serr
		}
	}
	return err
}

// apiRoutes are what the api process serves beside the API: the console,
// the trace and aggregate views and the admin API (which need the event
// store and the tools, hence built here, above the table), and the API
// keys and OIDC verifier the API and the admin API share. The returned
// func releases them.
// apiAuth is what the API and the admin API share of access control.
type apiAuth struct {
	keys *auth.Keys
	oidc *auth.OIDC
}

func apiRoutes(d pipeline.Deps) (map[string]http.Handler, apiAuth, func(), error) {
	cfg := d.Config
	reg, err := registry.New(cfg.Registry.WithRetry(cfg.Worker.InstanceRetry()), registry.Deps{Pool: d.RegistryPool})
	if err != nil {
		return nil, apiAuth{}, nil, err
	}
	in, err := newInspector(cfg, d.StorePool, d.Store, d.Bucket, reg)
	if err != nil {
		return nil, apiAuth{}, nil, err
	}
	es, err := readmodel.NewClient(cfg.Elasticsearch)
	if err != nil {
		in.Close()
		return nil, apiAuth{}, nil, err
	}
	a := apiAuth{keys: auth.NewKeys(d.Pool, auth.KeysOptions{Refresh: cfg.Auth.KeyRefresh, Logger: d.Logger})}
	ctx, cancel := context.WithCancel(context.Background())
	if cfg.Auth.OIDCEnabled() {
		if a.oidc, err = auth.NewOIDC(ctx, cfg.Auth, nil, d.Logger); err != nil {
			cancel()
			in.Close()
			return nil, apiAuth{}, nil, err
		}
	}
	services, err := admin.ParseServices(cfg.API.AdminServices)
	if err != nil {
		cancel()
		in.Close()
		return nil, apiAuth{}, nil, err
	}
	workers, err := configuredWorkers(cfg)
	if err != nil {
		cancel()
		in.Close()
		return nil, apiAuth{}, nil, err
	}
	adm, err := admin.New(admin.Config{Process: cfg, Services: services, Workers: workers},
		admin.Deps{Pool: d.Pool, StorePool: d.StorePool, RegistryPool: d.RegistryPool, Store: d.Store, Bucket: d.Bucket, Registry: reg, ES: es, Logger: d.Logger,
			Auth: auth.NewAuthenticator(auth.Options{Keys: a.keys, OIDC: a.oidc, AdminToken: cfg.API.AdminToken.Value(), AdminReadToken: cfg.API.AdminReadToken.Value(), Required: true}),
			Keys: a.keys, Health: d.Health, Metrics: d.Metrics})
	if err != nil {
		cancel()
		in.Close()
		return nil, apiAuth{}, nil, err
	}
	adm.HandleRead(inspect.TracePath, in.Handler())
	adm.HandleRead(inspect.AggregatePath, in.Handler())
	routes := consoleRoutes()
	routes[admin.Prefix] = adm
	return routes, a, func() { cancel(); in.Close() }, nil
}
