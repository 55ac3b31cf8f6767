package main

import (
	"io"
	"log/slog"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/pipeline/sluiceconfig"
	"github.com/sluicehq/sluice/shared/observability"
)

// Build information, set with -ldflags "-X main.version=…".
var (
	version = "dev"
	commit  = "unknown"
)

// newRegistry returns the Prometheus registry of a sluice process, with
// sluice_build_info{version, commit, go_version} = 1 from this binary's
// build information.
func newRegistry() *prometheus.Registry {
	return observability.NewProcessRegistry(version, commit)
}

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "sluice",
		Short:         "sluice — an event-sourcing pipeline: S3 event store → Kafka → workers → Elasticsearch",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(
		newVersionCmd(),
		newMigrateCmd(),
		newConfigCmd(),
		newDevCmd(),
		newRegistryCmd(),
		newStoreCmd(),
		newHealthcheckCmd(),
		newAPICmd(),
		newInstanceWorkerCmd(),
		newRelayCmd(),
		newConsumerCmd(),
		newDLQCmd(),
		newVerifyCmd(),
		newProjectionWorkerCmd(),
		newProjectionCmd(),
		newSchemaCmd(),
		newAuthCmd(),
	)
	return root
}

// loadConfig reads the environment, applies its Go runtime settings
// (applyRuntime) and builds the process logger.
func loadConfig(cmd *cobra.Command) (*sluiceconfig.Config, *slog.Logger, error) {
	cfg, err := sluiceconfig.FromOS()
	if err != nil {
		return nil, nil, err
	}
	applyRuntime(cfg.Runtime)
	logger, err := observability.NewLogger(cmd.ErrOrStderr(), cfg.Log.Format, cfg.Log.Level)
	if err != nil {
		return nil, nil, err
	}
	return cfg, logger, nil
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of this binary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.Printf("sluice %s (commit %s)\n", version, commit)
			return nil
		},
	}
}

// applyRuntime sets the garbage collector's target from GOGC (default 400;
// the Go runtime alone would use 100 when GOGC is unset) and returns the
// previous one.
func applyRuntime(r observability.RuntimeConfig) (previous int) {
	return debug.SetGCPercent(r.GCPercent())
}
