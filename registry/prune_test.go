package registry_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/shared/claim"
)

// TestPruneSafely: a prune below the lease timeout or the lookback is
// refused and deletes nothing; an allowed prune deletes old rows of other
// handlers but keeps the rows of the handlers users read (the instance
// worker's command statuses).
func TestPruneSafely(t *testing.T) {
	ctx := context.Background()
	_, pool := testenv.NewMigratedDatabase(t)
	r := newRegistry(t, pool, "prune-test", registry.Config{LeaseTimeout: time.Hour})
	status, other := uuid.NewString(), uuid.NewString()
	claimDone(t, r, req("instanceworker", status, "db:c:1", 1, claim.SkipStale))
	claimDone(t, r, req("projection-history", other, "db:c:1", 1, claim.SkipStale))
	if _, err := pool.Exec(ctx, `UPDATE sluice.processed_events SET started_at = now() - interval '3 hours', processed_at = now() - interval '3 hours'`); err != nil {
		t.Fatal(err)
	}
	keep := []string{"instanceworker"}
	cases := []struct {
		name       string
		req        registry.PruneRequest
		wantUnsafe bool
	}{
		{"below the lease timeout", registry.PruneRequest{OlderThan: 30 * time.Minute, Keep: keep}, true},
		{"below the lookback", registry.PruneRequest{OlderThan: 2 * time.Hour, Lookback: 4 * time.Hour, Keep: keep}, true},
		{"allowed", registry.PruneRequest{OlderThan: 2 * time.Hour, Lookback: 10 * time.Minute, Keep: keep}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := r.PlanPrune(ctx, tc.req)
			if tc.wantUnsafe {
				if !errors.Is(err, registry.ErrUnsafePrune) {
					t.Fatalf("plan: want ErrUnsafePrune, got %v", err)
				}
				if n, err := r.PruneSafely(ctx, tc.req); !errors.Is(err, registry.ErrUnsafePrune) || n != 0 {
					t.Fatalf("prune: want ErrUnsafePrune and 0 rows, got %d %v", n, err)
				}
				return
			}
			if err != nil || plan.Delete != 1 || plan.KeptRows != 1 {
				t.Fatalf("plan: %+v %v; want 1 to delete, 1 kept", plan, err)
			}
			n, err := r.PruneSafely(ctx, tc.req)
			if err != nil || n != 1 {
				t.Fatalf("prune: %d %v, want 1", n, err)
			}
		})
	}
	if rows, err := r.Get(ctx, status); err != nil || len(rows) != 1 {
		t.Fatalf("the instance worker's row (a command status) must stay: %d rows, %v", len(rows), err)
	}
	if rows, err := r.Get(ctx, other); err != nil || len(rows) != 0 {
		t.Fatalf("the projection's old row must be pruned: %d rows, %v", len(rows), err)
	}
}

// TestAutoPrune: the automatic prune deletes, on its first pass, only the
// old done rows of the handlers it is given (a worker prunes its own), and
// reports each pass; an interval of 0 is refused.
func TestAutoPrune(t *testing.T) {
	ctx := context.Background()
	_, pool := testenv.NewMigratedDatabase(t)
	r := newRegistry(t, pool, "autoprune-test", registry.Config{LeaseTimeout: time.Hour})
	mine, theirs, young := uuid.NewString(), uuid.NewString(), uuid.NewString()
	claimDone(t, r, req("projection:p:v1", mine, "db:c:1", 1, claim.SkipStale))
	claimDone(t, r, req("projection:q:v1", theirs, "db:c:1", 1, claim.SkipStale))
	testenv.MustExec(t, pool, `UPDATE sluice.processed_events SET started_at = now() - interval '3 hours', processed_at = now() - interval '3 hours'`)
	claimDone(t, r, req("projection:p:v1", young, "db:c:2", 1, claim.SkipStale))
	cases := []struct {
		name     string
		interval time.Duration
		req      registry.PruneRequest
		wantErr  error
		wantRows int64
	}{
		{"an interval of 0 is refused", 0, registry.PruneRequest{OlderThan: 2 * time.Hour}, registry.ErrInvalidRequest, 0},
		{"below the lease timeout deletes nothing", time.Hour, registry.PruneRequest{OlderThan: time.Minute, Only: []string{"projection:p:v1"}}, registry.ErrUnsafePrune, 0},
		{"its own old rows only", time.Hour, registry.PruneRequest{OlderThan: 2 * time.Hour, Only: []string{"projection:p:v1"}}, nil, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pctx, cancel := context.WithCancel(ctx)
			defer cancel()
			type pass struct {
				n   int64
				err error
			}
			passes := make(chan pass, 1)
			done := make(chan error, 1)
			go func() {
				done <- r.AutoPrune(pctx, tc.interval, func() registry.PruneRequest { return tc.req }, func(n int64, err error) {
					select {
					case passes <- pass{n, err}:
					default:
					}
				})
			}()
			if tc.interval <= 0 {
				if err := <-done; !errors.Is(err, tc.wantErr) {
					t.Fatalf("AutoPrune: %v, want %v", err, tc.wantErr)
				}
				return
			}
			p := <-passes // the first pass runs at once
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("AutoPrune after cancel: %v", err)
			}
			if !errors.Is(p.err, tc.wantErr) || p.n != tc.wantRows {
				t.Fatalf("first pass: %d rows, %v; want %d, %v", p.n, p.err, tc.wantRows, tc.wantErr)
			}
		})
	}
	for _, tc := range []struct {
		id   string
		want int
	}{{mine, 0}, {theirs, 1}, {young, 1}} {
		if rows, err := r.Get(ctx, tc.id); err != nil || len(rows) != tc.want {
			t.Fatalf("event %s: %d rows, %v; want %d", tc.id, len(rows), err, tc.want)
		}
	}
}

// TestPrunePlanJSON: a plan's durations are numbers of seconds in its
// JSON (the --json summary of sluice registry prune), never nanoseconds.
func TestPrunePlanJSON(t *testing.T) {
	cases := []struct {
		name string
		plan registry.PrunePlan
		want string
	}{
		{"whole seconds", registry.PrunePlan{OlderThan: 72 * time.Hour, Floor: 15 * time.Minute, Delete: 3, KeptRows: 1},
			`{"older_than_seconds":259200,"floor_seconds":900,"counts":[],"delete":3,"kept_rows":1}`},
		{"a fraction", registry.PrunePlan{OlderThan: 1500 * time.Millisecond, Counts: []registry.PruneCount{{Handler: "h", Status: "done", Rows: 2}}},
			`{"older_than_seconds":1.5,"floor_seconds":0,"counts":[{"handler":"h","status":"done","rows":2}],"delete":0,"kept_rows":0}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.plan)
			if err != nil || string(b) != tc.want {
				t.Errorf("got %s %v\nwant %s", b, err, tc.want)
			}
		})
	}
}
