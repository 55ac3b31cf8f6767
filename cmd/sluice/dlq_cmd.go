package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/dlq"
)

// The dead-letter commands: flags and printing. The logic (the handled
// topic, the redrive protocol) is package dlq's, which the admin API calls
// too.

// openDLQ opens the dead-letter topic of --topic; reg is needed by redrive
// only.
func openDLQ(cmd *cobra.Command, topic string, reg dlq.Registry) (*dlq.Queue, error) {
	if topic == "" {
		return nil, usage("--topic is required (e.g. sluice.commands.dlq)")
	}
	cfg, _, err := loadConfig(cmd)
	if err != nil {
		return nil, err
	}
	rf := int16(sideTopicReplication(cfg.Kafka)) // the handled topic is the operator's own
	by, _ := os.Hostname()
	if u := os.Getenv("USER"); u != "" {
		by = u + "@" + by
	}
	q, err := dlq.New(dlq.Config{Topic: topic, Kafka: cfg.Kafka, ReplicationFactor: rf, By: by}, dlq.Deps{Registry: reg})
	if err != nil {
		return nil, err
	}
	if err := q.Find(cmd.Context(), cfg.Kafka.CommandsDLQTopic, cfg.Kafka.EventsDLQTopic); err != nil {
		q.Close()
		return nil, err
	}
	return q, nil
}

// noLetter gives a missing letter exit code 3.
func noLetter(err error) error {
	var pr *dlq.PartitionRequiredError
	switch {
	case errors.Is(err, dlq.ErrNoLetter):
		return &exitError{code: exitNotFound, err: err}
	case errors.As(err, &pr):
		// The letter is named by --offset alone on a topic of several
		// partitions: a usage error (it exited 1).
		return &exitError{code: exitUsage, err: err}
	}
	return err
}

// letterArg reads the optional LETTER argument, PARTITION:OFFSET as dlq
// list prints it in its LETTER column ("3:17"), into partition and offset;
// with it, --partition and --offset are not given. It reports whether a
// letter was named, by the argument or by --offset.
func letterArg(cmd *cobra.Command, args []string, partition *int32, offset *int64) (bool, error) {
	if len(args) == 0 {
		return cmd.Flags().Changed("offset"), nil
	}
	if cmd.Flags().Changed("partition") || cmd.Flags().Changed("offset") {
		return false, usage("letter %s: give the letter or --partition/--offset, not both", args[0])
	}
	p, o, ok := strings.Cut(args[0], ":")
	pi, errP := strconv.ParseInt(p, 10, 32)
	oi, errO := strconv.ParseInt(o, 10, 64)
	if !ok || errP != nil || errO != nil || pi < 0 || oi < 0 {
		return false, usage("letter %q: want PARTITION:OFFSET as dlq list prints it (e.g. 3:17)", args[0])
	}
	*partition, *offset = int32(pi), oi
	return true, nil
}

// namedLetter reads the one letter show and drop act on: the argument or
// --partition/--offset, refusing neither.
func namedLetter(cmd *cobra.Command, args []string, partition *int32, offset *int64) error {
	named, err := letterArg(cmd, args, partition, offset)
	switch {
	case err != nil:
		return err
	case !named:
		return usage("name the letter: PARTITION:OFFSET as dlq list prints it, or --offset")
	}
	return letterFlags(*partition, *offset)
}

// redriveTarget checks redrive's target: exactly one of a letter (the
// argument or --offset) and --all.
func redriveTarget(cmd *cobra.Command, args []string, partition *int32, offset *int64, all bool) error {
	named, err := letterArg(cmd, args, partition, offset)
	switch {
	case err != nil:
		return err
	case all == named:
		return usage("give exactly one of a letter (PARTITION:OFFSET or --offset) or --all")
	case all:
		return nil
	}
	return letterFlags(*partition, *offset)
}

// letterFlags refuses a --partition or --offset no letter can have (an
// --offset left at -1 read as "required flag not set" only when left out).
func letterFlags(partition int32, offset int64) error {
	switch {
	case partition < -1:
		return usage("--partition %d: want a partition >= 0", partition)
	case offset < 0:
		return usage("--offset %d: want an offset >= 0", offset)
	}
	return nil
}

// readProgress prints the throttled progress of reading a topic; done
// prints the final line when the topic was large.
func readProgress(w io.Writer, label string) (dlq.ProgressFunc, func()) {
	prog := newOpProgress(w, label, 0, "records")
	return func(_, total int64) {
			prog.total = total
			prog.add(1)
		}, func() {
			if prog.total >= 1000 {
				prog.done()
			}
		}
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n-1] + "…"
	}
	return s
}

func newDLQCmd() *cobra.Command {
	var topic string
	c := &cobra.Command{
		Use:   "dlq",
		Short: "Inspect, redrive and drop dead letters (docs/operator-commands.md#sluice-dlq)",
		Long: `Dead letters are the records a worker gave up on, in its DLQ topic
(COMMANDS_DLQ_TOPIC, EVENTS_DLQ_TOPIC) with the record of docs/worker-runtime.md#the-dead-letter-record. A letter is named
partition:offset. What was done with it (redriven, dropped) is recorded in the
compacted topic {topic}.handled; list hides handled letters unless --all.`,
	}
	c.PersistentFlags().StringVar(&topic, "topic", "", "dead-letter topic (e.g. sluice.commands.dlq)")
	c.AddCommand(newDLQListCmd(&topic), newDLQShowCmd(&topic), newDLQRedriveCmd(&topic), newDLQDropCmd(&topic))
	return c
}

func newDLQListCmd(topic *string) *cobra.Command {
	var limit int
	var all bool
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "One line per dead letter not yet handled (--all: every letter, with its state)",
		Example: `  sluice dlq list --topic sluice.commands.dlq --limit 50`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 0 {
				return usage("--limit %d: want 0 (every letter) or more", limit)
			}
			q, err := openDLQ(cmd, *topic, nil)
			if err != nil {
				return err
			}
			defer q.Close()
			prog, done := readProgress(cmd.ErrOrStderr(), "dlq read "+q.Topic())
			res, err := q.List(cmd.Context(), dlq.ListOptions{All: all, Limit: limit, Progress: prog})
			if err != nil {
				return err
			}
			done()
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "LETTER\tSTATE\tFAILED_AT\tORIGINAL\tHANDLER\tCLASS\tATTEMPTS\tERROR")
			for _, e := range res.Letters {
				l := e.Letter
				if l.Bad != nil {
					fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\t-\t%s\n", l.ID(), e.State, l.Timestamp.UTC().Format(time.RFC3339), oneLine(l.Bad.Error(), 100))
					continue
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", l.ID(), e.State, l.Record.FailedAt.UTC().Format(time.RFC3339), l.OriginalRef(),
					l.Record.Handler, l.Record.ErrorClass, l.Record.AttemptCount, oneLine(l.Record.Error, 100))
			}
			_ = tw.Flush()
			more := ""
			if res.More > 0 {
				more = fmt.Sprintf(" (--limit %d: %d more not shown)", limit, res.More)
			}
			cmd.Printf("dlq list %s: %d letters, %d shown, %d handled (redriven or dropped) %s%s\n", q.Topic(), res.Total, len(res.Letters), res.Handled,
				map[bool]string{true: "included", false: "hidden"}[all], more)
			return nil
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 100, "most letters to print (0: all)")
	cmd.Flags().BoolVar(&all, "all", false, "include letters already redriven or dropped")
	return cmd
}

func newDLQShowCmd(topic *string) *cobra.Command {
	var partition int32
	var offset int64
	cmd := &cobra.Command{
		Use:   "show [PARTITION:OFFSET]",
		Short: "Print one dead letter in full, with the original value decoded",
		Example: `  sluice dlq show --topic sluice.commands.dlq 3:17
  sluice dlq show --topic sluice.commands.dlq --partition 3 --offset 17`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := namedLetter(cmd, args, &partition, &offset); err != nil {
				return err
			}
			q, err := openDLQ(cmd, *topic, nil)
			if err != nil {
				return err
			}
			defer q.Close()
			res, err := q.Show(cmd.Context(), dlq.Ref{Partition: partition, Offset: offset})
			if err != nil {
				return noLetter(err)
			}
			l := res.Letter
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "letter             %s %s\nstate              %s\n", q.Topic(), l.ID(), res.State)
			if m := res.Marker; m != nil {
				fmt.Fprintf(out, "handled            %s at %s by %s %s\n", m.Action, m.At.Format(time.RFC3339), m.By, m.Note)
			}
			fmt.Fprintf(out, "produced_at        %s\n", l.Timestamp.UTC().Format(time.RFC3339Nano))
			if l.Bad != nil {
				fmt.Fprintf(out, "error              %v\n", l.Bad)
				return nil
			}
			r := l.Record
			fmt.Fprintf(out, "original           %s\nhandler            %s\nevent_id           %s\nerror_class        %s\nattempt_count      %d\nfirst_failed_at    %s\nfailed_at          %s\nerror              %s\n",
				l.OriginalRef(), r.Handler, l.EventID(), r.ErrorClass, r.AttemptCount,
				r.FirstFailedAt.UTC().Format(time.RFC3339Nano), r.FailedAt.UTC().Format(time.RFC3339Nano), r.Error)
			if r.OriginalTruncated {
				fmt.Fprintf(out, "pointer form       %s: the original (%d bytes, position %d) is read from %s\n",
					r.TruncatedReason, r.OriginalSize, r.OriginalPosition, l.OriginalRef())
			}
			if res.OriginalErr != nil {
				return res.OriginalErr
			}
			orig := res.Original
			fmt.Fprintf(out, "original_key       %q\noriginal_headers\n", orig.Key)
			for _, h := range orig.Headers {
				fmt.Fprintf(out, "  %-16s %q\n", h.Key, h.Value)
			}
			var pretty bytes.Buffer
			switch {
			case !utf8.Valid(orig.Value):
				fmt.Fprintf(out, "original_value     (%d bytes, not UTF-8; base64)\n  %s\n", len(orig.Value), base64.StdEncoding.EncodeToString(orig.Value))
			case json.Indent(&pretty, orig.Value, "  ", "  ") == nil:
				fmt.Fprintf(out, "original_value     (%d bytes)\n  %s\n", len(orig.Value), pretty.String())
			default:
				fmt.Fprintf(out, "original_value     (%d bytes)\n  %s\n", len(orig.Value), orig.Value)
			}
			return nil
		},
	}
	cmd.Flags().Int32Var(&partition, "partition", -1, "partition of the letter (may be left out for a single-partition topic)")
	cmd.Flags().Int64Var(&offset, "offset", -1, "offset of the letter (or name it PARTITION:OFFSET)")
	return cmd
}

func newDLQRedriveCmd(topic *string) *cobra.Command {
	var partition int32
	var offset int64
	var all, dryRun bool
	cmd := &cobra.Command{
		Use:   "redrive [PARTITION:OFFSET]",
		Short: "Reset the registry row and re-produce the original record to its topic (idempotent)",
		Long: `redrive resets each letter's registry row (dead → failed, due now, attempts reset) and
re-produces the original record — key, value and headers — to its original topic, where the
worker claims it again as attempt 1. A letter already redriven or dropped, a duplicate letter of
an original already redriven, and a letter whose registry row is no longer dead are skipped, so
redriving twice has one effect. Fix the cause first (dlq show).`,
		Example: `  sluice dlq redrive --topic sluice.commands.dlq 3:17
  sluice dlq redrive --topic sluice.commands.dlq --partition 3 --offset 17
  sluice dlq redrive --topic sluice.commands.dlq --all --dry-run`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := redriveTarget(cmd, args, &partition, &offset, all); err != nil {
				return err
			}
			if *topic == "" {
				_, err := openDLQ(cmd, *topic, nil)
				return err
			}
			reg, closeReg, err := openRegistry(cmd)
			if err != nil {
				return err
			}
			defer closeReg()
			q, err := openDLQ(cmd, *topic, reg)
			if err != nil {
				return err
			}
			defer q.Close()
			o := dlq.RedriveOptions{All: all, DryRun: dryRun}
			readProg, readDone := readProgress(cmd.ErrOrStderr(), "dlq read "+q.Topic())
			o.ReadProgress = readProg
			if !all {
				o.Ref = &dlq.Ref{Partition: partition, Offset: offset}
			}
			var prog *opProgress
			o.Progress = func(_, total int64) {
				if prog == nil {
					readDone()
					prog = newOpProgress(cmd.ErrOrStderr(), "dlq redrive "+q.Topic(), total, "letters")
				}
				prog.add(1)
			}
			res, err := q.Redrive(cmd.Context(), o)
			out := cmd.OutOrStdout()
			for _, it := range res.Items {
				fmt.Fprintf(out, "%-9s %s  %s\n", it.Outcome, it.Letter, it.Detail)
			}
			if err != nil {
				return noLetter(err)
			}
			if prog != nil && res.Letters >= 100 {
				prog.done()
			}
			if dryRun {
				cmd.Printf("dlq redrive %s (dry run): %d would be redriven, %d skipped; nothing changed\n", q.Topic(), res.Redriven, res.Skipped)
				return nil
			}
			cmd.Printf("dlq redrive %s: %d redriven, %d skipped, %d failed\n", q.Topic(), res.Redriven, res.Skipped, res.Failed)
			if res.Failed > 0 {
				return fmt.Errorf("dlq redrive: %d letters could not be redriven (see above)", res.Failed)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.Int32Var(&partition, "partition", -1, "partition of the letter (may be left out for a single-partition topic)")
	f.Int64Var(&offset, "offset", -1, "offset of the letter to redrive")
	f.BoolVar(&all, "all", false, "redrive every letter not yet handled")
	f.BoolVar(&dryRun, "dry-run", false, "print what would be redriven; change nothing")
	return cmd
}

func newDLQDropCmd(topic *string) *cobra.Command {
	var partition int32
	var offset int64
	var reason string
	cmd := &cobra.Command{
		Use:   "drop [PARTITION:OFFSET]",
		Short: "Mark a dead letter as handled without redriving it (recorded in {topic}.handled)",
		Long: `drop records, durably, that a letter needs no redrive: list hides it from then on, and
redrive skips it. The letter itself stays in the DLQ topic (Kafka retention removes it); its
registry row stays dead, so the event is never re-run by redelivery.`,
		Example: `  sluice dlq drop --topic sluice.commands.dlq 3:17 --reason "test data"
  sluice dlq drop --topic sluice.commands.dlq --partition 3 --offset 17 --reason "test data"`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := namedLetter(cmd, args, &partition, &offset); err != nil {
				return err
			}
			q, err := openDLQ(cmd, *topic, nil)
			if err != nil {
				return err
			}
			defer q.Close()
			res, err := q.Drop(cmd.Context(), dlq.Ref{Partition: partition, Offset: offset}, reason, false)
			if err != nil {
				return noLetter(err)
			}
			if m := res.Already; m != nil {
				cmd.Printf("dlq drop %s %s: already %s at %s; nothing changed\n", q.Topic(), res.Letter.ID(), m.Action, m.At.Format(time.RFC3339))
				return nil
			}
			cmd.Printf("dlq drop %s %s: dropped (original %s, recorded in %s)\n", q.Topic(), res.Letter.ID(), res.Letter.OriginalRef(), q.HandledTopic())
			return nil
		},
	}
	cmd.Flags().Int32Var(&partition, "partition", -1, "partition of the letter (may be left out for a single-partition topic)")
	cmd.Flags().Int64Var(&offset, "offset", -1, "offset of the letter (or name it PARTITION:OFFSET)")
	cmd.Flags().StringVar(&reason, "reason", "", "why it is dropped (kept with the record)")
	return cmd
}
