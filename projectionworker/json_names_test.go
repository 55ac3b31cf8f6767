package projectionworker_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/projectionworker"
)

// TestJSONNames: the projection types the admin API answers with (the
// rollback plan and its indices, the overview's indices, the jobs'
// progress and summary) and the CLI prints with --json use snake_case
// names, as every other body does; the console reads these names.
func TestJSONNames(t *testing.T) {
	lag := projectionworker.Lag{Committed: 1, End: 2, Lag: 1, Behind: 1}
	idx := projectionworker.IndexInfo{Index: "sluice_shop_instances_v1", Scope: "shop", Version: 1, Live: true, ReadAlias: true, Docs: 3}
	lagNames := []string{"behind", "committed", "end", "lag"}
	tests := []struct {
		name string
		v    any
		want []string
		// nested: the names of an object one key down ("key" or
		// "key[0]" for a list's first element).
		nested map[string][]string
	}{
		{"IndexInfo", idx, []string{"docs", "index", "live", "read_alias", "refresh_interval", "replicas", "scope", "version"}, nil},
		{"Lag", lag, lagNames, nil},
		{"Progress", projectionworker.Progress{Phase: "swapping", Projection: "instances", Version: 2, Lag: lag, Elapsed: time.Second},
			[]string{"elapsed_ns", "lag", "phase", "projection", "version"}, map[string][]string{"lag": lagNames}},
		{"Summary", projectionworker.Summary{Projection: "instances", From: 1, To: 2, Scopes: []string{"shop"}, Lag: lag, Elapsed: time.Second},
			[]string{"elapsed_ns", "from", "lag", "old_replicas", "projection", "scopes", "to"}, map[string][]string{"lag": lagNames}},
		{"RollbackPlan", projectionworker.RollbackPlan{Projection: "instances", From: 2, To: 1, Indices: []projectionworker.IndexInfo{idx}},
			[]string{"from", "indices", "projection", "to"},
			map[string][]string{"indices[0]": {"docs", "index", "live", "read_alias", "refresh_interval", "replicas", "scope", "version"}}},
		{"RebuildPlan", projectionworker.RebuildPlan{Projection: "instances", Version: 2},
			[]string{"group", "handler", "highest", "indices", "live", "projection", "version"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.v)
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			if got := keys(m); !slices.Equal(got, tc.want) {
				t.Errorf("names %v, want %v (%s)", got, tc.want, b)
			}
			for k, want := range tc.nested {
				var sub map[string]any
				if key, ok := strings.CutSuffix(k, "[0]"); ok {
					list, _ := m[key].([]any)
					if len(list) > 0 {
						sub, _ = list[0].(map[string]any)
					}
				} else {
					sub, _ = m[k].(map[string]any)
				}
				if got := keys(sub); !slices.Equal(got, want) {
					t.Errorf("%s names %v, want %v (%s)", k, got, want, b)
				}
			}
		})
	}
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
