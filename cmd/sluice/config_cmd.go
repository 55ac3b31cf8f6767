package main

import (
	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/pipeline/sluiceconfig"
)

func newConfigCmd() *cobra.Command {
	c := &cobra.Command{Use: "config", Short: "Inspect sluice's configuration"}
	c.AddCommand(&cobra.Command{
		Use:   "docs",
		Short: "Print the configuration reference (docs/configuration.md) generated from the code",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.Print(sluiceconfig.Markdown())
			return nil
		},
	}, &cobra.Command{
		Use:   "check",
		Short: "Validate the configuration in the environment; exit non-zero naming every bad variable",
		Long: `sluice config check validates the environment as a deployed service reads
it: every value parsed and checked, DATABASE_URL set and a valid Postgres
connection string, *_FILE credentials readable, and no variable that looks
like a typo of one sluice reads (EVENT_STORE_BAKEND, KAFKA_BROKER): each is
named with the variable that was probably meant. Exit status 1 on any problem.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := sluiceconfig.CheckOS(); err != nil {
				return err
			}
			cmd.Println("configuration OK")
			return nil
		},
	}, &cobra.Command{
		Use:   "show",
		Short: "Print every variable with the value this environment gives it (credentials redacted)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := sluiceconfig.FromOS()
			if err != nil {
				return err
			}
			for _, s := range cfg.Settings() {
				cmd.Printf("%s=%s\n", s.Key, s.Value)
			}
			return nil
		},
	})
	return c
}
