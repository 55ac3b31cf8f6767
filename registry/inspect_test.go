package registry_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/shared/claim"
)

// GetMany and Versions answer the operator console's aggregate view: the
// rows of a page of events in one query, and each named handler's guard.
func TestGetManyAndVersions(t *testing.T) {
	ctx := context.Background()
	_, pool := testenv.NewMigratedDatabase(t)
	r := newRegistry(t, pool, "w1", registry.Config{MaxAttempts: 5})
	agg, other := "Instance:shop:orders:"+uuid.NewString()[:8], "Instance:shop:orders:other"
	e1, e2, e3, e4 := uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString()
	claimDone(t, r, req("instanceworker", e1, agg, 1, claim.WaitForPredecessor))
	claimDone(t, r, req("instanceworker", e2, agg, 2, claim.WaitForPredecessor))
	claimDone(t, r, req("projection:history:v1", e1, agg, 1, claim.SkipStale))
	res := claimOne(t, r, req("projection:history:v1", e3, agg, 3, claim.SkipStale))
	mustKind(t, res, claim.Claimed)
	if _, err := r.MarkFailed(ctx, res.Lease, claim.Failure{Err: errors.New("es said no"), Retryable: true}); err != nil {
		t.Fatal(err)
	}
	claimDone(t, r, req("instanceworker", e4, other, 1, claim.WaitForPredecessor))

	rows, err := r.GetMany(ctx, []string{e1, e2, e3, uuid.NewString()})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, row := range rows {
		got = append(got, row.EventID[:4]+"/"+row.Handler+"/"+string(row.Status))
	}
	// Ordered by event id, then handler; the id without rows is absent.
	want := map[string]string{
		e1: "instanceworker/done projection:history:v1/done",
		e2: "instanceworker/done",
		e3: "projection:history:v1/failed",
	}
	for id, w := range want {
		var hs []string
		for _, row := range rows {
			if row.EventID == id {
				hs = append(hs, row.Handler+"/"+string(row.Status))
			}
		}
		if strings.Join(hs, " ") != w {
			t.Errorf("rows of %s: %v, want %s (all: %v)", id[:4], hs, w, got)
		}
	}
	if len(rows) != 4 {
		t.Errorf("GetMany returned %d rows, want 4: %v", len(rows), got)
	}
	for i := 1; i < len(rows); i++ {
		if rows[i-1].EventID > rows[i].EventID || (rows[i-1].EventID == rows[i].EventID && rows[i-1].Handler >= rows[i].Handler) {
			t.Errorf("rows not ordered by event_id, handler: %v", got)
		}
	}

	tests := []struct {
		name     string
		agg      string
		handlers []string
		want     string
	}{
		{"both handlers", agg, []string{"projection:history:v1", "instanceworker", "instanceworker"}, "instanceworker=2 projection:history:v1=1"},
		{"one handler", agg, []string{"instanceworker"}, "instanceworker=2"},
		{"handler without a row", agg, []string{"projection:audit:v1"}, ""},
		{"other aggregate", other, []string{"instanceworker", "projection:history:v1"}, "instanceworker=1"},
		{"no handlers", agg, nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vs, err := r.Versions(ctx, tc.agg, tc.handlers)
			if err != nil {
				t.Fatal(err)
			}
			var parts []string
			for _, v := range vs {
				if v.UpdatedAt.IsZero() {
					t.Errorf("%s: no updated_at", v.Handler)
				}
				parts = append(parts, v.Handler+"="+strconv.FormatInt(v.LastSequence, 10))
			}
			if g := strings.Join(parts, " "); g != tc.want {
				t.Errorf("versions %q, want %q", g, tc.want)
			}
		})
	}

	if _, err := r.GetMany(ctx, make([]string, registry.MaxGetMany+1)); !errors.Is(err, registry.ErrInvalidRequest) {
		t.Errorf("GetMany over the bound: %v, want ErrInvalidRequest", err)
	}
	if _, err := r.Versions(ctx, agg, []string{""}); !errors.Is(err, registry.ErrInvalidRequest) {
		t.Errorf("Versions with an empty handler: %v, want ErrInvalidRequest", err)
	}
}
