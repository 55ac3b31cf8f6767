package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/registry/registrytest"

	"github.com/google/uuid"

	"github.com/sluicehq/sluice/shared/claim"
)

func TestRegistryShowAndPrune(t *testing.T) {
	ctx := context.Background()
	_, reg := envRegistry(t, "cli-test")
	id := uuid.NewString()
	res, err := reg.Claim(ctx, claim.Request{Handler: "instanceworker", EventID: id, AggregateID: "db:c:1", Seq: 1, Policy: claim.SkipStale})
	if err != nil || res.Kind != claim.Claimed {
		t.Fatalf("claim: %+v %v", res, err)
	}
	if err := reg.MarkDone(ctx, res.Lease, claim.Rejected("instance exists")); err != nil {
		t.Fatal(err)
	}

	out, _, err := run(t, "registry", "show", id)
	if err != nil {
		t.Fatalf("show: %v", err)
	}
	for _, want := range []string{"instanceworker", "done", "instance exists", id} {
		if !strings.Contains(out, want) {
			t.Errorf("show output lacks %q:\n%s", want, out)
		}
	}
	_, _, err = run(t, "registry", "show", uuid.NewString())
	var ex *exitError
	if !errors.As(err, &ex) || ex.code != 3 {
		t.Fatalf("show of an unknown event: want exit 3, got %v", err)
	}

}

// TestRegistryPruneGuard: prune refuses an age below the lease timeout,
// refuses to act without --yes on a non-terminal, prints its plan on
// --dry-run, and with --yes deletes old rows but never the instance
// worker's rows the command-status API reads.
func TestRegistryPruneGuard(t *testing.T) {
	ctx := context.Background()
	pool, reg := envRegistry(t, "cli-test")
	status, other := uuid.NewString(), uuid.NewString()
	for _, c := range []struct{ handler, id string }{{"instanceworker", status}, {"projection-history-v1", other}} {
		res, err := reg.Claim(ctx, claim.Request{Handler: c.handler, EventID: c.id, AggregateID: "db:c:1", Seq: 1, Policy: claim.SkipStale})
		if err != nil || res.Kind != claim.Claimed {
			t.Fatalf("claim: %+v %v", res, err)
		}
		if err := reg.MarkDone(ctx, res.Lease, claim.Applied()); err != nil {
			t.Fatal(err)
		}
	}
	if err := registrytest.Age(ctx, pool, 8*24*time.Hour); err != nil {
		t.Fatal(err)
	}
	rowsOf := func(id string) int {
		rows, err := reg.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return len(rows)
	}
	steps := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  []string
		left     [2]int // rows of status, other afterwards
	}{
		{"below the lease timeout", []string{"--older-than", "1ns", "--yes"}, exitUnsafe, nil, [2]int{1, 1}},
		{"no --yes on a non-terminal", nil, exitNeedsConfirmation, nil, [2]int{1, 1}},
		{"dry run", []string{"--dry-run"}, 0, []string{"projection-history-v1", "delete", "keep (command statuses)", "1 rows older than 168h0m0s would be deleted, 1 kept; nothing changed"}, [2]int{1, 1}},
		{"act", []string{"--yes", "--json"}, 0, []string{`"deleted": 1`, `"kept_rows": 1`}, [2]int{1, 0}},
	}
	for _, st := range steps {
		out, _, err := run(t, append([]string{"registry", "prune"}, st.args...)...)
		var ex *exitError
		switch {
		case st.wantCode == 0 && err != nil:
			t.Fatalf("%s: %v", st.name, err)
		case st.wantCode != 0 && (!errors.As(err, &ex) || ex.code != st.wantCode):
			t.Fatalf("%s: want exit %d, got %v", st.name, st.wantCode, err)
		}
		for _, w := range st.wantOut {
			if !strings.Contains(out, w) {
				t.Errorf("%s: output lacks %q:\n%s", st.name, w, out)
			}
		}
		if got := [2]int{rowsOf(status), rowsOf(other)}; got != st.left {
			t.Fatalf("%s: rows left (status, other) = %v, want %v", st.name, got, st.left)
		}
	}
}

// TestRegistryPruneJSONDurations: the --json summary gives the plan's
// durations as numbers of seconds (older_than_seconds, floor_seconds), as
// the other summaries give elapsed_seconds; they were integer nanoseconds
// under "older_than" and "floor" (604800000000000 for 7 days).
func TestRegistryPruneJSONDurations(t *testing.T) {
	envRegistry(t, "cli-test")
	t.Setenv("PROCESSED_EVENT_RETENTION_DAYS", "2")
	t.Setenv("PROCESSED_EVENT_LEASE_TIMEOUT_SECONDS", "600")
	t.Setenv("EVENT_PUBLISHER_LOOKBACK_SECONDS", "1200")
	cases := []struct {
		name             string
		args             []string
		olderThan, floor float64
	}{
		{"dry run, the configured retention", []string{"--dry-run"}, 2 * 24 * 3600, 1200},
		{"dry run, --older-than", []string{"--dry-run", "--older-than", "90m"}, 5400, 1200},
		{"act, --older-than of a fraction of a second", []string{"--yes", "--older-than", "1h0m0.5s"}, 3600.5, 1200},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := run(t, append([]string{"registry", "prune", "--json"}, tc.args...)...)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			var sum struct {
				Plan map[string]any `json:"plan"`
			}
			if err := json.Unmarshal([]byte(out), &sum); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			want := map[string]float64{"older_than_seconds": tc.olderThan, "floor_seconds": tc.floor}
			for k, w := range want {
				if got, ok := sum.Plan[k].(float64); !ok || got != w {
					t.Errorf("plan.%s = %v, want %v\n%s", k, sum.Plan[k], w, out)
				}
			}
			for _, k := range []string{"older_than", "floor"} {
				if v, ok := sum.Plan[k]; ok {
					t.Errorf("plan.%s = %v: a duration without its unit\n%s", k, v, out)
				}
			}
		})
	}
}

// TestPruneError: an interrupted prune says how many rows its finished
// batches deleted and to run it again; it said only "context canceled".
func TestPruneError(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		deleted int64
		want    string
	}{
		{"interrupted", fmt.Errorf("registry: prune: %w", context.Canceled), 2000, "prune interrupted after deleting 2000 rows"},
		{"interrupted before a batch", context.Canceled, 0, "after deleting 0 rows (batch by batch; nothing else changed); run it again to finish"},
		{"another error", errors.New("registry: prune: boom"), 7, "registry: prune: boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := pruneError(tc.err, tc.deleted)
			if !errors.Is(got, tc.err) || !strings.Contains(got.Error(), tc.want) {
				t.Errorf("%q, want it to wrap %v and say %q", got, tc.err, tc.want)
			}
		})
	}
}
