package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/pipeline/sluiceconfig"
	"github.com/sluicehq/sluice/shared/tracing"
)

// startTracing builds the tracer provider of a service from the OTEL_*
// environment (docs/tracing.md; off unless an exporter is asked for) and
// returns it with the func that flushes and stops it at exit. component
// names the default service.name, sluice-{component}.
func startTracing(cmd *cobra.Command, cfg *sluiceconfig.Config, logger *slog.Logger, component string) (trace.TracerProvider, func(), error) {
	p, err := tracing.Setup(cmd.Context(), "sluice-"+component, version, cfg.Tracing.Headers.Value())
	if err != nil {
		return nil, nil, err
	}
	if p.Exporter != "none" {
		logger.Info("tracing on", "exporter", p.Exporter)
	}
	return p.TracerProvider(), func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(cmd.Context()), 5*time.Second)
		defer cancel()
		if err := p.Shutdown(ctx); err != nil {
			logger.Warn("tracing: flushing spans at exit", "err", err)
		}
	}, nil
}
