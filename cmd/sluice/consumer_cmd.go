package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/relay"
)

// exitGroupActive is the exit code of `sluice consumer reset` when it refuses
// a group with live members.
const exitGroupActive = 5

// openConsumerAdmin returns an admin client for the configured brokers.
func openConsumerAdmin(cmd *cobra.Command) (*kadm.Client, func(), error) {
	cfg, _, err := loadConfig(cmd)
	if err != nil {
		return nil, nil, err
	}
	kopts, err := relay.KafkaOpts(cfg.Kafka)
	if err != nil {
		return nil, nil, err
	}
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return nil, nil, err
	}
	return kadm.NewClient(cl), cl.Close, nil
}

func newConsumerCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "consumer",
		Short: "Kafka consumer-group offset tools: lag, and reset for replaying a topic into a worker group",
		Long: `Worker groups: instance-worker (topic {prefix}commands), projection-{name}-v{version}
(topic {prefix}events). Replaying a topic into a worker group means: stop the group's
workers, sluice consumer reset --to ..., start them again; the registry absorbs the
duplicates (at most one side effect per event_id).`,
	}
	c.AddCommand(newConsumerLagCmd(), newConsumerResetCmd())
	return c
}

// groupTopics returns the topics to work on: the flag, else every topic the
// group has committed offsets for.
func groupTopics(committed kadm.OffsetResponses, topic string) []string {
	if topic != "" {
		return []string{topic}
	}
	var ts []string
	for t := range committed {
		ts = append(ts, t)
	}
	sort.Strings(ts)
	return ts
}

func newConsumerLagCmd() *cobra.Command {
	var group, topic string
	cmd := &cobra.Command{
		Use:     "lag",
		Short:   "Per partition: committed offset, end offset and lag of a consumer group; totals",
		Example: `  sluice consumer lag --group instance-worker [--topic sluice.commands]`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			adm, closeFn, err := openConsumerAdmin(cmd)
			if err != nil {
				return err
			}
			defer closeFn()
			ctx := cmd.Context()
			committed, err := adm.FetchOffsets(ctx, group)
			if err == nil {
				err = committed.Error()
			}
			if err != nil {
				return fmt.Errorf("group %s: offsets: %w", group, err)
			}
			topics := groupTopics(committed, topic)
			if len(topics) == 0 {
				cmd.Printf("group %s has no committed offsets; give --topic to see the lag of a topic it would consume\n", group)
				return nil
			}
			starts, ends, err := listStartEnd(ctx, adm, topics)
			if err != nil {
				return err
			}
			members := "?"
			if dg, err := adm.DescribeGroups(ctx, group); err == nil {
				if g, ok := dg[group]; ok && g.Err == nil {
					members = fmt.Sprintf("%d members, state %s", len(g.Members), g.State)
				}
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TOPIC\tPARTITION\tCOMMITTED\tEND\tLAG")
			var total, parts int64
			for _, e := range sortedListed(ends) {
				lag, shown := int64(0), "-"
				if o, ok := committed.Lookup(e.Topic, e.Partition); ok && o.At >= 0 {
					shown = strconv.FormatInt(o.At, 10)
					lag = max(e.Offset-o.At, 0)
				} else if s, ok := starts.Lookup(e.Topic, e.Partition); ok {
					lag = max(e.Offset-s.Offset, 0) // nothing committed: everything retained is unread
				}
				total += lag
				parts++
				fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\n", e.Topic, e.Partition, shown, e.Offset, lag)
			}
			_ = tw.Flush()
			cmd.Printf("consumer lag %s: %d partitions of %s, total lag %d (%s)\n", group, parts, strings.Join(topics, ","), total, members)
			return nil
		},
	}
	cmd.Flags().StringVar(&group, "group", "", "consumer group (required)")
	cmd.Flags().StringVar(&topic, "topic", "", "only this topic (default: every topic the group committed)")
	_ = cmd.MarkFlagRequired("group")
	return cmd
}

func listStartEnd(ctx context.Context, adm *kadm.Client, topics []string) (kadm.ListedOffsets, kadm.ListedOffsets, error) {
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("start offsets: %w", err)
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("end offsets: %w", err)
	}
	return starts, ends, nil
}

func sortedListed(l kadm.ListedOffsets) []kadm.ListedOffset {
	var out []kadm.ListedOffset
	l.Each(func(o kadm.ListedOffset) { out = append(out, o) })
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out
}

// resetTarget is a parsed --to.
type resetTarget struct {
	kind   string // earliest, latest, time, offset
	at     time.Time
	offset int64
}

func parseResetTarget(s string) (resetTarget, error) {
	switch {
	case s == "earliest" || s == "latest":
		return resetTarget{kind: s}, nil
	case strings.HasPrefix(s, "time:"):
		t, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(s, "time:"))
		if err != nil {
			return resetTarget{}, fmt.Errorf("--to %q: want time:<RFC 3339>: %w", s, err)
		}
		return resetTarget{kind: "time", at: t}, nil
	case strings.HasPrefix(s, "offset:"):
		n, err := strconv.ParseInt(strings.TrimPrefix(s, "offset:"), 10, 64)
		if err != nil || n < 0 {
			return resetTarget{}, fmt.Errorf("--to %q: want offset:<N >= 0>", s)
		}
		return resetTarget{kind: "offset", offset: n}, nil
	}
	return resetTarget{}, fmt.Errorf("--to %q: want earliest, latest, time:<RFC 3339> or offset:<N>", s)
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
		Example: `  sluice consumer reset --group instance-worker --topic sluice.commands --to earliest
  sluice consumer reset --group projection-history-v1 --to time:2026-11-21T10:00:00Z --yes`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			act := g.yes && !g.dryRun
			target, err := parseResetTarget(to)
			if err != nil {
				return err
			}
			adm, closeFn, err := openConsumerAdmin(cmd)
			if err != nil {
				return err
			}
			defer closeFn()
			ctx := cmd.Context()
			dg, err := adm.DescribeGroups(ctx, group)
			if err != nil {
				return fmt.Errorf("describe group %s: %w", group, err)
			}
			g := dg[group]
			if g.Err != nil {
				return fmt.Errorf("describe group %s: %w", group, g.Err)
			}
			if n := len(g.Members); n > 0 {
				ids := make([]string, 0, n)
				for _, m := range g.Members {
					ids = append(ids, m.ClientID+"@"+m.ClientHost)
				}
				msg := fmt.Sprintf("group %s has %d live members (%s, state %s): stop its workers first", group, n, strings.Join(ids, ", "), g.State)
				if !force && act {
					return &exitError{code: exitGroupActive, err: errors.New(msg + " (or --force)")}
				}
				fmt.Fprintln(cmd.ErrOrStderr(), "warning: "+msg)
			}
			committed, err := adm.FetchOffsets(ctx, group)
			if err == nil {
				err = committed.Error()
			}
			if err != nil {
				return fmt.Errorf("group %s: offsets: %w", group, err)
			}
			topics := groupTopics(committed, topic)
			if len(topics) == 0 {
				return fmt.Errorf("group %s has no committed offsets: give --topic", group)
			}
			starts, ends, err := listStartEnd(ctx, adm, topics)
			if err != nil {
				return err
			}
			var atTime kadm.ListedOffsets
			if target.kind == "time" {
				if atTime, err = adm.ListOffsetsAfterMilli(ctx, target.at.UnixMilli(), topics...); err == nil {
					err = atTime.Error()
				}
				if err != nil {
					return fmt.Errorf("offsets at %s: %w", target.at.Format(time.RFC3339), err)
				}
			}
			var set kadm.Offsets
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TOPIC\tPARTITION\tCURRENT\tNEW\tSTART\tEND")
			for _, e := range sortedListed(ends) {
				s, _ := starts.Lookup(e.Topic, e.Partition)
				var n int64
				switch target.kind {
				case "earliest":
					n = s.Offset
				case "latest":
					n = e.Offset
				case "time":
					n = e.Offset
					if o, ok := atTime.Lookup(e.Topic, e.Partition); ok && o.Offset >= 0 {
						n = o.Offset
					}
				case "offset":
					n = min(max(target.offset, s.Offset), e.Offset)
				}
				cur := "-"
				if o, ok := committed.Lookup(e.Topic, e.Partition); ok && o.At >= 0 {
					cur = strconv.FormatInt(o.At, 10)
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%d\n", e.Topic, e.Partition, cur, n, s.Offset, e.Offset)
				set.AddOffset(e.Topic, e.Partition, n, -1)
			}
			_ = tw.Flush()
			if !act {
				cmd.Printf("consumer reset %s (dry run): %d partitions would be set to %s; nothing changed (pass --yes to commit)\n", group, len(set.Sorted()), to)
				return nil
			}
			resp, err := adm.CommitOffsets(ctx, group, set)
			if err == nil {
				err = resp.Error()
			}
			if err != nil {
				return fmt.Errorf("commit offsets of group %s: %w (Kafka refuses commits from outside a group with live members)", group, err)
			}
			cmd.Printf("consumer reset %s: %d partitions set to %s\n", group, len(set.Sorted()), to)
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
