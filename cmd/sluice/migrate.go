package main

import (
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/migrations"
)

func newMigrateCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "migrate",
		Short: "Apply or inspect the embedded Postgres migrations (idempotent, locked)",
	}
	c.AddCommand(&cobra.Command{
		Use:   "up",
		Short: "Apply every pending migration; safe to run concurrently and repeatedly",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, logger, err := openMigrationsDB(cmd)
			if err != nil {
				return err
			}
			defer db.Close()
			res, err := migrations.Up(cmd.Context(), db, logger)
			if err != nil {
				return err
			}
			for _, r := range res {
				cmd.Printf("applied %05d %s (%s)\n", r.Version, r.Name, r.Duration)
			}
			cmd.Printf("migrate up: %d applied, schema is current\n", len(res))
			return nil
		},
	}, &cobra.Command{
		Use:   "status",
		Short: "List the embedded migrations and whether each is applied",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, _, err := openMigrationsDB(cmd)
			if err != nil {
				return err
			}
			defer db.Close()
			st, err := migrations.StatusOf(cmd.Context(), db)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "VERSION\tNAME\tSTATE\tAPPLIED AT")
			pending := 0
			for _, s := range st {
				state, at := "applied", s.AppliedAt
				if !s.Applied {
					state, at = "pending", "-"
					pending++
				}
				fmt.Fprintf(tw, "%05d\t%s\t%s\t%s\n", s.Version, s.Name, state, at)
			}
			_ = tw.Flush()
			cmd.Printf("%d migrations, %d pending\n", len(st), pending)
			return nil
		},
	})
	return c
}

// openMigrationsDB opens DATABASE_URL through database/sql for goose.
func openMigrationsDB(cmd *cobra.Command) (*sql.DB, *slog.Logger, error) {
	cfg, logger, err := loadConfig(cmd)
	if err != nil {
		return nil, nil, err
	}
	if cfg.Postgres.URL == "" {
		return nil, nil, errors.New("DATABASE_URL is not set")
	}
	db, err := migrations.Open(cfg.Postgres.URL.Value())
	if err != nil {
		return nil, nil, err
	}
	return db, logger, nil
}
