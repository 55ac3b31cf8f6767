package main

import (
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/shared/config"
)

// openPool connects to DATABASE_URL; the caller closes the pool.
func openPool(cmd *cobra.Command, cfg *config.Config) (*pgxpool.Pool, error) {
	if cfg.Postgres.URL == "" {
		return nil, errors.New("DATABASE_URL is not set")
	}
	pc, err := pgxpool.ParseConfig(cfg.Postgres.URL.Value())
	if err != nil {
		return nil, err // pgx redacts the password
	}
	pc.MaxConns = int32(cfg.Postgres.MaxConns)
	return pgxpool.NewWithConfig(cmd.Context(), pc)
}

func openRegistry(cmd *cobra.Command) (*registry.Registry, func(), error) {
	cfg, _, err := loadConfig(cmd)
	if err != nil {
		return nil, nil, err
	}
	pool, err := openPool(cmd, cfg)
	if err != nil {
		return nil, nil, err
	}
	reg, err := registry.New(pool, registry.OptionsFromConfig(cfg.Registry, cfg.Worker, cfg.Worker.InstanceMaxRetryAttempts))
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return reg, pool.Close, nil
}

func newRegistryCmd() *cobra.Command {
	c := &cobra.Command{Use: "registry", Short: "Inspect and prune the processed-event registry"}
	c.AddCommand(&cobra.Command{
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
				return &exitError{code: 3, err: errors.New("no registry row for event " + args[0])}
			}
			return registry.FormatRows(cmd.OutOrStdout(), rows)
		},
	})
	var olderThan time.Duration
	prune := &cobra.Command{
		Use:   "prune",
		Short: "Delete done and skipped_stale rows older than the retention (PROCESSED_EVENT_RETENTION_DAYS)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
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
				age = time.Duration(cfg.Registry.RetentionDays) * 24 * time.Hour
			}
			n, err := reg.Prune(cmd.Context(), age)
			if err != nil {
				return err
			}
			cmd.Printf("registry prune: %d rows older than %s deleted\n", n, age)
			return nil
		},
	}
	prune.Flags().DurationVar(&olderThan, "older-than", 0, "override the retention (e.g. 72h)")
	c.AddCommand(prune)
	return c
}
