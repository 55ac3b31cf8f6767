package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/elastic/go-elasticsearch/v8"
	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/projectionworker"

	"github.com/sluicehq/sluice/esserver"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/readmodel"
)

// runProjection runs the projection commands on a root of their own (the
// lead wires them into newRootCmd).
func runProjection(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	root := &cobra.Command{Use: "sluice", SilenceUsage: true, SilenceErrors: true}
	root.SetOut(&out)
	root.SetErr(&errb)
	root.AddCommand(newProjectionCmd(), newProjectionWorkerCmd())
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), errb.String(), err
}

func TestProjectionCommands(t *testing.T) {
	url, _ := testenv.NewMigratedDatabase(t)
	kafka := testenv.NewKafka(t)
	ts := httptest.NewServer(esserver.New())
	t.Cleanup(ts.Close)
	t.Setenv("DATABASE_URL", url)
	t.Setenv("ELASTICSEARCH_URLS", ts.URL)
	t.Setenv("KAFKA_BROKERS", strings.Join(kafka.Brokers, ","))
	t.Setenv("EVENTS_TOPIC", testenv.UniqueName("events-"))
	es, err := elasticsearch.NewClient(elasticsearch.Config{Addresses: []string{ts.URL}})
	if err != nil {
		t.Fatal(err)
	}
	// instances v1 is live for db "shop" (as the instance worker creates it).
	if _, err := readmodel.EnsureIndex(context.Background(), es, "sluice_", "shop", 1); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args    []string
		want    []string
		wantErr string
	}{
		{[]string{"projection", "list"}, []string{"instances", "history", "v1"}, ""},
		{[]string{"projection", "status", "instances"}, []string{"sluice_shop_instances_v1", "yes"}, ""},
		{[]string{"projection", "rebuild", "instances", "--version", "1"}, nil, "already live"},
		{[]string{"projection", "rebuild", "instances"}, nil, "--version"},
		{[]string{"projection", "rollback", "instances"}, nil, "no older version"},
		{[]string{"projection", "status", "nope"}, nil, "not found (known: instances, history)"},
		{[]string{"projection-worker", "--projections", "nope"}, nil, "not found (known: instances, history)"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, _, err := runProjection(t, tc.args...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// TestProjectionRebuildGuard (issue 27.2): with instances v2 live and v1
// kept, and a v3 index left by an earlier build, rebuild refuses v1 (older:
// pointing to rollback) and v3 (it exists) even with --yes; a fresh v4
// needs --yes on a non-terminal, prints its plan on --dry-run without
// creating anything, and with --yes builds fresh v4 indices and swaps to
// them.
func TestProjectionRebuildGuard(t *testing.T) {
	live := instancesVersions(t, 2, 3)
	steps := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
		wantIdx  string // versions afterwards, * = live
	}{
		{"older than live", []string{"--version", "1", "--yes"}, exitUnsafe, "use `sluice projection rollback instances`", "v1v2*v3"},
		{"existing index", []string{"--version", "3", "--yes"}, exitUnsafe, "rebuild as v4", "v1v2*v3"},
		{"no --yes on a non-terminal", []string{"--version", "4"}, exitNeedsConfirmation, "pass --yes", "v1v2*v3"},
		{"dry run", []string{"--version", "4", "--dry-run"}, 0, "create sluice_shop_instances_v4; consumer group sluice.projection-instances-v4", "v1v2*v3"},
		{"act", []string{"--version", "4", "--yes", "--settle", "0s", "--json"}, 0, `"to": 4`, "v1v2v3v4*"},
	}
	for _, s := range steps {
		out, _, err := runProjection(t, append([]string{"projection", "rebuild", "instances"}, s.args...)...)
		checkGuardStep(t, s.name, out, err, s.wantCode, s.wantOut)
		if got := live(); got != s.wantIdx {
			t.Fatalf("%s: indices %s, want %s", s.name, got, s.wantIdx)
		}
	}
}

// TestProjectionRollbackGuard: with instances v2 live and v1 kept,
// rollback guards as the other destructive commands do — it needs --yes
// on a non-terminal, and --dry-run prints the plan the admin API's dry run
// answers (from, to and the indices, snake_case in --json) without moving
// an alias; with --yes it swaps to v1; then, with nothing older than v1,
// it is refused (exit 7) even with --yes and on --dry-run. It used to swap
// at once, with neither a dry run nor a confirmation.
func TestProjectionRollbackGuard(t *testing.T) {
	live := instancesVersions(t, 2)
	// planJSON checks the --json plan: the admin API's dry run, with the
	// projection named.
	planJSON := func(t *testing.T, out string) {
		var plan struct {
			DryRun     bool             `json:"dry_run"`
			Projection string           `json:"projection"`
			From       int              `json:"from"`
			To         int              `json:"to"`
			Indices    []map[string]any `json:"indices"`
		}
		if err := json.Unmarshal([]byte(out), &plan); err != nil {
			t.Fatalf("--json plan: %v\n%s", err, out)
		}
		if !plan.DryRun || plan.Projection != "instances" || plan.From != 2 || plan.To != 1 || len(plan.Indices) != 2 {
			t.Fatalf("--json plan %s, want a dry run of instances from 2 to 1 with 2 indices", out)
		}
		want := []string{"docs", "index", "live", "read_alias", "refresh_interval", "replicas", "scope", "version"}
		for _, i := range plan.Indices {
			got := make([]string, 0, len(i))
			for k := range i {
				got = append(got, k)
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("index names %v, want %v", got, want)
			}
		}
		if plan.Indices[1]["index"] != "sluice_shop_instances_v2" || plan.Indices[1]["live"] != true || plan.Indices[0]["live"] != false {
			t.Errorf("indices %v, want v1 kept and v2 live", plan.Indices)
		}
	}
	steps := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  []string
		wantIdx  string // versions afterwards, * = live
		check    func(t *testing.T, out string)
	}{
		{"no --yes on a non-terminal", nil, exitNeedsConfirmation, []string{"rollback plan: instances v2 → v1", "pass --yes"}, "v1v2*", nil},
		{"dry run", []string{"--dry-run"}, 0, []string{
			"rollback plan: instances v2 → v1: consumer group sluice.projection-instances-v1 catches up",
			"sluice_shop_instances_v1 (scope shop, v1, 0 docs, no alias)",
			"sluice_shop_instances_v2 (scope shop, v2, 0 docs, write+read alias)",
			"rollback (dry run): nothing changed"}, "v1v2*", nil},
		{"dry run, json", []string{"--dry-run", "--json"}, 0, nil, "v1v2*", planJSON},
		{"act", []string{"--yes", "--settle", "0s", "--json"}, 0, []string{`"from": 2`, `"to": 1`}, "v1*v2", nil},
		{"nothing older, --yes", []string{"--yes"}, exitUnsafe, []string{"no older version"}, "v1*v2", nil},
		{"nothing older, dry run", []string{"--dry-run"}, exitUnsafe, []string{"no older version"}, "v1*v2", nil},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			out, _, err := runProjection(t, append([]string{"projection", "rollback", "instances"}, s.args...)...)
			checkGuardStep(t, s.name, out, err, s.wantCode, s.wantOut...)
			if s.check != nil {
				s.check(t, out)
			}
			if got := live(); got != s.wantIdx {
				t.Fatalf("indices %s, want %s", got, s.wantIdx)
			}
		})
	}
}

// instancesVersions sets up what the projection guard tests run the CLI
// against (a migrated database, Kafka with an instance event, an
// Elasticsearch test server, the instances projection's v1 indices), adds
// the indices of versions (each above 1), makes v2 live, and returns a
// function listing the versions ("v1v2*v3": * marks the live one).
func instancesVersions(t *testing.T, versions ...int) func() string {
	t.Helper()
	ctx := context.Background()
	url, _ := testenv.NewMigratedDatabase(t)
	kafka := testenv.NewKafka(t)
	ts := httptest.NewServer(esserver.New())
	t.Cleanup(ts.Close)
	events := testenv.UniqueName("events-")
	t.Setenv("DATABASE_URL", url)
	t.Setenv("ELASTICSEARCH_URLS", ts.URL)
	t.Setenv("KAFKA_BROKERS", strings.Join(kafka.Brokers, ","))
	t.Setenv("EVENTS_TOPIC", events)
	es, err := elasticsearch.NewClient(elasticsearch.Config{Addresses: []string{ts.URL}})
	if err != nil {
		t.Fatal(err)
	}
	publishInstanceCreated(t, kafka.Brokers, events)
	if _, err := readmodel.EnsureIndex(ctx, es, "sluice_", "shop", 1); err != nil {
		t.Fatal(err)
	}
	p, err := projectionworker.Lookup("instances")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range versions {
		res, err := es.Indices.Create(projectionworker.IndexNames("sluice_", "shop", "instances", v).Index)
		if err != nil || res.IsError() {
			t.Fatalf("create v%d: %v %v", v, err, res)
		}
		res.Body.Close()
	}
	if _, err := projectionworker.SwapAliases(ctx, es, "sluice_", p, 2); err != nil {
		t.Fatal(err)
	}
	live := func() (versions string) {
		idx, err := projectionworker.Indices(ctx, es, "sluice_", "instances")
		if err != nil {
			t.Fatal(err)
		}
		for _, i := range idx {
			versions += fmt.Sprintf("v%d", i.Version)
			if i.Live {
				versions += "*"
			}
		}
		return versions
	}
	return live
}

// TestRebuildPlanLine: the rebuild plan names the live version of each
// scope as "shop v1", sorted; it printed Go's map formatting
// ("live map[shop:1]").
func TestRebuildPlanLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		live map[string]int
		want string
	}{
		{"one scope", map[string]int{"shop": 1}, "(live shop v1; highest v3)"},
		{"scopes sorted", map[string]int{"zoo": 2, "acme": 3}, "(live acme v3, zoo v2; highest v3)"},
		{"no live index", map[string]int{}, "(live none; highest v3)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := rebuildPlanLine(projectionworker.RebuildPlan{Projection: "history", Version: 4, Live: tc.live, Highest: 3,
				Indices: []string{"sluice_shop_history_v4"}, Group: "sluice.projection-history-v4", Handler: "projection:history:v4"}, "sluice.events")
			if !strings.Contains(got, tc.want) || strings.Contains(got, "map[") {
				t.Errorf("plan line %q, want it to contain %q", got, tc.want)
			}
		})
	}
}

// TestSwitchError: a rebuild or rollback that stops says whether the
// aliases had swapped; interrupted during the settle it printed only
// "context canceled" while the new version was live.
func TestSwitchError(t *testing.T) {
	for _, tc := range []struct {
		name string
		sum  projectionworker.Summary
		want string
	}{
		{"after the swap", projectionworker.Summary{Projection: "history", From: 2, To: 3, Scopes: []string{"shop", "zoo"}},
			"context canceled: stopped after the aliases swapped: history v3 is live for shop, zoo (v2 kept for rollback)"},
		{"before the swap", projectionworker.Summary{Projection: "history", From: 2, To: 3},
			"context canceled: stopped before the aliases swapped: history v3 was not made live; the live version is unchanged"},
		{"before anything", projectionworker.Summary{}, "context canceled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := switchError(context.Canceled, tc.sum)
			if !errors.Is(err, context.Canceled) || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("%q, want it to start %q and wrap the cause", err, tc.want)
			}
		})
	}
}
