package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/migrations"
	"github.com/sluicehq/sluice/pipeline/sluiceconfig"
	"github.com/sluicehq/sluice/registry"
)

// openPools connects to the databases of roles (docs/scale-out.md): one
// pool per distinct URL, each checked for refused credentials; the caller
// closes them.
func openPools(cmd *cobra.Command, cfg *sluiceconfig.Config, roles ...migrations.Role) (*migrations.Pools, error) {
	return migrations.OpenPools(cmd.Context(), cfg.Postgres, func(ctx context.Context, db migrations.Database) (*pgxpool.Pool, error) {
		pc, err := pgxpool.ParseConfig(db.URL)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", db.Vars(), err) // pgx redacts the password
		}
		pc.MaxConns = int32(cfg.Postgres.MaxConns)
		pool, err := pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", db.Vars(), err)
		}
		if err := checkPostgresCredentials(ctx, pool, db.Vars()); err != nil {
			pool.Close()
			return nil, err
		}
		return pool, nil
	}, roles...)
}

// openPool connects to the database of role; the caller closes the pool.
func openPool(cmd *cobra.Command, cfg *sluiceconfig.Config, role migrations.Role) (*pgxpool.Pool, error) {
	ps, err := openPools(cmd, cfg, role)
	if err != nil {
		return nil, err
	}
	for _, p := range ps.StoreShards {
		if p != ps.Of(role) {
			p.Close() // a server of the shard map only: the caller keeps the role's own pool
		}
	}
	return ps.Of(role), nil
}

// loadConfigPool loads the configuration and opens the pool of role
// (openPool); the caller closes the pool.
func loadConfigPool(cmd *cobra.Command, role migrations.Role) (*sluiceconfig.Config, *slog.Logger, *pgxpool.Pool, error) {
	cfg, logger, err := loadConfig(cmd)
	if err != nil {
		return nil, nil, nil, err
	}
	pool, err := openPool(cmd, cfg, role)
	if err != nil {
		return nil, nil, nil, err
	}
	return cfg, logger, pool, nil
}

// openRegistry opens the processed-event registry on
// REGISTRY_DATABASE_URL's database.
func openRegistry(cmd *cobra.Command) (*registry.Registry, func(), error) {
	cfg, _, pool, err := loadConfigPool(cmd, migrations.RoleRegistry)
	if err != nil {
		return nil, nil, err
	}
	reg, err := registry.New(cfg.Registry.WithRetry(cfg.Worker.InstanceRetry()), registry.Deps{Pool: pool})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return reg, pool.Close, nil
}

func newRegistryCmd() *cobra.Command {
	c := &cobra.Command{Use: "registry", Short: "Inspect and prune the processed-event registry"}
	c.AddCommand(newRegistryShowCmd(), newRegistryPruneCmd())
	return c
}

// newRegistryShowCmd is "sluice registry show".
func newRegistryShowCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "show <event_id>",
		Short: "Show every handler's registry row for one event",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			reg, closeFn, err := openRegistry(cmd)
			if err != nil {
				return err
			}
			defer closeFn()
			rows, err := reg.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if len(rows) == 0 {
				return &exitError{code: exitNotFound, err: errors.New("no registry row for event " + args[0])}
			}
			return registry.FormatRows(cmd.OutOrStdout(), rows)
		},
	}
}

// newRegistryPruneCmd is "sluice registry prune".
func newRegistryPruneCmd() *cobra.Command {
	var olderThan time.Duration
	var g guardFlags
	var asJSON bool
	prune := &cobra.Command{
		Use:   "prune",
		Short: "Delete done and skipped_stale rows older than the retention (PROCESSED_EVENT_RETENTION_DAYS); never the command statuses",
		Long: `prune deletes done and skipped_stale rows older than the retention, in batches. It never
deletes the instance worker's rows: they are the command statuses GET /v1/commands/{id}
reads, and without them an applied command would read as PENDING. --older-than below the
lease timeout (PROCESSED_EVENT_LEASE_TIMEOUT_SECONDS) or the relay lookback
(EVENT_PUBLISHER_LOOKBACK_SECONDS) is refused: such rows still absorb redeliveries.
--dry-run prints the rows it would delete per handler; acting needs --yes (or a "yes" on a terminal).`,
		Example: `  sluice registry prune --older-than 72h --dry-run
  sluice registry prune --older-than 72h --yes`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if olderThan < 0 {
				return usage("--older-than %s: want a duration >= 0 (0: the configured retention)", olderThan)
			}
			cfg, _, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			reg, closeFn, err := openRegistry(cmd)
			if err != nil {
				return err
			}
			defer closeFn()
			age := olderThan
			if age == 0 {
				age = cfg.Registry.Retention()
			}
			req := registry.PruneRequest{OlderThan: age, Lookback: cfg.Relay.Lookback, Keep: []string{instanceworker.HandlerName}}
			plan, err := reg.PlanPrune(cmd.Context(), req)
			if errors.Is(err, registry.ErrUnsafePrune) {
				return unsafe(err)
			}
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if !asJSON {
				tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "HANDLER\tSTATUS\tROWS\tACTION")
				for _, c := range plan.Counts {
					action := "delete"
					if c.Kept {
						action = "keep (command statuses)"
					}
					fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", c.Handler, c.Status, c.Rows, action)
				}
				_ = tw.Flush()
			}
			act, err := g.confirm(cmd, fmt.Sprintf("delete %d registry rows older than %s", plan.Delete, age))
			if err != nil || !act {
				if err == nil {
					if asJSON {
						return writeSummary(out, pruneSummary{DryRun: true, Plan: plan})
					}
					cmd.Printf("registry prune (dry run): %d rows older than %s would be deleted, %d kept; nothing changed\n", plan.Delete, age, plan.KeptRows)
				}
				return err
			}
			n, err := reg.PruneSafely(cmd.Context(), req)
			if err != nil {
				return pruneError(err, n)
			}
			if asJSON {
				return writeSummary(out, pruneSummary{Plan: plan, Deleted: n})
			}
			cmd.Printf("registry prune: %d rows older than %s deleted, %d command-status rows kept\n", n, age, plan.KeptRows)
			return nil
		},
	}
	prune.Flags().DurationVar(&olderThan, "older-than", 0, "override the retention (e.g. 72h; at least the lease timeout and the relay lookback)")
	prune.Flags().BoolVar(&asJSON, "json", false, "print a JSON summary")
	g.register(prune, false)
	return prune
}

// pruneError is the error of a prune that stopped: it deletes in batches,
// each its own transaction, so the rows of the batches before stay
// deleted. Interrupted it said only "context canceled", not how far it got.
func pruneError(err error, deleted int64) error {
	if !errors.Is(err, context.Canceled) {
		return err
	}
	return fmt.Errorf("%w: prune interrupted after deleting %d rows (batch by batch; nothing else changed); run it again to finish", err, deleted)
}

// pruneSummary is the --json output of `sluice registry prune`.
type pruneSummary struct {
	DryRun  bool               `json:"dry_run"`
	Plan    registry.PrunePlan `json:"plan"`
	Deleted int64              `json:"deleted"`
}
