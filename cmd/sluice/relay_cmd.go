package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/migrations"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/sluiceconfig"
	"github.com/sluicehq/sluice/relay"
	"github.com/sluicehq/sluice/shared/kafka"
)

func newRelayCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "relay",
		Short: "Run the relay: publish the event store into Kafka (docs/relay.md)",
		Long: `sluice relay tails the event store's segment log and publishes every event to
Kafka in position order, checkpointing its progress in checkpoints/{name}.json.
Several replicas may run: one holds the leader lease and publishes, the others
stand by. Over a store of more than one shard (EVENT_STORE_SHARDS) each shard
has its own lease and checkpoint (checkpoints/{name}/shard-NNNN.json), and the
replicas share the shards, about equally (docs/relay.md#shards). Configuration: EVENT_PUBLISHER_*, KAFKA_*, EVENT_STORE_*, DATABASE_URL.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runService(cmd, pipeline.Relay, pipeline.Options{}, nil)
		},
	}
	c.AddCommand(newRelayCheckpointCmd(), newRelayGapsCmd(), newRelayRepublishCmd(), newRelayParkedCmd())
	return c
}

func newRelayCheckpointCmd() *cobra.Command {
	c := &cobra.Command{Use: "checkpoint", Short: "Inspect or move the relay checkpoint"}
	c.AddCommand(newRelayCheckpointShowCmd(), newRelayCheckpointSetCmd())
	return c
}

// newRelayCheckpointShowCmd is "sluice relay checkpoint show".
func newRelayCheckpointShowCmd() *cobra.Command {
	var shard int
	c := &cobra.Command{
		Use:   "show",
		Short: "Show the checkpoint, the lease and the lag (of every shard, or of --shard)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, one, closeFn, err := openShardStore(cmd, openReadStoreDeps, shard, false)
			if err != nil {
				return err
			}
			defer closeFn()
			sts, err := relay.Statuses(cmd.Context(), d.store, d.bucket, d.pool, d.cfg.Relay)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if one < 0 {
				printShardStatuses(out, sts)
				return nil
			}
			st := sts[one]
			if !st.Found {
				fmt.Fprintf(out, "no checkpoint at %s yet (a relay starts at the beginning unless EVENT_PUBLISHER_START_* says otherwise); head %d\n", st.Key, st.Head)
				return nil
			}
			cp := st.Checkpoint
			fmt.Fprintf(out, "checkpoint      %s\nposition        %d\nhead            %d\nlag             %d\nupdated_at      %s\nrelay_epoch     %d\nwritten_by      %s\npending_gaps    %d\nrecent_ids      %d\n",
				st.Key, cp.Position, st.Head, st.Lag(), cp.UpdatedAt.Format(time.RFC3339Nano), cp.RelayEpoch, cp.Holder, len(cp.PendingGaps), len(cp.RecentEventIDs))
			if st.LeaseFound {
				fmt.Fprintf(out, "lease           %s by %s, epoch %d, until %s\n", leaseState(st.Lease), st.Lease.Holder, st.Lease.Epoch, st.Lease.ExpiresAt.Format(time.RFC3339))
			}
			return nil
		},
	}
	shardFlag(c, &shard, "the shard to show in full (a store of more than one shard; default: a line per shard)")
	return c
}

// printShardStatuses prints a line per shard (`relay checkpoint show` over
// a store of more than one shard).
func printShardStatuses(out io.Writer, sts []relay.ShardStatus) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tPOSITION\tHEAD\tLAG\tEPOCH\tPENDING_GAPS\tUPDATED_AT\tLEASE\tHOLDER\tUNTIL\tCHECKPOINT")
	var lag int64
	holders := map[string]int{}
	for _, st := range sts {
		pos, updated := "-", "-"
		if st.Found {
			pos, updated = fmt.Sprint(st.Checkpoint.Position), st.Checkpoint.UpdatedAt.UTC().Format(time.RFC3339)
		}
		lease, holder, until := "none", "-", "-"
		if st.LeaseFound {
			lease, holder, until = leaseState(st.Lease), st.Lease.Holder, st.Lease.ExpiresAt.UTC().Format(time.RFC3339)
			if !st.Lease.Expired {
				holders[holder]++
			}
		}
		lag += st.Lag()
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", st.Shard, pos, st.Head, st.Lag(), st.Checkpoint.RelayEpoch,
			len(st.Checkpoint.PendingGaps), updated, lease, holder, until, st.Key)
	}
	_ = tw.Flush()
	fmt.Fprintf(out, "%d shards, lag %d in all, %d replicas holding leases\n", len(sts), lag, len(holders))
}

// leaseState is "held" or "expired".
func leaseState(info relay.LeaseInfo) string {
	if info.Expired {
		return "expired"
	}
	return "held"
}

// newRelayCheckpointSetCmd is "sluice relay checkpoint set".
func newRelayCheckpointSetCmd() *cobra.Command {
	var position int64
	var shard int
	var at string
	var g guardFlags
	set := &cobra.Command{
		Use:   "set",
		Short: "Move the checkpoint (moving it back re-publishes; consumers absorb duplicates)",
		Example: `  sluice relay checkpoint set --position 1200
  sluice relay checkpoint set --time 2026-11-21T10:00:00Z`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			posSet, timeSet := cmd.Flags().Changed("position"), cmd.Flags().Changed("time")
			if posSet == timeSet {
				return usage("set exactly one of --position or --time")
			}
			if posSet && position < 0 {
				return usage("--position %d: want a position >= 0 (0: before the first event)", position)
			}
			var t time.Time
			if timeSet {
				var err error
				if t, err = time.Parse(time.RFC3339Nano, at); err != nil {
					return usage("--time %q: want an RFC 3339 time: %w", at, err)
				}
			}
			d, sh, closeFn, err := openShardStore(cmd, openStoreDeps, shard, true)
			if err != nil {
				return err
			}
			defer closeFn()
			ctx := cmd.Context()
			if timeSet {
				if position, err = d.store.ShardLog(sh).PositionAt(ctx, t); err != nil {
					return err
				}
			}
			cps := relay.NewCheckpointStore(d.bucket, relay.ShardCheckpointKey(d.cfg.Relay.CheckpointKey, sh, d.store.Shards()))
			plan, err := relay.PlanShardCheckpoint(ctx, d.store, sh, cps, position)
			if errors.Is(err, relay.ErrCheckpointOutOfRange) {
				return unsafe(err)
			} else if err != nil {
				return err
			}
			printCheckpointPlan(cmd, plan)
			if act, err := g.confirm(cmd, fmt.Sprintf("move checkpoint %s from %d to %d", plan.Key, plan.From, plan.To)); !act {
				return err
			}
			old, cur, err := relay.SetCheckpoint(ctx, cps, position)
			if err != nil {
				return err
			}
			cmd.Print(checkpointMovedLine(cps.Key(), old.Position, cur.Position))
			return nil
		},
	}
	set.Flags().Int64Var(&position, "position", 0, "new checkpoint position (the relay publishes from position+1)")
	set.Flags().StringVar(&at, "time", "", "RFC 3339 time: publish from the first event committed at or after it")
	shardFlag(set, &shard, "the shard whose checkpoint moves (required for a store of more than one shard; positions are the shard's)")
	g.register(set, false)
	return set
}

// checkpointMovedLine is what `relay checkpoint set` prints once it wrote
// the checkpoint: moved forward or back, or left where it was (a second
// run of the same command said "moved forward: 30 -> 30").
func checkpointMovedLine(key string, from, to int64) string {
	switch {
	case to == from:
		return fmt.Sprintf("checkpoint %s unchanged: already at %d; a running relay continues from it\n", key, to)
	case to < from:
		return fmt.Sprintf("checkpoint %s moved back (positions after it are published again): %d -> %d; a running relay continues from it\n", key, from, to)
	}
	return fmt.Sprintf("checkpoint %s moved forward: %d -> %d; a running relay continues from it\n", key, from, to)
}

func newRelayGapsCmd() *cobra.Command {
	var shard int
	c := &cobra.Command{
		Use:   "gaps",
		Short: "List pending gaps of the checkpoint and uncommitted ranges of the index (of every shard, or of --shard)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, one, closeFn, err := openShardStore(cmd, openReadStoreDeps, shard, false)
			if err != nil {
				return err
			}
			defer closeFn()
			n := max(d.store.Shards(), 1)
			shards := []int{one}
			if one < 0 {
				shards = shards[:0]
				for sh := range n {
					shards = append(shards, sh)
				}
			}
			ctx := cmd.Context()
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			col := ""
			if n > 1 {
				col = "SHARD\t"
			}
			fmt.Fprintln(tw, col+"FIRST\tLAST\tPOSITIONS\tSTATE\tSINCE\tAGGREGATES")
			counts := map[string]int64{}
			ranges := 0
			var ckpts []string
			for _, sh := range shards {
				cp, _, _, err := relay.NewCheckpointStore(d.bucket, relay.ShardCheckpointKey(d.cfg.Relay.CheckpointKey, sh, n)).Load(ctx)
				if err != nil {
					return err
				}
				gaps, err := relay.ShardGaps(ctx, d.store, sh, cp)
				if err != nil {
					return err
				}
				for _, g := range gaps {
					k := g.Last - g.First + 1
					counts[g.State] += k
					if n > 1 {
						fmt.Fprintf(tw, "%d\t", sh)
					}
					fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\t%s\n", g.First, g.Last, k, g.State, g.Since.UTC().Format(time.RFC3339), strings.Join(g.Aggregates, ","))
				}
				ranges += len(gaps)
				ckpts = append(ckpts, fmt.Sprint(cp.Position))
			}
			_ = tw.Flush()
			what := "checkpoint " + strings.Join(ckpts, "")
			if len(shards) > 1 {
				what = "checkpoints by shard " + strings.Join(ckpts, ",")
			} else if n > 1 {
				what = fmt.Sprintf("shard %d checkpoint %s", shards[0], ckpts[0])
			}
			cmd.Printf("%d ranges: %d positions pending (re-checked within EVENT_PUBLISHER_LOOKBACK_SECONDS), %d abandoned in the index, %d reserved; %s\n",
				ranges, counts["pending"], counts["abandoned"], counts["reserved"], what)
			return nil
		},
	}
	shardFlag(c, &shard, "only this shard (a store of more than one shard; default: every shard)")
	return c
}

func newRelayRepublishCmd() *cobra.Command {
	var from, to int64
	var shard int
	var topic string
	c := &cobra.Command{
		Use:     "republish",
		Short:   "Publish a range of the log to Kafka again (the checkpoint is not touched)",
		Example: `  sluice relay republish --from-position 1000 --to-position 2000 [--topic sluice.replay]`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if from < 1 || to < from {
				return usage("--from-position %d --to-position %d: want 1 <= from <= to", from, to)
			}
			d, sh, closeFn, err := openShardStore(cmd, openStoreDeps, shard, true)
			if err != nil {
				return err
			}
			defer closeFn()
			cl, err := kafka.NewClient(d.cfg.Kafka, kafka.MaxBuffered(2000))
			if err != nil {
				return err
			}
			defer cl.Close()
			router := relay.NewRouter(d.cfg.Kafka.CommandsTopic, d.cfg.Kafka.EventsTopic, nil).WithFormat(d.cfg.Kafka.Format())
			names, spec := router.Topics(), kafka.TopicSpec(d.cfg.Kafka)
			if topic != "" {
				names = []string{topic}
				spec.Replication = sideTopicReplication(d.cfg.Kafka)
			}
			if err := kafka.EnsureSpec(cmd.Context(), cl, spec, names...); err != nil {
				return err
			}
			start := time.Now()
			errOut := cmd.ErrOrStderr()
			rep, err := relay.RepublishShard(cmd.Context(), d.store, sh, cl, router, from, to, topic, func(r relay.RepublishReport, at int64) {
				fmt.Fprintf(errOut, "republished %d records (at position %d of %d..%d)\n", r.Records, at, from, to)
			})
			if err != nil {
				return err
			}
			dest := "their routed topics"
			if topic != "" {
				dest = topic
			}
			cmd.Printf("republished %d records from %d segments, positions %d..%d, to %s in %s\n",
				rep.Records, rep.Segments, from, to, dest, time.Since(start).Round(time.Millisecond))
			return nil
		},
	}
	c.Flags().Int64Var(&from, "from-position", 0, "first position to publish (required)")
	c.Flags().Int64Var(&to, "to-position", 0, "last position to publish (required)")
	c.Flags().StringVar(&topic, "topic", "", "publish every record to this topic instead of its routed topic")
	shardFlag(c, &shard, "the shard whose positions these are (required for a store of more than one shard)")
	_ = c.MarkFlagRequired("from-position")
	_ = c.MarkFlagRequired("to-position")
	return c
}

// newRelayParkedCmd is `sluice relay parked`: the records the relay parked
// because Kafka refused them for a reason of their own (docs/relay.md,
// "Parked records"). The logic is package relay's (ParkedStore,
// RepublishParked, DropParked), so an admin API can call it too.
func newRelayParkedCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "parked",
		Short: "List, show, republish or drop records the relay parked (Kafka refused them)",
		Long: `A record Kafka refuses for a reason of its own (too large for the broker or
its topic, a topic the broker will not create, a '.'/'_' collision) is retried
EVENT_PUBLISHER_PARK_AFTER_ATTEMPTS times and then parked in
sluice.relay_parked; the relay moves on. These commands handle the parked
rows of the relay named EVENT_PUBLISHER_NAME.`,
	}
	c.AddCommand(newRelayParkedListCmd(), newRelayParkedShowCmd(), newRelayParkedResolveCmd("republish"), newRelayParkedResolveCmd("drop"))
	return c
}

func newRelayParkedListCmd() *cobra.Command {
	var f relay.ParkedFilter
	var shard int
	c := &cobra.Command{
		Use:     "list",
		Short:   "List parked records with their reason (default: state parked)",
		Example: `  sluice relay parked list [--reason too_large] [--topic T] [--state parked|republished|dropped|all] [--from-position N --to-position M] [--limit 100]`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case f.State != "all" && f.State != relay.ParkedStateParked && f.State != relay.ParkedStateRepublished && f.State != relay.ParkedStateDropped:
				return usage("--state %q: want parked, republished, dropped or all", f.State)
			case f.Limit < 1:
				return usage("--limit %d: want at least 1", f.Limit) // it was read as 100
			case f.FromPosition < 0 || f.ToPosition < 0:
				return usage("--from-position %d --to-position %d: want positions >= 0 (0: open)", f.FromPosition, f.ToPosition)
			}
			if f.State == "all" {
				f.State = ""
			}
			d, closeFn, err := openParkedDeps(cmd)
			if err != nil {
				return err
			}
			defer closeFn()
			f.Relay = d.cfg.Relay.Name
			if shard >= 0 {
				f.Shard = &shard
			}
			rows, err := relay.NewParkedStore(d.pool).List(cmd.Context(), f)
			if err != nil {
				return err
			}
			// A SHARD column once any row is of a shard other than 0 (a
			// store of more than one shard) or one was asked for.
			sharded := shard > 0
			for _, p := range rows {
				sharded = sharded || p.Shard > 0
			}
			col := ""
			if sharded {
				col = "SHARD\t"
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, col+"POSITION\tEVENT_ID\tTOPIC\tREASON\tATTEMPTS\tBYTES\tSTATE\tPARKED_AT\tERROR")
			for _, p := range rows {
				if sharded {
					fmt.Fprintf(tw, "%d\t", p.Shard)
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", p.Position, p.EventID, p.Topic, p.Reason, p.Attempts,
					p.EnvelopeBytes, p.State, p.ParkedAt.UTC().Format(time.RFC3339), oneLine(p.Error, 120))
			}
			_ = tw.Flush()
			cmd.Printf("%d records (relay %s)\n", len(rows), f.Relay)
			return nil
		},
	}
	c.Flags().StringVar(&f.State, "state", relay.ParkedStateParked, "parked, republished, dropped or all")
	c.Flags().StringVar(&f.Reason, "reason", "", "only this reason: too_large, invalid_topic, topic_collision, rejected")
	c.Flags().StringVar(&f.Topic, "topic", "", "only records of this topic")
	c.Flags().Int64Var(&f.FromPosition, "from-position", 0, "first position")
	c.Flags().Int64Var(&f.ToPosition, "to-position", 0, "last position (0 = no bound)")
	c.Flags().IntVar(&f.Limit, "limit", 100, "most records listed")
	shardFlag(c, &shard, "only this shard's records (default: every shard's)")
	return c
}

func newRelayParkedShowCmd() *cobra.Command {
	var position int64
	var shard int
	var raw bool
	c := &cobra.Command{
		Use:     "show",
		Short:   "Print one parked record: its row, headers and the envelope",
		Example: `  sluice relay parked show --position 1234 [--raw]`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if position < 1 {
				return usage("--position %d: want a position >= 1", position)
			}
			d, closeFn, err := openParkedDeps(cmd)
			if err != nil {
				return err
			}
			defer closeFn()
			p, err := relay.NewParkedStore(d.pool).GetShard(cmd.Context(), d.cfg.Relay.Name, shard, position)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if raw {
				_, err := out.Write(p.Envelope)
				return err
			}
			fmt.Fprintf(out, "relay           %s\nposition        %d\nevent_id        %s\ntopic           %s\nkey             %s\nreason          %s\nerror           %s\nattempts        %d\nparked_at       %s\nstate           %s\nsegment         %s\nenvelope_bytes  %d\nheaders         %s\n",
				p.Relay, p.Position, p.EventID, p.Topic, p.Key, p.Reason, p.Error, p.Attempts, p.ParkedAt.UTC().Format(time.RFC3339Nano),
				p.State, p.SegmentKey, p.EnvelopeBytes, p.HeadersString())
			if p.Shard > 0 {
				fmt.Fprintf(out, "shard           %d\n", p.Shard)
			}
			if !p.ResolvedAt.IsZero() {
				fmt.Fprintf(out, "resolved_at     %s\nresolved_topic  %s\n", p.ResolvedAt.UTC().Format(time.RFC3339Nano), p.ResolvedTopic)
			}
			fmt.Fprintf(out, "envelope        %s\n", oneLine(string(p.Envelope), 4096))
			return nil
		},
	}
	c.Flags().Int64Var(&position, "position", 0, "position of the parked record (required)")
	c.Flags().BoolVar(&raw, "raw", false, "print only the envelope bytes, as stored")
	c.Flags().IntVar(&shard, "shard", 0, "the shard of the position (a store of more than one shard)")
	_ = c.MarkFlagRequired("position")
	return c
}

// newRelayParkedResolveCmd is `parked republish` or `parked drop`.
func newRelayParkedResolveCmd(verb string) *cobra.Command {
	var position int64
	var shard int
	var topic string
	var dryRun, yes bool
	short, example := "Mark a parked record dropped: it will not be published (the row and its envelope stay)",
		`  sluice relay parked drop --position 1234 --dry-run
  sluice relay parked drop --position 1234 --yes`
	if verb == "republish" {
		short, example = "Produce a parked record again, byte for byte, and mark it republished (refused, with Kafka's error, if it still cannot be produced)",
			`  sluice relay parked republish --position 1234 --dry-run
  sluice relay parked republish --position 1234 --yes [--topic sluice.large]`
	}
	c := &cobra.Command{
		Use:     verb,
		Short:   short,
		Example: example,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if position < 1 {
				return usage("--position %d: want a position >= 1", position)
			}
			if !dryRun && !yes {
				return &exitError{code: exitNeedsConfirmation, err: fmt.Errorf("%s changes the parked record: pass --yes to act, or --dry-run to see what it would do (nothing changed)", verb)}
			}
			d, closeFn, err := openParkedDeps(cmd)
			if err != nil {
				return err
			}
			defer closeFn()
			ctx := cmd.Context()
			ps := relay.NewParkedStore(d.pool)
			name := d.cfg.Relay.Name
			opts := relay.ResolveOptions{Topic: topic, DryRun: dryRun, Shard: shard}
			var p relay.ParkedRecord
			if verb == "drop" {
				p, err = relay.DropParked(ctx, ps, name, position, opts)
			} else {
				opts.Spec = kafka.TopicSpec(d.cfg.Kafka)
				cl, kerr := kafka.NewClient(d.cfg.Kafka, kafka.MaxBuffered(1))
				if kerr != nil {
					return kerr
				}
				defer cl.Close()
				p, err = relay.RepublishParked(ctx, ps, cl, name, position, opts)
			}
			if err != nil {
				return err
			}
			dest := p.Topic
			if topic != "" {
				dest = topic
			}
			switch {
			case dryRun && verb == "drop":
				cmd.Printf("dry run: would drop parked position %d (event %s, topic %s, reason %s); nothing changed\n", p.Position, p.EventID, p.Topic, p.Reason)
			case dryRun:
				cmd.Printf("dry run: would republish parked position %d (event %s, %d bytes, reason %s) to %s; nothing produced\n", p.Position, p.EventID, p.EnvelopeBytes, p.Reason, dest)
			case verb == "drop":
				cmd.Printf("dropped parked position %d (event %s, topic %s)\n", p.Position, p.EventID, p.Topic)
			default:
				cmd.Printf("republished parked position %d (event %s, %d bytes) to %s\n", p.Position, p.EventID, p.EnvelopeBytes, dest)
			}
			return nil
		},
	}
	c.Flags().Int64Var(&position, "position", 0, "position of the parked record (required)")
	c.Flags().BoolVar(&dryRun, "dry-run", false, "check and print what would be done; change nothing")
	c.Flags().BoolVar(&yes, "yes", false, "act (required unless --dry-run)")
	c.Flags().IntVar(&shard, "shard", 0, "the shard of the position (a store of more than one shard)")
	if verb == "republish" {
		c.Flags().StringVar(&topic, "topic", "", "produce to this topic instead of the record's own (created with the size budget when missing)")
	}
	_ = c.MarkFlagRequired("position")
	return c
}

// parkedDeps are what `sluice relay parked` needs: the configuration and
// the Postgres pool of the store role (not the object store: parked rows hold their
// envelopes, so the commands work while object storage is out).
type parkedDeps struct {
	cfg  *sluiceconfig.Config
	pool *pgxpool.Pool
}

func openParkedDeps(cmd *cobra.Command) (*parkedDeps, func(), error) {
	cfg, _, pool, err := loadConfigPool(cmd, migrations.RoleStore)
	if err != nil {
		return nil, nil, err
	}
	return &parkedDeps{cfg: cfg, pool: pool}, pool.Close, nil
}
