package main

import (
	"context"
	"errors"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/shared/observability"
	"github.com/sluicehq/sluice/shared/readmodel"
)

// newInstanceWorkerCmd is `sluice instance-worker` (docs/instanceworker.md): it consumes the
// commands topic and turns commands into domain events and instance
// documents, until SIGTERM (then it drains within SHUTDOWN_TIMEOUT).
func newInstanceWorkerCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "instance-worker",
		Short: "Run the instance worker: commands → domain events + instance documents (docs/instanceworker.md)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, closeFn, err := openServiceDeps(cmd)
			if err != nil {
				return err
			}
			defer closeFn()
			cfg, logger, pool, store := d.cfg, d.logger, d.pool, d.store
			ctx := cmd.Context()
			es, err := readmodel.NewClient(cfg.Elasticsearch)
			if err != nil {
				return err
			}
			metrics := newRegistry()
			metrics.MustRegister(store.Collectors()...)
			health := observability.NewHealth()
			svc, err := instanceworker.NewService(cfg, instanceworker.Deps{
				Pool: pool, Store: store, ES: es, Logger: logger, Metrics: metrics, Health: health,
			})
			if err != nil {
				return err
			}
			obsCtx, stopObs := context.WithCancel(context.WithoutCancel(ctx))
			defer stopObs()
			if cfg.HTTP.Addr != "" {
				srv, err := observability.Listen(cfg.HTTP.Addr, observability.Handler(metrics, health))
				if err != nil {
					return err
				}
				go func() { _ = srv.Serve(obsCtx) }()
			}
			if err := svc.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				return err
			}
			return nil
		},
	}
}
