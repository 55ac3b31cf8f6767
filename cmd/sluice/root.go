package main

import (
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/pipeline/sluiceconfig"
	"github.com/sluicehq/sluice/shared/observability"
)

// Build information, set with -ldflags "-X main.version=…".
var (
	version = "dev"
	commit  = "unknown"
)

// newRegistry returns the Prometheus registry of a sluice process, with
// sluice_build_info{version, commit, go_version} = 1 from this binary's
// build information.
func newRegistry() *prometheus.Registry {
	return observability.NewProcessRegistry(version, commit)
}

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "sluice",
		Short:         "sluice — an event-sourcing pipeline: S3 event store → Kafka → workers → Elasticsearch",
		SilenceUsage:  true,
		SilenceErrors: true,
		// --version (and -v) as well as `sluice version`: the flag is what
		// operators and packaging scripts try first (it was exit 2).
		Version: version,
	}
	root.SetVersionTemplate(versionLine())
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(
		newVersionCmd(),
		newMigrateCmd(),
		newConfigCmd(),
		newDevCmd(),
		newRegistryCmd(),
		newStoreCmd(),
		newHealthcheckCmd(),
		newAPICmd(),
		newInstanceWorkerCmd(),
		newRelayCmd(),
		newConsumerCmd(),
		newDLQCmd(),
		newVerifyCmd(),
		newProjectionWorkerCmd(),
		newProjectionCmd(),
		newSchemaCmd(),
		newAuthCmd(),
	)
	usageExits(root)
	return root
}

// usageExits makes every usage error of the command tree exit 2
// (exitUsage, docs/operator-commands.md): a flag cobra cannot parse (an
// unknown flag, a value of the wrong type), arguments a command's Args
// refuses, a required flag left out or a flag group broken, and an
// unknown subcommand — also under a group command such as
// "sluice consumer", which cobra would answer with its help and exit 0.
// It covers cobra's own help and completion commands too.
func usageExits(root *cobra.Command) {
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &exitError{code: exitUsage, err: err}
	})
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		switch {
		case !c.Runnable() && c.HasSubCommands():
			// A group (cobra checks no Args of a command without a
			// Run): no argument but a subcommand's name, which cobra
			// has already taken when it gets here.
			c.SuggestionsMinimumDistance = 2
			c.Args = func(cmd *cobra.Command, a []string) error {
				if len(a) == 0 {
					return nil
				}
				msg := fmt.Sprintf("unknown command %q for %q", a[0], cmd.CommandPath())
				if s := cmd.SuggestionsFor(a[0]); len(s) > 0 {
					msg += fmt.Sprintf("; did you mean %q?", s[0])
				}
				return usage("%s", msg)
			}
			c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
			if c.Annotations == nil {
				c.Annotations = map[string]string{}
			}
			c.Annotations[groupAnnotation] = "true"
		case c.Runnable():
			// cobra checks Args, then required flags and flag groups,
			// each returning a plain error (exit 1): all three here.
			args := c.Args
			if args == nil {
				args = cobra.ArbitraryArgs // what cobra does for a subcommand without Args
			} else {
				// cobra says "accepts 1 arg(s), received 0" and not which:
				// the usage line names them ("show <event_id>").
				own := args
				args = func(cmd *cobra.Command, a []string) error {
					if err := own(cmd, a); err != nil {
						return fmt.Errorf("%w; usage: %s", err, cmd.UseLine())
					}
					return nil
				}
			}
			c.Args = func(cmd *cobra.Command, a []string) error {
				for _, err := range []error{args(cmd, a), cmd.ValidateRequiredFlags(), cmd.ValidateFlagGroups()} {
					if err != nil {
						return &exitError{code: exitUsage, err: err}
					}
				}
				return nil
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	// The RunE above makes a group runnable, and cobra's usage shows a
	// runnable command's own line ("sluice [flags]") above
	// "sluice [command]": a group's usage is its [command] line only.
	root.SetUsageTemplate(strings.Replace(root.UsageTemplate(),
		"Usage:{{if .Runnable}}", `Usage:{{if and .Runnable (not (index .Annotations "`+groupAnnotation+`"))}}`, 1))
	// "sluice help nosuch" printed the root's help and exited 0.
	if help, _, err := root.Find([]string{"help"}); err == nil && help.Name() == "help" && help.Run != nil {
		run := help.Run
		help.Run = nil
		help.RunE = func(cmd *cobra.Command, args []string) error {
			if _, rest, err := root.Find(args); err != nil || len(rest) > 0 {
				return usage("unknown help topic %q: see sluice --help", strings.Join(args, " "))
			}
			run(cmd, args)
			return nil
		}
	}
}

// groupAnnotation marks a group command (a subcommand is what it runs,
// as "sluice" or "sluice store") that usageExits made runnable.
const groupAnnotation = "sluice:group"

// loadConfig reads the environment, applies its Go runtime settings
// (applyRuntime) and builds the process logger.
func loadConfig(cmd *cobra.Command) (*sluiceconfig.Config, *slog.Logger, error) {
	cfg, err := sluiceconfig.FromOS()
	if err != nil {
		return nil, nil, err
	}
	applyRuntime(cfg.Runtime)
	logger, err := observability.NewLogger(cmd.ErrOrStderr(), cfg.Log.Format, cfg.Log.Level)
	if err != nil {
		return nil, nil, err
	}
	return cfg, logger, nil
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of this binary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.Print(versionLine())
			return nil
		},
	}
}

// versionLine is what `sluice version` and `sluice --version` print.
func versionLine() string {
	return fmt.Sprintf("sluice %s (commit %s)\n", version, commit)
}

// applyRuntime sets the garbage collector's target from GOGC (default 400;
// the Go runtime alone would use 100 when GOGC is unset) and returns the
// previous one.
func applyRuntime(r observability.RuntimeConfig) (previous int) {
	return debug.SetGCPercent(r.GCPercent())
}
