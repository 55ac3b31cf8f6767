package main

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/migrations"
	"github.com/sluicehq/sluice/pipeline/sluiceconfig"
)

func newMigrateCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "migrate",
		Short: "Apply or inspect the embedded Postgres migrations (idempotent, locked)",
		Long: `migrate applies or lists the embedded migrations on every Postgres database of the
configuration: DATABASE_URL's, and EVENT_STORE_DATABASE_URL's and REGISTRY_DATABASE_URL's
when they name other databases (docs/scale-out.md). Each database gets the whole schema and
keeps its own version table (docs/migrations.md); with DATABASE_URL alone there is one.`,
	}
	c.AddCommand(&cobra.Command{
		Use:   "up",
		Short: "Apply every pending migration to every database; safe to run concurrently and repeatedly",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, logger, err := loadMigrationsConfig(cmd)
			if err != nil {
				return err
			}
			res, err := migrations.UpDatabases(cmd.Context(), cfg.Postgres, logger)
			for _, db := range res {
				for _, r := range db.Applied {
					cmd.Printf("applied %05d %s (%s)%s\n", r.Version, r.Name, r.Duration, databaseSuffix(cfg, db.Database))
				}
			}
			if err != nil {
				return err
			}
			for _, db := range res {
				cmd.Printf("migrate up: %d applied, schema is current%s\n", len(db.Applied), databaseSuffix(cfg, db.Database))
			}
			return nil
		},
	}, &cobra.Command{
		Use:   "status",
		Short: "List the embedded migrations and whether each is applied, per database",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, _, err := loadMigrationsConfig(cmd)
			if err != nil {
				return err
			}
			for _, d := range cfg.Postgres.Databases() {
				if err := printStatus(cmd, cfg, d); err != nil {
					return err
				}
			}
			return nil
		},
	})
	return c
}

// printStatus prints the migrations of one database.
func printStatus(cmd *cobra.Command, cfg *sluiceconfig.Config, d migrations.Database) error {
	db, err := migrations.Open(d.URL)
	if err != nil {
		return err
	}
	defer db.Close()
	st, err := migrations.StatusOf(cmd.Context(), db)
	if err != nil {
		return fmt.Errorf("postgres of %s: %w", d.Vars(), err)
	}
	if sfx := databaseSuffix(cfg, d); sfx != "" {
		cmd.Printf("database of%s:\n", strings.TrimPrefix(sfx, " on"))
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
}

// databaseSuffix names the database by its variables (" on
// EVENT_STORE_DATABASE_URL (store)"), never its URL; "" when the
// configuration has one database, so its output is what it always was.
func databaseSuffix(cfg *sluiceconfig.Config, d migrations.Database) string {
	if len(cfg.Postgres.Databases()) < 2 {
		return ""
	}
	roles := make([]string, len(d.Roles))
	for i, r := range d.Roles {
		roles[i] = string(r)
	}
	return " on " + d.Vars() + " (" + strings.Join(roles, ", ") + ")"
}

// loadMigrationsConfig loads the configuration; DATABASE_URL must be set.
func loadMigrationsConfig(cmd *cobra.Command) (*sluiceconfig.Config, *slog.Logger, error) {
	cfg, logger, err := loadConfig(cmd)
	if err != nil {
		return nil, nil, err
	}
	if cfg.Postgres.URL == "" {
		return nil, nil, errors.New("DATABASE_URL is not set")
	}
	return cfg, logger, nil
}
