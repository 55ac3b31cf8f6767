package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/shared/suggest"
	"github.com/sluicehq/sluice/worker"
)

// newConsumerPauseCmd is `sluice consumer pause|resume`: the durable pause
// flag of a worker group (registry.SetGroupPaused, which the admin API
// calls too).
func newConsumerPauseCmd(pause bool) *cobra.Command {
	var group, reason string
	var allowNew bool
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
the group, keep their leases and stay ready; sluice_worker_paused{handler} turns 1 on a worker
once that is done (the pause has taken effect there). resume restarts fetching. The flag is kept in Postgres, so it survives restarts. Without --yes it only prints
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
			// A group whose flag is set can always be paused again
			// (idempotent) or resumed, however it got its flag.
			st, err := reg.GroupPaused(cmd.Context(), group)
			flagged := err == nil && st.Paused
			if !allowNew && !flagged {
				if err := checkPauseGroup(cmd, group); err != nil {
					return err
				}
			}
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
	cmd.Flags().BoolVar(&allowNew, "allow-new", false, "set the flag of a group that neither exists in Kafka nor is configured here (its workers start later)")
	g.register(cmd, true)
	_ = cmd.MarkFlagRequired("group")
	return cmd
}

// checkPauseGroup refuses a group that neither is one this deployment
// configures (the instance worker, SLUICE_PROJECTIONS) nor exists in Kafka,
// naming the nearest that does (exit 3; --allow-new sets it anyway). When
// Kafka cannot be asked within a few seconds the flag is set all the same,
// with a warning: a pause must work while Kafka is out.
func checkPauseGroup(cmd *cobra.Command, group string) error {
	cfg, _, err := loadConfig(cmd)
	if err != nil {
		return err
	}
	ws, err := configuredWorkers(cfg)
	if err != nil {
		return err
	}
	configured := make([]string, 0, len(ws))
	for _, w := range ws {
		configured = append(configured, w.Group)
	}
	if slices.Contains(configured, group) {
		return nil
	}
	adm, closeFn, err := openConsumerAdmin(cmd)
	if err == nil {
		defer closeFn()
		ctx, cancel := context.WithTimeout(cmd.Context(), 3*time.Second)
		defer cancel()
		err = worker.FindGroup(ctx, adm, group)
	}
	var nf *suggest.NotFoundError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &nf):
		if nf.Nearest == "" {
			nf.Nearest = suggest.Nearest(group, configured)
		}
		nf.Note += "; pass --allow-new to set the flag before its workers start"
		return nf
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "warning: could not check that group %q exists (%v); setting the flag anyway\n", group, err)
	return nil
}
