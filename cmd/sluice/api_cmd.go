package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/shared/observability"
)

// newAPICmd is `sluice api` (docs/api.md): the command API on SLUICE_API_ADDR,
// plus /metrics, /livez and /readyz on SLUICE_HTTP_ADDR like every service
// (the API's own port serves them too). It stops gracefully on SIGTERM,
// finishing requests in flight within SHUTDOWN_TIMEOUT.
func newAPICmd() *cobra.Command {
	var addr string
	c := &cobra.Command{
		Use:   "api",
		Short: "Serve the command API: create, patch and delete instances, command status, reads (docs/api.md)",
		Long: `sluice api serves the HTTP command API. Each accepted request is one command
appended to the event store (202 with its command id); the relay and the
instance worker do the rest. Bearer tokens from SLUICE_API_TOKENS are required
on /v1 when set. The API is described at /openapi.json and in docs/api.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, closeFn, err := openServiceDeps(cmd)
			if err != nil {
				return err
			}
			defer closeFn()
			cfg, logger, pool, store := d.cfg, d.logger, d.pool, d.store
			if addr == "" {
				addr = cfg.API.Addr
			}
			ctx := cmd.Context()
			reg, err := registry.New(pool, registry.OptionsFromConfig(cfg.Registry, cfg.Worker, cfg.Worker.InstanceMaxRetryAttempts))
			if err != nil {
				return err
			}
			tokens := make([]string, 0, len(cfg.API.Tokens))
			for _, t := range cfg.API.Tokens {
				if t.Value() != "" {
					tokens = append(tokens, t.Value())
				}
			}
			metrics := newRegistry()
			metrics.MustRegister(store.Collectors()...)
			health := observability.NewHealth()
			health.AddReadiness("postgres", func(ctx context.Context) error { return pool.Ping(ctx) })
			h, err := api.New(api.Options{
				Store: store, Registry: reg, Sequences: store, Logger: logger,
				Tokens: tokens, MaxBodyBytes: int64(cfg.API.MaxBodyBytes),
				Limits:  envelopeLimits(cfg.EventStore),
				Metrics: metrics, Health: health,
				Events: store, Commits: api.StoreCommits(ctx, store),
			})
			if err != nil {
				return err
			}
			in, err := newInspector(cfg, pool, store, d.bucket, reg)
			if err != nil {
				return err
			}
			defer in.Close()
			h = withConsole(h, in)
			if cfg.HTTP.Addr != "" && cfg.HTTP.Addr != addr {
				obs, err := observability.Listen(cfg.HTTP.Addr, observability.Handler(metrics, health))
				if err != nil {
					return err
				}
				obsCtx, stopObs := context.WithCancel(context.WithoutCancel(ctx))
				obsDone := make(chan struct{})
				go func() {
					defer close(obsDone)
					if err := obs.Serve(obsCtx); err != nil {
						logger.Error("observability server", "err", err)
					}
				}()
				defer func() { stopObs(); <-obsDone }()
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("api: listen %s: %w", addr, err)
			}
			logger.Info("sluice api listening", "addr", ln.Addr().String(), "auth", len(tokens) > 0)
			cmd.Printf("sluice api listening on http://%s\n", ln.Addr())
			return serveAPI(ctx, ln, h, cfg.Worker.ShutdownTimeout, logger)
		},
	}
	c.Flags().StringVar(&addr, "addr", "", "listen address (default SLUICE_API_ADDR, :8080)")
	return c
}

// serveAPI serves h on ln until ctx is done, then shuts down gracefully,
// giving requests in flight up to grace to finish.
func serveAPI(ctx context.Context, ln net.Listener, h http.Handler, grace time.Duration, logger *slog.Logger) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("api: serve: %w", err)
	case <-ctx.Done():
	}
	if grace <= 0 {
		grace = 30 * time.Second
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		return fmt.Errorf("api: serve: %w", serr)
	}
	if err != nil {
		return fmt.Errorf("api: shutdown: %w", err)
	}
	return nil
}
