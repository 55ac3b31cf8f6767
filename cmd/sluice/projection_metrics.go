package main

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/shared/observability"
)

// switchMetricsFlag is the flag of `sluice projection rebuild|rollback`
// that serves the rebuilding consumer's metrics.
const switchMetricsFlag = "metrics-addr"

// addSwitchMetricsFlag adds --metrics-addr to a rebuild or rollback.
func addSwitchMetricsFlag(cmd *cobra.Command) {
	cmd.Flags().String(switchMetricsFlag, "",
		"serve /metrics (and /livez, /readyz) on this address while the command runs, e.g. :9090; "+
			"the worker metrics of the version being built (sluice_worker_consumer_lag, sluice_worker_records_total "+
			"with handler projection:{name}:v{N}) feed the SluiceProjectionRebuildStuck alert")
}

// serveSwitchMetrics returns the registry a rebuild or rollback registers
// its consumer's metrics in, served on --metrics-addr until the returned
// stop is called. Without the flag the registry is nil (the service makes
// a private one) and nothing listens.
func serveSwitchMetrics(cmd *cobra.Command, logger *slog.Logger) (prometheus.Registerer, func(), error) {
	addr, _ := cmd.Flags().GetString(switchMetricsFlag)
	if addr == "" {
		return nil, func() {}, nil
	}
	reg := newRegistry()
	srv, err := observability.Listen(addr, observability.Handler(reg, observability.NewHealth()))
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(cmd.Context()))
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ctx) }()
	logger.Info("serving the rebuild's metrics", "addr", srv.Addr())
	return reg, func() { cancel(); <-done }, nil
}
