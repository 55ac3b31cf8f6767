package main

import (
	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/shared/config"
)

func newConfigCmd() *cobra.Command {
	c := &cobra.Command{Use: "config", Short: "Inspect sluice's configuration"}
	c.AddCommand(&cobra.Command{
		Use:   "docs",
		Short: "Print the configuration reference (docs/configuration.md) generated from the code",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.Print(config.Markdown())
			return nil
		},
	}, &cobra.Command{
		Use:   "check",
		Short: "Validate the configuration in the environment; exit non-zero naming every bad variable",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := config.FromOS(); err != nil {
				return err
			}
			cmd.Println("configuration OK")
			return nil
		},
	})
	return c
}
