package admin_test

import (
	"slices"
	"testing"
)

// checkProjectionJSONNames decodes the projection bodies as a client does
// and checks their names are snake_case, as every other admin body: the
// rollback dry run's indices (they were Go names: Index, Live,
// ReadAlias, …), the overview's projection indices, and the finished job's
// summary (with its lag) and last progress. job is the id of a finished rebuild.
func checkProjectionJSONNames(t *testing.T, rollback, overview map[string]any, job any) {
	t.Helper()
	index := []string{"docs", "index", "live", "read_alias", "refresh_interval", "replicas", "scope", "version"}
	lag := []string{"behind", "committed", "end", "lag"}
	first := func(v any) map[string]any {
		list, _ := v.([]any)
		if len(list) == 0 {
			return nil
		}
		m, _ := list[0].(map[string]any)
		return m
	}
	var projIndex, summary, progress map[string]any
	projs, _ := overview["projections"].([]any)
	for _, p := range projs {
		if p, _ := p.(map[string]any); p["name"] == "history" {
			projIndex = first(p["indices"])
		}
	}
	jobs, _ := overview["jobs"].([]any)
	for _, j := range jobs {
		if j, _ := j.(map[string]any); j["id"] == job {
			summary, _ = j["summary"].(map[string]any)
			progress, _ = j["progress"].(map[string]any)
		}
	}
	summaryLag, _ := summary["lag"].(map[string]any)
	for _, tc := range []struct {
		name string
		obj  map[string]any
		want []string
	}{
		{"rollback dry run", rollback, []string{"dry_run", "from", "indices", "to"}},
		{"rollback dry run index", first(rollback["indices"]), index},
		{"overview projection index", projIndex, index},
		{"job summary", summary, []string{"elapsed_ns", "from", "lag", "old_replicas", "projection", "scopes", "to"}},
		{"job summary lag", summaryLag, lag},
		{"job progress", progress, []string{"elapsed_ns", "lag", "phase", "projection", "version"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := make([]string, 0, len(tc.obj))
			for k := range tc.obj {
				got = append(got, k)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("names %v, want %v: %v", got, tc.want, tc.obj)
			}
		})
	}
}
