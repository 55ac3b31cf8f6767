package main

import (
	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/pipeline"
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
			return runService(cmd, pipeline.InstanceWorker, pipeline.Options{}, nil)
		},
	}
}
