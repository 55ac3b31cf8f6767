package projectionworker_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/elastic/go-elasticsearch/v8"

	"github.com/sluicehq/sluice/esserver"
	"github.com/sluicehq/sluice/projectionworker"
)

// TestPlanRollback: the plan names what Rollback switches (the highest
// live version to the highest below it) and refuses, with
// ErrNothingToRollBack, when there is none; it changes no alias. The admin
// API's dry run and `sluice projection rollback --dry-run` print it.
func TestPlanRollback(t *testing.T) {
	ctx := context.Background()
	ts := httptest.NewServer(esserver.New())
	t.Cleanup(ts.Close)
	es, err := elasticsearch.NewClient(elasticsearch.Config{Addresses: []string{ts.URL}})
	if err != nil {
		t.Fatal(err)
	}
	p := projectionworker.Instances{}
	tests := []struct {
		name     string
		versions []int // the indices of scope "shop"
		live     int   // the version the aliases point at (0: none)
		from, to int
		refused  bool
	}{
		{"no index", nil, 0, 0, 0, true},
		{"only v1, live", []int{1}, 1, 1, 0, true},
		{"v2 live, v1 kept", []int{1, 2}, 2, 2, 1, false},
		{"v3 live, v1 and v2 kept", []int{1, 2, 3}, 3, 3, 2, false},
		{"v3 live, v1 kept (a gap)", []int{1, 3}, 3, 3, 1, false},
		{"v1 live after a rollback, v2 kept", []int{1, 2}, 1, 1, 0, true},
		{"v2 being built, v1 live", []int{1, 2}, 1, 1, 0, true},
	}
	for n, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			prefix := fmt.Sprintf("plan%d_", n)
			for _, v := range tc.versions {
				res, err := es.Indices.Create(projectionworker.IndexNames(prefix, "shop", p.Name(), v).Index)
				if err != nil || res.IsError() {
					t.Fatalf("create v%d: %v %v", v, err, res)
				}
				res.Body.Close()
			}
			if tc.live > 0 {
				if _, err := projectionworker.SwapAliases(ctx, es, prefix, p, tc.live); err != nil {
					t.Fatal(err)
				}
			}
			plan, err := projectionworker.PlanRollback(ctx, es, prefix, p.Name())
			if tc.refused != errors.Is(err, projectionworker.ErrNothingToRollBack) || (!tc.refused && err != nil) {
				t.Fatalf("err %v, want refused %t", err, tc.refused)
			}
			if plan.Projection != p.Name() || plan.From != tc.from || plan.To != tc.to {
				t.Errorf("plan %+v, want %s v%d to v%d", plan, p.Name(), tc.from, tc.to)
			}
			var got []int
			for _, i := range plan.Indices {
				got = append(got, i.Version)
				if i.Live != (i.Version == tc.live) {
					t.Errorf("index %s live %t, want %t", i.Index, i.Live, i.Version == tc.live)
				}
			}
			if !slices.Equal(got, tc.versions) {
				t.Errorf("indices of versions %v, want %v", got, tc.versions)
			}
			// Planning changed nothing: the aliases are where they were.
			if v, err := projectionworker.LiveVersion(ctx, es, prefix, p.Name()); err != nil || v != tc.live {
				t.Errorf("live version after the plan: %d %v, want %d", v, err, tc.live)
			}
		})
	}
}
