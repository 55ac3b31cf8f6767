package main

import (
	"errors"
	"fmt"
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
stand by. Configuration: EVENT_PUBLISHER_*, KAFKA_*, EVENT_STORE_*, DATABASE_URL.`,
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
	return &cobra.Command{
		Use:   "show",
		Short: "Show the checkpoint, the lease and the lag",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, closeFn, err := openReadStoreDeps(cmd)
			if err != nil {
				return err
			}
			defer closeFn()
			if err := oneShard(cmd, d.store); err != nil {
				return err
			}
			ctx := cmd.Context()
			cps := relay.NewCheckpointStore(d.bucket, d.cfg.Relay.CheckpointKey)
			cp, _, found, err := cps.Load(ctx)
			if err != nil {
				return err
			}
			head, err := d.store.Head(ctx)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if !found {
				fmt.Fprintf(out, "no checkpoint at %s yet (a relay starts at the beginning unless EVENT_PUBLISHER_START_* says otherwise); head %d\n", cps.Key(), head)
				return nil
			}
			fmt.Fprintf(out, "checkpoint      %s\nposition        %d\nhead            %d\nlag             %d\nupdated_at      %s\nrelay_epoch     %d\nwritten_by      %s\npending_gaps    %d\nrecent_ids      %d\n",
				cps.Key(), cp.Position, head, max(head-cp.Position, 0), cp.UpdatedAt.Format(time.RFC3339Nano), cp.RelayEpoch, cp.Holder, len(cp.PendingGaps), len(cp.RecentEventIDs))
			info, ok, err := relay.NewLease(d.pool, d.cfg.Relay.Name, "", time.Second).Info(ctx)
			if err != nil {
				return err
			}
			if ok {
				state := "held"
				if info.Expired {
					state = "expired"
				}
				fmt.Fprintf(out, "lease           %s by %s, epoch %d, until %s\n", state, info.Holder, info.Epoch, info.ExpiresAt.Format(time.RFC3339))
			}
			return nil
		},
	}
}

// newRelayCheckpointSetCmd is "sluice relay checkpoint set".
func newRelayCheckpointSetCmd() *cobra.Command {
	var position int64
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
				return errors.New("set exactly one of --position or --time")
			}
			d, closeFn, err := openStoreDeps(cmd)
			if err != nil {
				return err
			}
			defer closeFn()
			if err := oneShard(cmd, d.store); err != nil {
				return err
			}
			ctx := cmd.Context()
			if timeSet {
				t, err := time.Parse(time.RFC3339Nano, at)
				if err != nil {
					return fmt.Errorf("--time %q: want an RFC 3339 time: %w", at, err)
				}
				if position, err = d.store.PositionAt(ctx, t); err != nil {
					return err
				}
			}
			cps := relay.NewCheckpointStore(d.bucket, d.cfg.Relay.CheckpointKey)
			plan, err := relay.PlanCheckpoint(ctx, d.store, cps, position)
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
			verb := "forward"
			if cur.Position < old.Position {
				verb = "back (positions after it are published again)"
			}
			cmd.Printf("checkpoint %s moved %s: %d -> %d; a running relay continues from it\n", d.cfg.Relay.CheckpointKey, verb, old.Position, cur.Position)
			return nil
		},
	}
	set.Flags().Int64Var(&position, "position", 0, "new checkpoint position (the relay publishes from position+1)")
	set.Flags().StringVar(&at, "time", "", "RFC 3339 time: publish from the first event committed at or after it")
	g.register(set, false)
	return set
}

func newRelayGapsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "gaps",
		Short: "List pending gaps of the checkpoint and uncommitted ranges of the index",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, closeFn, err := openReadStoreDeps(cmd)
			if err != nil {
				return err
			}
			defer closeFn()
			if err := oneShard(cmd, d.store); err != nil {
				return err
			}
			ctx := cmd.Context()
			cp, _, _, err := relay.NewCheckpointStore(d.bucket, d.cfg.Relay.CheckpointKey).Load(ctx)
			if err != nil {
				return err
			}
			gaps, err := relay.Gaps(ctx, d.store, cp)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "FIRST\tLAST\tPOSITIONS\tSTATE\tSINCE\tAGGREGATES")
			counts := map[string]int64{}
			for _, g := range gaps {
				n := g.Last - g.First + 1
				counts[g.State] += n
				fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\t%s\n", g.First, g.Last, n, g.State, g.Since.UTC().Format(time.RFC3339), strings.Join(g.Aggregates, ","))
			}
			_ = tw.Flush()
			cmd.Printf("%d ranges: %d positions pending (re-checked within EVENT_PUBLISHER_LOOKBACK_SECONDS), %d abandoned in the index, %d reserved; checkpoint %d\n",
				len(gaps), counts["pending"], counts["abandoned"], counts["reserved"], cp.Position)
			return nil
		},
	}
}

func newRelayRepublishCmd() *cobra.Command {
	var from, to int64
	var topic string
	c := &cobra.Command{
		Use:     "republish",
		Short:   "Publish a range of the log to Kafka again (the checkpoint is not touched)",
		Example: `  sluice relay republish --from-position 1000 --to-position 2000 [--topic sluice.replay]`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if from < 1 || to < from {
				return fmt.Errorf("--from-position %d --to-position %d: want 1 <= from <= to", from, to)
			}
			d, closeFn, err := openStoreDeps(cmd)
			if err != nil {
				return err
			}
			defer closeFn()
			if err := oneShard(cmd, d.store); err != nil {
				return err
			}
			cl, err := kafka.NewClient(d.cfg.Kafka, kafka.MaxBuffered(2000))
			if err != nil {
				return err
			}
			defer cl.Close()
			router := relay.NewRouter(d.cfg.Kafka.CommandsTopic, d.cfg.Kafka.EventsTopic, nil).WithFormat(d.cfg.Kafka.Format())
			names := router.Topics()
			if topic != "" {
				names = []string{topic}
			}
			if err := kafka.EnsureTopics(cmd.Context(), cl, d.cfg.Kafka, names...); err != nil {
				return err
			}
			start := time.Now()
			errOut := cmd.ErrOrStderr()
			rep, err := relay.Republish(cmd.Context(), d.store, cl, router, from, to, topic, func(r relay.RepublishReport, at int64) {
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
	c := &cobra.Command{
		Use:     "list",
		Short:   "List parked records with their reason (default: state parked)",
		Example: `  sluice relay parked list [--reason too_large] [--topic T] [--state parked|republished|dropped|all] [--from-position N --to-position M] [--limit 100]`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.State == "all" {
				f.State = ""
			}
			d, closeFn, err := openParkedDeps(cmd)
			if err != nil {
				return err
			}
			defer closeFn()
			f.Relay = d.cfg.Relay.Name
			rows, err := relay.NewParkedStore(d.pool).List(cmd.Context(), f)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "POSITION\tEVENT_ID\tTOPIC\tREASON\tATTEMPTS\tBYTES\tSTATE\tPARKED_AT\tERROR")
			for _, p := range rows {
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
	return c
}

func newRelayParkedShowCmd() *cobra.Command {
	var position int64
	var raw bool
	c := &cobra.Command{
		Use:     "show",
		Short:   "Print one parked record: its row, headers and the envelope",
		Example: `  sluice relay parked show --position 1234 [--raw]`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, closeFn, err := openParkedDeps(cmd)
			if err != nil {
				return err
			}
			defer closeFn()
			p, err := relay.NewParkedStore(d.pool).Get(cmd.Context(), d.cfg.Relay.Name, position)
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
			if !p.ResolvedAt.IsZero() {
				fmt.Fprintf(out, "resolved_at     %s\nresolved_topic  %s\n", p.ResolvedAt.UTC().Format(time.RFC3339Nano), p.ResolvedTopic)
			}
			fmt.Fprintf(out, "envelope        %s\n", oneLine(string(p.Envelope), 4096))
			return nil
		},
	}
	c.Flags().Int64Var(&position, "position", 0, "position of the parked record (required)")
	c.Flags().BoolVar(&raw, "raw", false, "print only the envelope bytes, as stored")
	_ = c.MarkFlagRequired("position")
	return c
}

// newRelayParkedResolveCmd is `parked republish` or `parked drop`.
func newRelayParkedResolveCmd(verb string) *cobra.Command {
	var position int64
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
			if !dryRun && !yes {
				return fmt.Errorf("%s changes the parked record: pass --yes to act, or --dry-run to see what it would do", verb)
			}
			d, closeFn, err := openParkedDeps(cmd)
			if err != nil {
				return err
			}
			defer closeFn()
			ctx := cmd.Context()
			ps := relay.NewParkedStore(d.pool)
			name := d.cfg.Relay.Name
			opts := relay.ResolveOptions{Topic: topic, DryRun: dryRun}
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
