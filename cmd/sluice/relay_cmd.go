package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore/minioext"
	"github.com/sluicehq/sluice/relay"
	"github.com/sluicehq/sluice/shared/crashpoint"
	"github.com/sluicehq/sluice/shared/observability"
	"github.com/sluicehq/sluice/shared/topics"
)

func newRelayCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "relay",
		Short: "Run the relay: publish the event store into Kafka (SPEC §6)",
		Long: `sluice relay tails the event store's segment log and publishes every event to
Kafka in position order, checkpointing its progress in checkpoints/{name}.json.
Several replicas may run: one holds the leader lease and publishes, the others
stand by. Configuration: EVENT_PUBLISHER_*, KAFKA_*, EVENT_STORE_*, DATABASE_URL.`,
		Args: cobra.NoArgs,
		RunE: runRelayService,
	}
	c.AddCommand(newRelayCheckpointCmd(), newRelayGapsCmd(), newRelayRepublishCmd())
	return c
}

func runRelayService(cmd *cobra.Command, _ []string) error {
	d, closeFn, err := openServiceDeps(cmd)
	if err != nil {
		return err
	}
	defer closeFn()
	ctx := cmd.Context()
	crasher, err := crashpoint.New(d.cfg.Testing.CrashPoint, d.cfg.Testing.CrashMarkerDir)
	if err != nil {
		return err
	}
	reg := observability.NewRegistry()
	health := observability.NewHealth()
	health.AddReadiness("postgres", func(ctx context.Context) error { return d.pool.Ping(ctx) })
	opts := relay.OptionsFromConfig(d.cfg)
	opts.Logger, opts.Registerer, opts.Health, opts.Crasher = d.logger, reg, health, crasher
	if es := d.cfg.EventStore; es.Backend == "s3" && es.S3Endpoint != "" {
		// MinIO bucket notifications as an extra wake-up (hints only).
		if mc, err := minioext.New(minioext.Options{Endpoint: es.S3Endpoint, Region: es.S3Region,
			AccessKeyID: es.S3AccessKeyID, SecretAccessKey: es.S3SecretAccessKey.Value()}); err == nil {
			if ch, err := mc.ListenSegments(ctx, es.Bucket, eventstore.SegmentPrefix); err == nil {
				opts.Wake = ch
			} else {
				d.logger.Info("relay: no bucket notifications; relying on LISTEN and polling", "err", err)
			}
		}
	}
	r, err := relay.New(d.store, d.bucket, d.pool, opts)
	if err != nil {
		return err
	}
	defer r.Close()
	errc := make(chan error, 1)
	if d.cfg.HTTP.Addr != "" {
		srv, err := observability.Listen(d.cfg.HTTP.Addr, observability.Handler(reg, health))
		if err != nil {
			return err
		}
		d.logger.Info("relay: observability server", "addr", srv.Addr())
		go func() { errc <- srv.Serve(ctx) }()
	}
	err = r.Run(ctx)
	if d.cfg.HTTP.Addr != "" {
		if serr := <-errc; serr != nil && err == nil {
			err = serr
		}
	}
	return err
}

func newRelayCheckpointCmd() *cobra.Command {
	c := &cobra.Command{Use: "checkpoint", Short: "Inspect or move the relay checkpoint"}
	c.AddCommand(&cobra.Command{
		Use:   "show",
		Short: "Show the checkpoint, the lease and the lag",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, closeFn, err := openStoreDeps(cmd)
			if err != nil {
				return err
			}
			defer closeFn()
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
	})
	var position int64
	var at string
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
			ctx := cmd.Context()
			if timeSet {
				t, err := time.Parse(time.RFC3339Nano, at)
				if err != nil {
					return fmt.Errorf("--time %q: want an RFC 3339 time: %w", at, err)
				}
				if position, err = relay.PositionAt(ctx, d.pool, t); err != nil {
					return err
				}
			}
			old, cur, err := relay.SetCheckpoint(ctx, relay.NewCheckpointStore(d.bucket, d.cfg.Relay.CheckpointKey), position)
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
	c.AddCommand(set)
	return c
}

func newRelayGapsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "gaps",
		Short: "List pending gaps of the checkpoint and uncommitted ranges of the index",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, closeFn, err := openStoreDeps(cmd)
			if err != nil {
				return err
			}
			defer closeFn()
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
			kopts, err := relay.KafkaOpts(d.cfg.Kafka)
			if err != nil {
				return err
			}
			cl, err := kgo.NewClient(append(kopts, relay.ProducerOpts(2000)...)...)
			if err != nil {
				return err
			}
			defer cl.Close()
			router := relay.NewRouter(d.cfg.Kafka.CommandsTopic, d.cfg.Kafka.EventsTopic, nil)
			names := router.Topics()
			if topic != "" {
				names = []string{topic}
			}
			if err := topics.Ensure(cmd.Context(), cl, d.cfg.Kafka.TopicPartitions, d.cfg.Kafka.ReplicationFactor, names...); err != nil {
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
