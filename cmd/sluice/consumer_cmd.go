package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/sluicehq/sluice/shared/kafka"
	"github.com/sluicehq/sluice/worker"
)

// exitGroupActive is the exit code of `sluice consumer reset` and
// `consumer copy-offsets` when they refuse a group with live members.
const exitGroupActive = 5

// openConsumerAdmin returns an admin client for the configured brokers.
func openConsumerAdmin(cmd *cobra.Command) (*kadm.Client, func(), error) {
	cfg, _, err := loadConfig(cmd)
	if err != nil {
		return nil, nil, err
	}
	cl, err := kafka.NewClient(cfg.Kafka)
	if err != nil {
		return nil, nil, err
	}
	return kadm.NewClient(cl), cl.Close, nil
}

// newConsumerCmd is `sluice consumer`: flags and printing; the offset
// logic is package consumer's (Lag, ResetOffsets), which the admin API
// calls too.
func newConsumerCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "consumer",
		Short: "Kafka consumer-group offset tools: lag, and reset for replaying a topic into a worker group",
		Long: `Worker groups: {group prefix}instance-worker (topic {prefix}commands) and
{group prefix}projection-{name}-v{version} (topic {prefix}events); the group prefix is
KAFKA_GROUP_PREFIX, by default KAFKA_TOPIC_PREFIX (sluice.instance-worker). Replaying a
topic into a worker group means: stop the group's workers, sluice consumer reset --to ...,
start them again; the registry absorbs the duplicates (at most one side effect per
event_id). copy-offsets moves a worker to a new group id without re-reading its topic.`,
	}
	c.AddCommand(newConsumerLagCmd(), newConsumerResetCmd(), newConsumerCopyOffsetsCmd(), newConsumerPauseCmd(true), newConsumerPauseCmd(false))
	return c
}

// openGroupAdmin is the prologue of the consumer commands that name a
// group (lag, reset, copy-offsets): openConsumerAdmin, then a
// *suggest.NotFoundError (exit code 3) naming the nearest existing name
// when the group, or the topic when given, does not exist
// (worker.FindGroup, worker.FindTopic). On an error the client is closed
// already.
func openGroupAdmin(cmd *cobra.Command, group, topic string) (*kadm.Client, func(), error) {
	adm, closeFn, err := openConsumerAdmin(cmd)
	if err != nil {
		return nil, nil, err
	}
	err = worker.FindGroup(cmd.Context(), adm, group)
	if err == nil && topic != "" {
		err = worker.FindTopic(cmd.Context(), adm, topic)
	}
	if err != nil {
		closeFn()
		return nil, nil, err
	}
	return adm, closeFn, nil
}

func offsetOrDash(o int64) string {
	if o < 0 {
		return "-"
	}
	return strconv.FormatInt(o, 10)
}

func newConsumerLagCmd() *cobra.Command {
	var group, topic string
	cmd := &cobra.Command{
		Use:     "lag",
		Short:   "Per partition: committed offset, end offset and lag of a consumer group; totals",
		Example: `  sluice consumer lag --group sluice.instance-worker [--topic sluice.commands]`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			adm, closeFn, err := openGroupAdmin(cmd, group, topic)
			if err != nil {
				return err
			}
			defer closeFn()
			l, err := worker.Lag(cmd.Context(), adm, group, topic)
			if err != nil {
				return err
			}
			if len(l.Topics) == 0 {
				cmd.Printf("group %s has no committed offsets; give --topic to see the lag of a topic it would consume\n", group)
				return nil
			}
			members := "?"
			if l.MembersKnown {
				members = fmt.Sprintf("%d members, state %s", l.Members, l.State)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TOPIC\tPARTITION\tCOMMITTED\tEND\tLAG")
			for _, p := range l.Partitions {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\n", p.Topic, p.Partition, offsetOrDash(p.Committed), p.End, p.Lag)
			}
			_ = tw.Flush()
			cmd.Printf("consumer lag %s: %d partitions of %s, total lag %d (%s)\n", group, len(l.Partitions), strings.Join(l.Topics, ","), l.Total, members)
			return nil
		},
	}
	cmd.Flags().StringVar(&group, "group", "", "consumer group (required)")
	cmd.Flags().StringVar(&topic, "topic", "", "only this topic (default: every topic the group committed)")
	_ = cmd.MarkFlagRequired("group")
	return cmd
}

func newConsumerResetCmd() *cobra.Command {
	var group, topic, to string
	var g guardFlags
	var force bool
	cmd := &cobra.Command{
		Use:   "reset",
		Short: "Set a consumer group's committed offsets (replay or skip); a dry run without --yes; refuses while the group has live members",
		Long: `reset commits new offsets for every partition of the topic (default: every topic the group
has committed offsets for):

  earliest       the log start offset (replay everything retained)
  latest         the end offset (skip everything not yet consumed)
  time:T         the first offset with a timestamp at or after T (RFC 3339); the end when none
  offset:N       N, clamped to [start, end] of each partition

reset is a dry run by default: it prints the offsets it would set (CURRENT → NEW per partition)
and changes nothing. --yes commits them.

Stop the group's workers first: reset --yes refuses while the group has live members. --force
skips that check, but Kafka itself refuses offset commits from outside a group that has members
(UNKNOWN_MEMBER_ID), so it only helps once the members are gone or about to time out.`,
		Example: `  sluice consumer reset --group sluice.instance-worker --topic sluice.commands --to earliest
  sluice consumer reset --group sluice.projection-history-v1 --to time:2026-11-21T10:00:00Z --yes`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			act := g.yes && !g.dryRun
			target, err := worker.ParseResetTarget(to)
			if err != nil {
				return usage("%w", err)
			}
			adm, closeFn, err := openGroupAdmin(cmd, group, topic)
			if err != nil {
				return err
			}
			defer closeFn()
			res, err := worker.ResetOffsets(cmd.Context(), adm, worker.ResetOptions{Group: group, Topic: topic, To: target, DryRun: !act, Force: force})
			if errors.Is(err, worker.ErrGroupActive) {
				return &exitError{code: exitGroupActive, err: errors.New(res.MembersText() + " (or --force)")}
			}
			if len(res.Members) > 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning: "+res.MembersText())
			}
			if err == nil || len(res.Partitions) > 0 {
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "TOPIC\tPARTITION\tCURRENT\tNEW\tSTART\tEND")
				for _, p := range res.Partitions {
					fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%d\n", p.Topic, p.Partition, offsetOrDash(p.Current), p.New, p.Start, p.End)
				}
				_ = tw.Flush()
			}
			if err != nil {
				return err
			}
			if !act {
				cmd.Printf("consumer reset %s (dry run): %d partitions would be set to %s; nothing changed (pass --yes to commit)\n", group, len(res.Partitions), to)
				return nil
			}
			cmd.Printf("consumer reset %s: %d partitions set to %s\n", group, len(res.Partitions), to)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&group, "group", "", "consumer group (required)")
	f.StringVar(&topic, "topic", "", "only this topic (default: every topic the group committed)")
	f.StringVar(&to, "to", "", "earliest, latest, time:<RFC 3339> or offset:<N> (required)")
	g.register(cmd, true)
	f.BoolVar(&force, "force", false, "skip the live-members check")
	_ = cmd.MarkFlagRequired("group")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}

func newConsumerCopyOffsetsCmd() *cobra.Command {
	var from, to, topic string
	var g guardFlags
	var force bool
	cmd := &cobra.Command{
		Use:   "copy-offsets",
		Short: "Copy a group's committed offsets on a topic to another group (migrate a worker to a new group id); a dry run without --yes",
		Long: `copy-offsets commits the --from group's committed offsets on --topic as the --to group's,
partition by partition, so that workers started under the new group id go on where the old
group stopped instead of re-reading the topic.

It is a dry run by default: it prints FROM and the --to group's CURRENT offset per partition
and changes nothing. --yes commits. It refuses while the --to group has live members (Kafka
refuses the commit anyway), when the --to group already committed offsets on the topic, and
while the --from group has live members (its offsets still move); --force skips the last two.

Workers do this by themselves on first start when KAFKA_GROUP_PREFIX renames their group
(the unprefixed id of earlier versions is adopted); the command is for other renames, or to
do it ahead of the rollout.`,
		Example: `  sluice consumer copy-offsets --from instance-worker --to sluice.instance-worker --topic sluice.commands
  sluice consumer copy-offsets --from projection-history-v1 --to sluice.projection-history-v1 --topic sluice.events --yes`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			adm, closeFn, err := openGroupAdmin(cmd, from, topic)
			if err != nil {
				return err
			}
			defer closeFn()
			o := worker.CopyOptions{From: from, To: to, Topic: topic, DryRun: true, Force: force}
			plan, err := worker.CopyOffsets(cmd.Context(), adm, o)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TOPIC\tPARTITION\tFROM\tCURRENT")
			for _, p := range plan.Partitions {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", topic, p.Partition, p.From, offsetOrDash(p.Current))
			}
			_ = tw.Flush()
			if act := g.yes && !g.dryRun; !act {
				cmd.Printf("consumer copy-offsets %s → %s (dry run): %d partitions of %s would be committed; nothing changed (pass --yes to commit)\n", from, to, len(plan.Partitions), topic)
				return nil
			}
			o.DryRun = false
			res, err := worker.CopyOffsets(cmd.Context(), adm, o)
			if errors.Is(err, worker.ErrGroupActive) {
				// Live members: exit 5, as consumer reset (it was 7).
				return &exitError{code: exitGroupActive, err: err}
			}
			if errors.Is(err, worker.ErrTargetHasOffsets) {
				return unsafe(err)
			}
			if err != nil {
				return err
			}
			cmd.Printf("consumer copy-offsets %s → %s: %d partitions of %s committed\n", from, to, len(res.Partitions), topic)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&from, "from", "", "source consumer group (required)")
	f.StringVar(&to, "to", "", "target consumer group (required)")
	f.StringVar(&topic, "topic", "", "topic whose offsets are copied (required)")
	g.register(cmd, true)
	f.BoolVar(&force, "force", false, "copy although the target has offsets on the topic or the source has live members")
	for _, n := range []string{"from", "to", "topic"} {
		_ = cmd.MarkFlagRequired(n)
	}
	return cmd
}
