package projectionworker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/registry/registrytest"
	"github.com/sluicehq/sluice/shared/claim"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/shared/crashpoint"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/worker"
)

// TestCrashPoints crashes the worker process (exit 42) at every projection
// crash point of docs/worker-runtime.md#crash-points, restarts it, and checks the end state: every
// instance document at its last version, exactly one history document per
// event, offsets committed, empty DLQ.
func TestCrashPoints(t *testing.T) {
	points := []string{worker.PointAfterClaim, projectionworker.PointBeforeESWrite, projectionworker.PointAfterESWrite,
		worker.PointBeforeMarkDone, worker.PointBeforeCommit}
	for _, point := range points {
		t.Run(point, func(t *testing.T) {
			e := newEnv(t, 2)
			var evs []envelope.Envelope
			for i := range 4 {
				id := fmt.Sprintf("i%d", i)
				evs = append(evs, e.event(projectionworker.InstanceCreated, "crash", "things", id, 1, map[string]any{"v": 1}),
					e.event(projectionworker.InstanceUpdated, "crash", "things", id, 2, map[string]any{"v": 2}),
					e.event(projectionworker.InstanceUpdated, "crash", "things", id, 3, map[string]any{"v": 3}))
			}
			evs = append(evs, e.event(projectionworker.InstanceDeleted, "crash", "things", "i0", 4, nil))
			e.publish(evs...)
			crash := map[string]string{"SLUICE_CRASH_POINT": projectionworker.CrashWorker + ":" + point, "SLUICE_CRASH_MARKER_DIR": t.TempDir()}
			if code := e.startProcess("instances,history", crash).ExitCode(t, 60*time.Second); code != crashpoint.ExitCode {
				t.Fatalf("first run exited %d, want %d", code, crashpoint.ExitCode)
			}
			p := e.startProcess("instances,history", crash) // the marker makes it run through
			for _, g := range []string{"projection-instances-v1", "projection-history-v1"} {
				testenv.WaitFor(t, 90*time.Second, g+" committed", e.caughtUp(g))
			}
			if code := p.Term(t); code != 0 {
				t.Errorf("SIGTERM exit code %d, want 0", code)
			}
			for i := range 4 {
				id := fmt.Sprintf("i%d", i)
				want, deleted := int64(3), false
				if i == 0 {
					want, deleted = 4, true
				}
				if d := e.instance("crash", "things", id, 1); d.Version != want || d.Source["deleted"] != deleted {
					t.Errorf("%s: version %d source %v", id, d.Version, d.Source)
				}
			}
			hist := e.search("sluice_crash_history_v1", map[string]any{"match_all": map[string]any{}})
			if len(hist) != len(evs) {
				t.Errorf("history holds %d documents for %d events", len(hist), len(evs))
			}
			for _, ev := range evs {
				if d := e.get("sluice_crash_history_v1", ev.EventID); !d.Found || d.Version != 1 {
					t.Errorf("history of %s: found %v version %d", ev.EventID, d.Found, d.Version)
				}
			}
			all, err := registrytest.Rows(ctxT(t), e.pool, "")
			if err != nil {
				t.Fatal(err)
			}
			rows := 0
			for _, r := range all {
				if r.Status != claim.StatusDone && r.Status != claim.StatusSkippedStale {
					rows++
				}
			}
			if rows != 0 {
				t.Errorf("%d registry rows not finished", rows)
			}
			if n := len(e.dlqRecords()); n != 0 {
				t.Errorf("DLQ holds %d records", n)
			}
		})
	}
}
