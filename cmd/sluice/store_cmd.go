package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/pipeline/sluiceconfig"
	"github.com/sluicehq/sluice/shared/envelope"
)

func newStoreCmd() *cobra.Command {
	c := &cobra.Command{Use: "store", Short: "Inspect, repair and reindex the event store (docs/eventstore.md)"}
	c.AddCommand(newStoreSegmentsCmd(), newStoreCatCmd(), newStoreReindexCmd(), newStoreRepairCmd())
	return c
}

func newStoreSegmentsCmd() *cobra.Command {
	var after int64
	var limit, shard int
	cmd := &cobra.Command{
		Use:   "segments",
		Short: "List segments (first/last position, size) after a position, of one shard",
		Long: `segments lists the segments holding positions after --after. A store of one shard
lists its objects (size and time included). A store of several shards (EVENT_STORE_SHARDS > 1)
has positions per shard: --shard names the shard, whose segments are found through the index
(FIRST and LAST are that shard's positions in each segment; size and time are not read).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if after < 0 {
				return usage("--after %d: want a position >= 0", after)
			}
			if limit < 1 {
				return usage("--limit %d: want at least 1", limit)
			}
			d, sh, closeFn, err := openShardStore(cmd, openReadStoreDeps, shard, true)
			if err != nil {
				return err
			}
			defer closeFn()
			segs, err := d.store.ShardLog(sh).Segments(cmd.Context(), after, limit)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "KEY\tFIRST\tLAST\tEVENTS\tBYTES\tMODIFIED")
			var events, size int64
			for _, s := range segs {
				n := s.Last - s.First + 1
				events += n
				size += s.Size
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\n", s.Key, s.First, s.Last, n, s.Size, s.LastModified.UTC().Format(time.RFC3339))
			}
			_ = tw.Flush()
			cmd.Printf("%d segments, %d positions, %d bytes\n", len(segs), events, size)
			return nil
		},
	}
	cmd.Flags().Int64Var(&after, "after", 0, "list segments holding positions after this one (of --shard)")
	cmd.Flags().IntVar(&limit, "limit", 1000, "most segments to list")
	shardFlag(cmd, &shard, "the shard whose segments to list (required for a store of several shards)")
	return cmd
}

func newStoreCatCmd() *cobra.Command {
	var from, to, fromSeq, toSeq int64
	var eventID, aggType, aggID, kind, cursor string
	var most int
	cmd := &cobra.Command{
		Use:   "cat",
		Short: "Print events as JSON lines: by position range or log cursor, aggregate or event id",
		Long: `cat prints events as JSON lines, byte for byte as stored: one event (--event-id), one
aggregate's stream (--aggregate-id), or the log. The log of a store of one shard is read by
position (--from/--to, from the segments). With --cursor, or on a store of several shards
(EVENT_STORE_SHARDS > 1), it is read by log cursor (docs/eventstore.md#the-cursor) up to
where every shard is settled: after the cursor (default: the beginning), at most --limit
events; the cursor to resume after is printed last, on stderr ("cursor: …").`,
		Example: `  sluice store cat --from 1 --to 100
  sluice store cat --cursor v1.4.120.98.131.0 --limit 1000
  sluice store cat --aggregate-type Instance --aggregate-id 'shop:orders:42'
  sluice store cat --event-id 2f1c…`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := catFlagsValid(cmd, from, to, fromSeq, toSeq, most); err != nil {
				return err
			}
			st, closeFn, err := openReadStore(cmd)
			if err != nil {
				return err
			}
			defer closeFn()
			ctx := cmd.Context()
			byCursor := cmd.Flags().Changed("cursor") || (st.Shards() > 1 && eventID == "" && aggID == "")
			if !byCursor && cmd.Flags().Changed("limit") {
				return usage("--limit bounds a read by --cursor (or of a store of several shards); with --event-id, --aggregate-id or --from/--to it does not apply")
			}
			if byCursor && (cmd.Flags().Changed("from") || cmd.Flags().Changed("to")) {
				if st.Shards() > 1 {
					return usage("--from/--to name positions of a store of one shard; this store has %d shards: read it by --cursor", st.Shards())
				}
				return usage("give --cursor or --from/--to, not both")
			}
			out := cmd.OutOrStdout()
			n := 0
			print := func(ev eventstore.Event) {
				_, _ = out.Write(ev.Raw)
				if len(ev.Raw) == 0 || ev.Raw[len(ev.Raw)-1] != '\n' {
					_, _ = io.WriteString(out, "\n")
				}
				n++
			}
			switch {
			case byCursor:
				next, err := catByCursor(ctx, st, cursor, most, print)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "%d events\ncursor: %s\n", n, next)
				return nil
			case eventID != "":
				ev, err := st.ByEventID(ctx, eventID)
				if err != nil {
					return missingEvent(err)
				}
				print(ev)
			case aggID != "":
				if err := catStream(ctx, st, aggType, aggID, kind, fromSeq, toSeq, print); err != nil {
					return err
				}
			default:
				if err := oneShard(cmd, st); err != nil {
					return err
				}
				if err := catPositions(ctx, st, from, to, print); err != nil {
					return err
				}
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "%d events\n", n)
			return nil
		},
	}
	f := cmd.Flags()
	f.Int64Var(&from, "from", 1, "first position")
	f.Int64Var(&to, "to", 0, "last position (0: the head)")
	f.StringVar(&eventID, "event-id", "", "print one event by id")
	f.StringVar(&aggType, "aggregate-type", "", "aggregate type (with --aggregate-id)")
	f.StringVar(&aggID, "aggregate-id", "", "print one aggregate's stream")
	f.Int64Var(&fromSeq, "from-seq", 1, "first sequence number (with --aggregate-id)")
	f.Int64Var(&toSeq, "to-seq", 0, "last sequence number (0: open)")
	f.StringVar(&kind, "kind", "", "command, domain or empty for both (with --aggregate-id)")
	f.StringVar(&cursor, "cursor", "", "read the log after this cursor (a store of several shards: v1.N.P0.…; default the beginning)")
	f.IntVar(&most, "limit", 0, "most events to print with --cursor (0: up to where every shard is settled)")
	return cmd
}

// catFlagsValid refuses values of store cat's flags it could not honour
// (they were read as given or ignored: --from -1 printed from the start):
// a usage error naming the flag.
func catFlagsValid(cmd *cobra.Command, from, to, fromSeq, toSeq int64, most int) error {
	f := cmd.Flags()
	aggID, _ := f.GetString("aggregate-id")
	switch {
	case from < 1:
		return usage("--from %d: want a position >= 1", from)
	case to < 0:
		return usage("--to %d: want a position >= 1 (0: the head)", to)
	case to > 0 && to < from:
		return usage("--to %d is before --from %d", to, from)
	case fromSeq < 1:
		return usage("--from-seq %d: want a sequence number >= 1", fromSeq)
	case toSeq < 0:
		return usage("--to-seq %d: want a sequence number >= 1 (0: open)", toSeq)
	case most < 0:
		return usage("--limit %d: want 0 (up to where every shard is settled) or more", most)
	case f.Changed("cursor") && (f.Changed("from") || f.Changed("to")):
		return usage("give --cursor or --from/--to, not both")
	}
	if id, _ := f.GetString("event-id"); f.Changed("event-id") {
		// Refused here, before the store is opened (it was exit 1 with the
		// store's "field event_id: must be a UUID").
		if _, err := uuid.Parse(id); err != nil {
			return usage("--event-id %q: want a UUID (an event_id or a command_id)", id)
		}
	}
	if aggType, _ := f.GetString("aggregate-type"); aggID != "" && aggType == "" {
		return usage("--aggregate-id needs --aggregate-type")
	}
	if kind, _ := f.GetString("kind"); kind != "" && !envelope.Kind(kind).Valid() {
		return usage("--kind %q: want command, domain or empty", kind)
	}
	if cursor, _ := f.GetString("cursor"); cursor != "" {
		if _, err := eventstore.ParseCursor(cursor); err != nil {
			return usage("--cursor: %w", err)
		}
	}
	if aggID == "" {
		for _, name := range []string{"from-seq", "to-seq", "kind"} {
			if f.Changed(name) {
				return usage("--%s applies with --aggregate-id only", name)
			}
		}
	}
	return nil
}

// catByCursor prints the log after cursor (the beginning when empty), at
// most most events (0: up to where every shard is settled), and returns
// the cursor to resume after.
func catByCursor(ctx context.Context, st *eventstore.Store, cursor string, most int, print func(eventstore.Event)) (eventstore.Cursor, error) {
	var c eventstore.Cursor
	if cursor != "" {
		var err error
		if c, err = eventstore.ParseCursor(cursor); err != nil {
			return c, usage("--cursor: %w", err)
		}
	}
	return st.LogWalk(ctx, c, most, func(ev eventstore.Event, _ eventstore.Cursor) error {
		print(ev)
		return nil
	})
}

// catStream prints one aggregate's stream.
func catStream(ctx context.Context, st *eventstore.Store, aggType, aggID, kind string, fromSeq, toSeq int64, print func(eventstore.Event)) error {
	if aggType == "" {
		return usage("--aggregate-id needs --aggregate-type")
	}
	if kind != "" && !envelope.Kind(kind).Valid() {
		return usage("--kind %q: want command, domain or empty", kind)
	}
	if err := st.FindStream(ctx, aggType, aggID); err != nil {
		return err
	}
	evs, err := st.Stream(ctx, aggType, aggID, fromSeq, toSeq, envelope.Kind(kind))
	if err != nil {
		return err
	}
	for _, ev := range evs {
		print(ev)
	}
	return nil
}

// catPositions prints the log of a one-shard store from position from to
// to (0: the head), read from the segments.
func catPositions(ctx context.Context, st *eventstore.Store, from, to int64, print func(eventstore.Event)) error {
	if to != 0 && to < from {
		return usage("--to must not be below --from")
	}
	after := max(from-1, 0)
	for {
		segs, err := st.Segments(ctx, after, 200)
		if err != nil || len(segs) == 0 {
			return err
		}
		for _, s := range segs {
			if to != 0 && s.First > to {
				return nil
			}
			evs, err := st.ReadSegment(ctx, s.Key)
			if err != nil {
				return err
			}
			for _, ev := range evs {
				if ev.Envelope.Position >= from && (to == 0 || ev.Envelope.Position <= to) {
					print(ev)
				}
			}
			after = s.Last
		}
	}
}

func newStoreReindexCmd() *cobra.Command {
	var g guardFlags
	var quiet time.Duration
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "reindex",
		Short: "Rebuild the Postgres index (log_head, sequences, appends) from the segments alone; refused while a writer is live",
		Long: `reindex replaces sluice.appends with one row per segment line and raises sequences and
log_head to what the segments say (never lowers them). It is refused while a writer is live:
any position reserved within --quiet-for (default twice EVENT_STORE_APPEND_TIMEOUT) by a writer
other than reindex. Stop the api and the instance workers first. A --quiet-for shorter than
EVENT_STORE_APPEND_TIMEOUT (0 included) is refused (exit 2): a writer may take that long from
its reservation to its commit, so a shorter window misses a live writer; there is no flag that
skips the check.

--dry-run prints the segments, positions and bytes it would read and the index it replaces;
acting needs --yes (or a "yes" on a terminal). On a terminal a progress bar shows events/s and
the ETA; --json prints a summary for scripts.`,
		Example: `  sluice store reindex --dry-run
  sluice store reindex --yes --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkQuietFor(cmd, quiet); err != nil {
				return err
			}
			d, closeFn, err := openStoreDeps(cmd)
			if err != nil {
				return err
			}
			defer closeFn()
			cfg, st := d.cfg, d.store
			if !cmd.Flags().Changed("quiet-for") {
				quiet = 2 * cfg.EventStore.AppendTimeout
			}
			plan, err := st.PlanReindex(cmd.Context(), quiet)
			if errors.Is(err, eventstore.ErrWriterLive) {
				return unsafe(err)
			}
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if !asJSON {
				cmd.Printf("reindex plan: read %d segments (%d positions, %d bytes); replace %d index rows (log_head %d); no writer reserved within %s\n",
					plan.Segments, plan.Positions, plan.Bytes, plan.IndexRows, plan.NextPosition, quiet)
			}
			act, err := g.confirm(cmd, fmt.Sprintf("replace the index of %d rows from %d segments", plan.IndexRows, plan.Segments))
			if err != nil {
				return err
			}
			if !act {
				if asJSON {
					return writeSummary(out, reindexSummary{DryRun: true, Plan: plan})
				}
				cmd.Printf("reindex (dry run): nothing changed\n")
				return nil
			}
			bar := newProgress(cmd, plan.Positions, "reindex", "events")
			start := time.Now()
			rep, err := st.ReindexWithProgress(cmd.Context(), func(p eventstore.ReindexProgress) { bar.set(p.Lines) })
			bar.finish()
			if err != nil {
				return reindexError(err, d.cfg.EventStore)
			}
			el := time.Since(start)
			sum := reindexSummary{Plan: plan, Report: &reindexReportJSON{Segments: rep.Segments, Events: rep.Events,
				Duplicates: rep.Duplicates, Aggregates: rep.Aggregates, NextPosition: rep.NextPosition}, ElapsedSeconds: el.Seconds(), EventsPerSecond: float64(rep.Events) / max(el.Seconds(), 1e-9)}
			if asJSON {
				return writeSummary(out, sum)
			}
			cmd.Printf("reindex: %d segments, %d events, %d aggregates, %d duplicate lines skipped, next position %d (%s, %.0f events/s)\n",
				rep.Segments, rep.Events, rep.Aggregates, rep.Duplicates, rep.NextPosition, el.Round(time.Millisecond), sum.EventsPerSecond)
			return nil
		},
	}
	g.register(cmd, false)
	cmd.Flags().DurationVar(&quiet, "quiet-for", 0, "a writer that reserved within this long counts as live; at least EVENT_STORE_APPEND_TIMEOUT (default twice it)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON summary")
	return cmd
}

// reindexError is the error of a reindex that stopped. Interrupted (Ctrl-C,
// SIGTERM) it said only "read segments/…: context canceled", not that the
// index it was replacing is rolled back: reindex replaces it in one
// transaction (per server of EVENT_STORE_SHARD_MAP: the servers done
// before keep their new index, which is the same the run again writes).
func reindexError(err error, cfg eventstore.Config) error {
	if !errors.Is(err, context.Canceled) {
		return err
	}
	if servers, _ := cfg.ShardServers(); len(servers) > 1 {
		return fmt.Errorf("%w: reindex interrupted; the server it was reindexing keeps its index as it was (one transaction per server; the servers before it are reindexed); run it again to finish", err)
	}
	return fmt.Errorf("%w: reindex interrupted; nothing changed (the index is replaced in one transaction); run it again", err)
}

// checkQuietFor refuses (exit 2) a --quiet-for given shorter than the
// append timeout, before anything is opened: a window of 0 sees no writer
// as live, and one shorter than EVENT_STORE_APPEND_TIMEOUT misses a live
// writer's append still in flight (eventstore.Config.CheckQuietWindow).
func checkQuietFor(cmd *cobra.Command, quiet time.Duration) error {
	if !cmd.Flags().Changed("quiet-for") {
		return nil // the default, twice the append timeout
	}
	cfg, err := sluiceconfig.FromOS()
	if err != nil {
		return err
	}
	es := cfg.EventStore
	if es.CheckQuietWindow(quiet) != nil {
		return usage("--quiet-for %s: want at least %s, EVENT_STORE_APPEND_TIMEOUT (a writer may take that long from its reservation to its commit, so a shorter window misses a live writer); leave it out for 2 × EVENT_STORE_APPEND_TIMEOUT (%s)",
			quiet, es.MinQuietWindow(), 2*es.AppendTimeout)
	}
	return nil
}

// reindexReportJSON is eventstore.ReindexReport in the --json summary.
type reindexReportJSON struct {
	Segments     int   `json:"segments"`
	Events       int64 `json:"events"`
	Duplicates   int64 `json:"duplicates"`
	Aggregates   int64 `json:"aggregates"`
	NextPosition int64 `json:"next_position"`
}

// reindexSummary is the --json output of `sluice store reindex`.
type reindexSummary struct {
	DryRun          bool                   `json:"dry_run"`
	Plan            eventstore.ReindexPlan `json:"plan"`
	Report          *reindexReportJSON     `json:"report,omitempty"`
	ElapsedSeconds  float64                `json:"elapsed_seconds,omitempty"`
	EventsPerSecond float64                `json:"events_per_second,omitempty"`
}

func newStoreRepairCmd() *cobra.Command {
	var olderThan time.Duration
	cmd := &cobra.Command{
		Use:   "repair",
		Short: "Resolve reserved rows: commit those whose segment exists, abandon those older than the append timeout without one",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if olderThan < 0 {
				// Every reservation is older than a negative age: live
				// writers' included.
				return usage("--older-than %s: want a duration >= 0 (0: EVENT_STORE_APPEND_TIMEOUT)", olderThan)
			}
			d, closeFn, err := openStoreDeps(cmd)
			if err != nil {
				return err
			}
			defer closeFn()
			cfg, st := d.cfg, d.store
			age := olderThan
			if age == 0 {
				age = cfg.EventStore.AppendTimeout
			}
			rep, err := st.Repair(cmd.Context(), age)
			if err != nil {
				return err
			}
			cmd.Printf("repair: %d blocks examined, %d rows committed, %d abandoned, %d still in flight\n",
				rep.Blocks, rep.Committed, rep.Abandoned, rep.InFlight)
			return nil
		},
	}
	cmd.Flags().DurationVar(&olderThan, "older-than", 0, "look at reservations at least this old (default EVENT_STORE_APPEND_TIMEOUT); one without a segment is abandoned only once older than EVENT_STORE_APPEND_TIMEOUT")
	return cmd
}

// missingEvent is err of a read by event id: exit 3 when no event has
// that id (a name that does not exist, as a missing group or letter);
// a segment missing under an indexed event stays an error (exit 1).
func missingEvent(err error) error {
	if errors.Is(err, eventstore.ErrNotFound) && !errors.Is(err, objstore.ErrNotFound) {
		return &exitError{code: exitNotFound, err: err}
	}
	return err
}
