package main

import (
	"github.com/spf13/cobra"
)

// newConsumerPauseCmd is `sluice consumer pause|resume`: the durable pause
// flag of a worker group (registry.SetGroupPaused, which the admin API
// calls too).
func newConsumerPauseCmd(pause bool) *cobra.Command {
	var group, reason string
	var g guardFlags
	use, verb := "resume", "resumed"
	if pause {
		use, verb = "pause", "paused"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: "Durably " + use + " a worker group (every replica, within WORKER_PAUSE_POLL_INTERVAL); a dry run without --yes",
		Long: `pause stops every worker of the group from fetching new records within
WORKER_PAUSE_POLL_INTERVAL: what they already fetched finishes and is committed; they stay in
the group, keep their leases and stay ready; sluice_worker_paused{handler} is 1. resume restarts
fetching. The flag is kept in Postgres, so it survives restarts. Without --yes it only prints
the change it would make.`,
		Example: `  sluice consumer ` + use + ` --group sluice.instance-worker --yes`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			act := g.yes && !g.dryRun
			reg, closeFn, err := openRegistry(cmd)
			if err != nil {
				return err
			}
			defer closeFn()
			ch, err := reg.SetGroupPaused(cmd.Context(), group, pause, "cli", reason, !act)
			if err != nil {
				return err
			}
			switch {
			case !ch.Changed:
				cmd.Printf("consumer %s %s: already %s; nothing changed\n", use, group, verb)
			case !act:
				cmd.Printf("consumer %s %s (dry run): would be %s; nothing changed (pass --yes)\n", use, group, verb)
			default:
				cmd.Printf("consumer %s %s: %s\n", use, group, verb)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&group, "group", "", "consumer group (required)")
	cmd.Flags().StringVar(&reason, "reason", "", "why (kept with the flag)")
	g.register(cmd, true)
	_ = cmd.MarkFlagRequired("group")
	return cmd
}
