package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/elastic/go-elasticsearch/v8"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/sluicehq/sluice/migrations"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/sluiceconfig"
	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/projectionworker/declarative"
	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/schema"
	"github.com/sluicehq/sluice/shared/kafka"
)

// projectionsEnv selects the projections of `sluice projection-worker`.
const projectionsEnv = "SLUICE_PROJECTIONS"

// projectionsFileEnv names the declarative projections file (or
// directory) of `sluice projection-worker` and `sluice projection …`.
const projectionsFileEnv = "SLUICE_PROJECTIONS_FILE"

// loadDeclarative compiles the declarative projections of file ("" or
// unset: $SLUICE_PROJECTIONS_FILE; none when both are empty). A compile
// error names the file, line and column.
func loadDeclarative(file string) ([]*declarative.Projection, error) {
	if file == "" {
		file = os.Getenv(projectionsFileEnv)
	}
	if file == "" {
		return nil, nil
	}
	specs, err := declarative.LoadFiles(file)
	if err != nil {
		return nil, err
	}
	return declarative.Compile(specs)
}

func asProjections(ps []*declarative.Projection) []projectionworker.Projection {
	out := make([]projectionworker.Projection, len(ps))
	for i, p := range ps {
		out[i] = p
	}
	return out
}

// parseProjections resolves a comma-separated list of projection names
// among the built-ins and custom.
func parseProjections(list string, custom ...projectionworker.Projection) ([]projectionworker.Spec, error) {
	var specs []projectionworker.Spec
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		p, err := projectionworker.Lookup(n, custom...)
		if err != nil {
			return nil, err
		}
		specs = append(specs, projectionworker.Spec{Projection: p})
	}
	if len(specs) == 0 {
		return nil, errors.New("no projection selected (--projections)")
	}
	return specs, nil
}

// newProjectionWorkerCmd is `sluice projection-worker` (docs/projectionworker.md): it runs
// the selected projections (default history) at their live versions on the
// events topic until SIGTERM (then it drains within SHUTDOWN_TIMEOUT).
func newProjectionWorkerCmd() *cobra.Command {
	var list, file string
	cmd := &cobra.Command{
		Use:   "projection-worker",
		Short: "Run the projection worker: domain events → Elasticsearch read models (docs/projectionworker.md)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			decl, err := loadDeclarative(file)
			if err != nil {
				return err // a compile error refuses to start
			}
			if !cmd.Flags().Changed("projections") {
				if v := os.Getenv(projectionsEnv); v != "" {
					list = v
				} else if len(decl) > 0 {
					list = "" // a projections file alone runs its projections
				}
			}
			var specs []projectionworker.Spec
			if strings.TrimSpace(list) != "" || len(decl) == 0 {
				if specs, err = parseProjections(list); err != nil {
					return err
				}
			}
			for _, p := range decl {
				specs = append(specs, projectionworker.Spec{Projection: p})
			}
			return runService(cmd, pipeline.ProjectionWorker, pipeline.Options{Projections: specs}, nil)
		},
	}
	cmd.Flags().StringVar(&list, "projections", "history", "comma-separated projections to run ("+projectionsEnv+"); built in: instances, history")
	cmd.Flags().StringVar(&file, "projections-file", "", "declarative projections: a YAML file or a directory of them ("+projectionsFileEnv+"; docs/projections.md); a changed version rebuilds blue/green")
	return cmd
}

// newProjectionCmd is `sluice projection list|status|rebuild|rollback`
// (docs/projectionworker.md#rebuild-and-rollback-runbook, docs/operator-commands.md).
func newProjectionCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "projection",
		Short: "Inspect, rebuild (blue/green) and roll back projections",
	}
	cmd.AddCommand(newProjectionListCmd(), newProjectionStatusCmd(), newProjectionRebuildCmd(), newProjectionRollbackCmd(), newProjectionTestCmd())
	cmd.PersistentFlags().String("projections-file", "", "declarative projections (YAML file or directory; "+projectionsFileEnv+") to find by name")
	return cmd
}

func newProjectionListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the projections and their live versions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, es, err := loadConfigES(cmd)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "PROJECTION\tCODE VERSION\tLIVE VERSION\tVERSIONS")
			for _, p := range projectionworker.Builtins() {
				idx, err := projectionworker.Indices(cmd.Context(), es, cfg.Elasticsearch.IndexPrefix, p.Name())
				if err != nil {
					return err
				}
				live, vers := 0, map[int]bool{}
				for _, i := range idx {
					vers[i.Version] = true
					if i.Live {
						live = max(live, i.Version)
					}
				}
				var vs []string
				for v := 1; len(vs) < len(vers); v++ {
					if vers[v] {
						vs = append(vs, fmt.Sprintf("v%d", v))
					}
				}
				liveS := "-"
				if live > 0 {
					liveS = fmt.Sprintf("v%d", live)
				}
				fmt.Fprintf(tw, "%s\tv%d\t%s\t%s\n", p.Name(), p.Version(), liveS, strings.Join(vs, ","))
			}
			return tw.Flush()
		},
	}
}

func newProjectionStatusCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "status [name]",
		Short: "Show indices, aliases, documents and consumer lag per projection version",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, es, err := loadConfigES(cmd)
			if err != nil {
				return err
			}
			ps := projectionworker.Builtins()
			if len(args) == 1 {
				p, err := lookupProjection(cmd, args[0])
				if err != nil {
					return err
				}
				ps = []projectionworker.Projection{p}
			}
			adm, closeAdm, err := kafkaAdmin(cfg)
			if err != nil {
				return err
			}
			defer closeAdm()
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "PROJECTION\tSCOPE\tVERSION\tINDEX\tWRITE\tREAD\tDOCS\tREFRESH\tGROUP LAG")
			for _, p := range ps {
				idx, err := projectionworker.Indices(cmd.Context(), es, cfg.Elasticsearch.IndexPrefix, p.Name())
				if err != nil {
					return err
				}
				lags := map[int]string{}
				for _, i := range idx {
					if _, ok := lags[i.Version]; ok {
						continue
					}
					lctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
					l, err := projectionworker.GroupLag(lctx, adm, cfg.Kafka.Group(projectionworker.GroupName(p.Name(), i.Version)), cfg.Kafka.EventsTopic)
					cancel()
					if err != nil {
						lags[i.Version] = "unknown"
					} else {
						lags[i.Version] = fmt.Sprint(l.Lag)
					}
				}
				for _, i := range idx {
					refresh := i.RefreshInterval
					if refresh == "" {
						refresh = "default"
					}
					fmt.Fprintf(tw, "%s\t%s\tv%d\t%s\t%s\t%s\t%d\t%s\t%s\n", p.Name(), i.Scope, i.Version, i.Index,
						yesNo(i.Live), yesNo(i.ReadAlias), i.Docs, refresh, lags[i.Version])
				}
			}
			return tw.Flush()
		},
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "-"
}

func kafkaAdmin(cfg *sluiceconfig.Config) (*kadm.Client, func(), error) {
	cl, err := kafka.NewClient(cfg.Kafka)
	if err != nil {
		return nil, nil, err
	}
	return kadm.NewClient(cl), cl.Close, nil
}

// switchTarget is what a rebuild or rollback plans and runs with: the
// projection, the configuration, the process logger and an Elasticsearch
// client, read once per command.
type switchTarget struct {
	p      projectionworker.Projection
	cfg    *sluiceconfig.Config
	logger *slog.Logger
	es     *elasticsearch.Client
}

// openSwitchTarget looks up projection name and reads the configuration.
func openSwitchTarget(cmd *cobra.Command, name string) (switchTarget, error) {
	p, err := lookupProjection(cmd, name)
	if err != nil {
		return switchTarget{}, err
	}
	cfg, logger, err := loadConfig(cmd)
	if err != nil {
		return switchTarget{}, err
	}
	es, err := readmodel.NewClient(cfg.Elasticsearch)
	if err != nil {
		return switchTarget{}, err
	}
	return switchTarget{p: p, cfg: cfg, logger: logger, es: es}, nil
}

// runSwitch runs a Rebuild or Rollback with a progress bar on a terminal
// (records consumed of the topic's end) and a summary on stdout: a line,
// or JSON with asJSON.
func runSwitch(cmd *cobra.Command, t switchTarget, version int, settle time.Duration, asJSON bool,
	op func(context.Context, projectionworker.SwitchOptions) (projectionworker.Summary, error)) error {
	p, cfg, logger, es := t.p, t.cfg, t.logger, t.es
	// The registry role, and the main role for the schema registry when the
	// projection upcasts (docs/scale-out.md).
	roles := []migrations.Role{migrations.RoleRegistry}
	d, upcasts := p.(*declarative.Projection)
	upcasts = upcasts && d.Upcasts()
	if upcasts {
		roles = append(roles, migrations.RoleMain)
	}
	pools, err := openPools(cmd, cfg, roles...)
	if err != nil {
		return err
	}
	defer pools.Close()
	if upcasts {
		d.UseUpcaster(schema.New(pools.Main, cfg.Schema, logger))
	}
	metrics, stopMetrics, err := serveSwitchMetrics(cmd, logger)
	if err != nil {
		return err
	}
	defer stopMetrics()
	bar := newProgress(cmd, 0, p.Name(), "records")
	sum, err := op(cmd.Context(), projectionworker.SwitchOptions{Config: cfg.ProjectionWorker(),
		Deps:       projectionworker.Deps{Pool: pools.Registry, ES: es, Logger: logger, Metrics: metrics},
		Projection: p, Version: version, Settle: settle,
		Progress: func(pr projectionworker.Progress) {
			bar.setMax(pr.Lag.End)
			bar.describe(fmt.Sprintf("%s v%d %s", pr.Projection, pr.Version, pr.Phase))
			bar.set(pr.Lag.End - pr.Lag.Lag)
		}})
	bar.finish()
	if err != nil {
		return switchError(err, sum)
	}
	if asJSON {
		return writeSummary(cmd.OutOrStdout(), switchSummary{Projection: sum.Projection, From: sum.From, To: sum.To,
			Scopes: sum.Scopes, Records: sum.Lag.End, ElapsedSeconds: sum.Elapsed.Seconds()})
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s: v%d → v%d live for %s (%s); v%d kept for rollback\n",
		sum.Projection, sum.From, sum.To, strings.Join(sum.Scopes, ", "), sum.Elapsed.Round(time.Millisecond), sum.From)
	return nil
}

// switchError is the error of a rebuild or rollback that stopped (Ctrl-C,
// an Elasticsearch or Kafka error), saying whether the aliases had
// swapped: a Ctrl-C during the settle after the swap printed only
// "context canceled", with the new version live.
func switchError(err error, sum projectionworker.Summary) error {
	switch {
	case len(sum.Scopes) > 0:
		return fmt.Errorf("%w: stopped after the aliases swapped: %s v%d is live for %s (v%d kept for rollback); "+
			"the settle did not finish, and v%d's consumer group goes on from its committed offsets when its workers run",
			err, sum.Projection, sum.To, strings.Join(sum.Scopes, ", "), sum.From, sum.To)
	case sum.To > 0:
		return fmt.Errorf("%w: stopped before the aliases swapped: %s v%d was not made live; the live version is unchanged",
			err, sum.Projection, sum.To)
	}
	return err
}

// switchSummary is the --json output of `sluice projection rebuild` and
// `rollback`: the plan on --dry-run (a rollback's from, to and indices, as
// the admin API's dry run answers), the switch's summary otherwise.
type switchSummary struct {
	DryRun         bool                          `json:"dry_run,omitempty"`
	Plan           *projectionworker.RebuildPlan `json:"plan,omitempty"`
	Projection     string                        `json:"projection,omitempty"`
	From           int                           `json:"from,omitempty"`
	To             int                           `json:"to,omitempty"`
	Indices        []projectionworker.IndexInfo  `json:"indices,omitempty"`
	Scopes         []string                      `json:"scopes,omitempty"`
	Records        int64                         `json:"records,omitempty"`
	ElapsedSeconds float64                       `json:"elapsed_seconds,omitempty"`
}

func newProjectionRebuildCmd() *cobra.Command {
	var version int
	var settle time.Duration
	var g guardFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "rebuild <name> --version N",
		Short: "Build a new projection version from the beginning of the events topic, then swap the aliases (docs/projectionworker.md#rebuild-and-rollback-runbook)",
		Long: `rebuild builds version N into fresh indices with a fresh consumer group and registry handler,
then swaps the aliases. N must be newer than every existing version (live or kept for
rollback) and its consumer group must have no committed offsets: an older or existing version
would reuse old indices and offsets and skip every event. To go back use
` + "`sluice projection rollback`" + `.

--dry-run prints the indices, group and handler it would create; acting needs --yes (or a
"yes" on a terminal). On a terminal a progress bar shows the records consumed; --json prints a
summary.`,
		Example: `  sluice projection rebuild history --version 3 --dry-run
  sluice projection rebuild history --version 3 --yes`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if settle < 0 {
				return usage("--settle %s: want a duration >= 0", settle)
			}
			if version <= 0 {
				return usage("--version N (≥ 1, newer than every existing version) is required")
			}
			t, err := openSwitchTarget(cmd, args[0])
			if err != nil {
				return err
			}
			p, cfg, es := t.p, t.cfg, t.es
			adm, closeAdm, err := kafkaAdmin(cfg)
			if err != nil {
				return err
			}
			defer closeAdm()
			plan, err := projectionworker.PlanRebuild(cmd.Context(), es, adm, cfg.Elasticsearch.IndexPrefix, cfg.Kafka.GroupPrefix, p, version)
			if errors.Is(err, projectionworker.ErrStaleVersion) || errors.Is(err, projectionworker.ErrAlreadyLive) {
				return unsafe(err)
			}
			if err != nil {
				return err
			}
			if !asJSON {
				cmd.Print(rebuildPlanLine(plan, cfg.Kafka.EventsTopic))
			}
			act, err := g.confirm(cmd, fmt.Sprintf("rebuild %s as v%d", plan.Projection, plan.Version))
			if err != nil {
				return err
			}
			if !act {
				if asJSON {
					return writeSummary(cmd.OutOrStdout(), switchSummary{DryRun: true, Plan: &plan})
				}
				cmd.Printf("rebuild (dry run): nothing changed\n")
				return nil
			}
			return runSwitch(cmd, t, version, settle, asJSON, projectionworker.Rebuild)
		},
	}
	cmd.Flags().IntVar(&version, "version", 0, "version to build (newer than every existing version)")
	cmd.Flags().DurationVar(&settle, "settle", 5*time.Second, "keep consuming this long after the swap")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON summary")
	addSwitchMetricsFlag(cmd)
	g.register(cmd, false)
	return cmd
}

// rebuildPlanLine is the plan `sluice projection rebuild` prints; the live
// versions per scope read "shop v1, tenant2 v3" ("none" without a live
// index), not Go's "map[shop:1]".
func rebuildPlanLine(plan projectionworker.RebuildPlan, topic string) string {
	live := make([]string, 0, len(plan.Live))
	for _, scope := range slices.Sorted(maps.Keys(plan.Live)) {
		live = append(live, fmt.Sprintf("%s v%d", scope, plan.Live[scope]))
	}
	if len(live) == 0 {
		live = append(live, "none")
	}
	return fmt.Sprintf("rebuild plan: %s v%d (live %s; highest v%d): create %s; consumer group %s and registry handler %s from the beginning of %s; then swap the aliases\n",
		plan.Projection, plan.Version, strings.Join(live, ", "), plan.Highest, strings.Join(plan.Indices, ", "), plan.Group, plan.Handler, topic)
}

func newProjectionRollbackCmd() *cobra.Command {
	var settle time.Duration
	var g guardFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "rollback <name>",
		Short: "Point the aliases back at the previous version, after it caught up (docs/projectionworker.md#rebuild-and-rollback-runbook)",
		Long: `rollback switches the projection from its live version back to the highest version below it:
that version's consumer group first catches up with the events that arrived since, then the
read and write aliases of every scope swap in one request. The newer indices stay. With no
older version it is refused (exit 7), as the admin API refuses it (422 unsafe).

--dry-run prints the plan (from and to version, the indices now) and changes nothing; acting
needs --yes (or a "yes" on a terminal). On a terminal a progress bar shows the records
consumed; --json prints a summary (the plan on --dry-run).`,
		Example: `  sluice projection rollback history --dry-run
  sluice projection rollback history --yes`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if settle < 0 {
				return usage("--settle %s: want a duration >= 0", settle)
			}
			t, err := openSwitchTarget(cmd, args[0])
			if err != nil {
				return err
			}
			cfg := t.cfg
			plan, err := projectionworker.PlanRollback(cmd.Context(), t.es, cfg.Elasticsearch.IndexPrefix, t.p.Name())
			if errors.Is(err, projectionworker.ErrNothingToRollBack) {
				return unsafe(err)
			}
			if err != nil {
				return err
			}
			if !asJSON {
				printRollbackPlan(cmd, plan, cfg.Kafka.Group(projectionworker.GroupName(plan.Projection, plan.To)))
			}
			act, err := g.confirm(cmd, fmt.Sprintf("roll %s back from v%d to v%d", plan.Projection, plan.From, plan.To))
			if err != nil {
				return err
			}
			if !act {
				if asJSON {
					return writeSummary(cmd.OutOrStdout(), switchSummary{DryRun: true, Projection: plan.Projection,
						From: plan.From, To: plan.To, Indices: plan.Indices})
				}
				cmd.Printf("rollback (dry run): nothing changed\n")
				return nil
			}
			return runSwitch(cmd, t, 0, settle, asJSON, projectionworker.Rollback)
		},
	}
	cmd.Flags().DurationVar(&settle, "settle", 5*time.Second, "keep consuming this long after the swap")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON summary (the plan on --dry-run)")
	addSwitchMetricsFlag(cmd)
	g.register(cmd, false)
	return cmd
}

// printRollbackPlan prints what `sluice projection rollback` would switch
// (projectionworker.PlanRollback): the versions, the group that catches up
// and the indices as they are now.
func printRollbackPlan(cmd *cobra.Command, plan projectionworker.RollbackPlan, group string) {
	cmd.Printf("rollback plan: %s v%d → v%d: consumer group %s catches up, then the aliases of every scope swap to v%d; v%d is kept\n",
		plan.Projection, plan.From, plan.To, group, plan.To, plan.From)
	for _, i := range plan.Indices {
		var aliases []string
		if i.Live {
			aliases = append(aliases, "write")
		}
		if i.ReadAlias {
			aliases = append(aliases, "read")
		}
		a := "no alias"
		if len(aliases) > 0 {
			a = strings.Join(aliases, "+") + " alias"
		}
		cmd.Printf("  %s (scope %s, v%d, %d docs, %s)\n", i.Index, i.Scope, i.Version, i.Docs, a)
	}
}

// lookupProjection finds a projection by name among the built-ins and the
// declarative projections of --projections-file.
func lookupProjection(cmd *cobra.Command, name string) (projectionworker.Projection, error) {
	file, _ := cmd.Flags().GetString("projections-file")
	decl, err := loadDeclarative(file)
	if err != nil {
		return nil, err
	}
	return projectionworker.Lookup(name, asProjections(decl)...)
}

// newProjectionTestCmd is `sluice projection test FILE --events sample.jsonl`.
func newProjectionTestCmd() *cobra.Command {
	var events string
	cmd := &cobra.Command{
		Use:   "test FILE --events sample.jsonl",
		Short: "Run declarative projections over sample events and print the documents (docs/projections.md)",
		Long: `test compiles the declarative projections of FILE (a YAML file or a directory), runs them over
the envelopes of --events (JSON Lines, as the event store writes them; "-" reads stdin) with the
documents in memory, and prints each resulting document as a JSON line: projection, scope, _id,
_version and _source. Nothing is read from or written to Elasticsearch or Kafka. A projection
with upcast: latest reads the schema registry in Postgres (DATABASE_URL) to upcast the events.`,
		Example: "  sluice projection test examples/projections/order_totals.yaml --events examples/projections/order_totals.events.jsonl",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			specs, err := declarative.LoadFiles(args[0])
			if err != nil {
				return namedFileError(err)
			}
			ps, err := declarative.Compile(specs)
			if err != nil {
				return err
			}
			for _, p := range ps {
				if !p.Upcasts() {
					continue
				}
				// upcast: latest reads the schema registry (docs/schemas.md#upcasting-on-read).
				reg, closeFn, err := openSchemas(cmd)
				if err != nil {
					return fmt.Errorf("projection %s declares upcast: latest, so the test reads the schema registry (DATABASE_URL): %w", p.Name(), err)
				}
				defer closeFn()
				for _, q := range ps {
					q.UseUpcaster(reg)
				}
				break
			}
			in := cmd.InOrStdin()
			if events != "-" {
				f, err := os.Open(events)
				if err != nil {
					return namedFileError(err)
				}
				defer f.Close()
				in = f
			}
			return declarative.RunSample(cmd.Context(), ps, in, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&events, "events", "-", "sample envelopes, JSON Lines (- = stdin)")
	return cmd
}

// loadConfigES loads the configuration and makes the Elasticsearch client
// it names, for the projection commands that read or change indices.
func loadConfigES(cmd *cobra.Command) (*sluiceconfig.Config, *elasticsearch.Client, error) {
	cfg, _, err := loadConfig(cmd)
	if err != nil {
		return nil, nil, err
	}
	es, err := readmodel.NewClient(cfg.Elasticsearch)
	if err != nil {
		return nil, nil, err
	}
	return cfg, es, nil
}
