package instanceworker_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/crashpoint"
	"github.com/sluicehq/sluice/worker"
)

// TestCrashPoints crashes the worker process (exit 42) at every
// instance-worker crash point of docs/worker-runtime.md#crash-points, restarts it, and checks the end
// state: exactly one domain event per applied command, document version =
// last applied slot, every registry row done, offsets committed, empty DLQ.
func TestCrashPoints(t *testing.T) {
	points := []string{
		worker.PointAfterClaim, instanceworker.PointBeforeAppend, instanceworker.PointAfterAppend,
		instanceworker.PointBeforeESWrite, instanceworker.PointAfterESWrite, worker.PointBeforeMarkDone,
		worker.PointBeforeCommit,
	}
	for _, point := range points {
		t.Run(point, func(t *testing.T) {
			e := newEnv(t, 2)
			var all []cmd
			for _, id := range []string{"x", "y"} {
				all = append(all,
					e.appendCmd(instanceworker.CreateInstance, "crash", "things", id, create("crash", "things", strp(id), map[string]any{"v": 0})),
					e.appendCmd(instanceworker.UpdateInstance, "crash", "things", id, map[string]any{"data": map[string]any{"v": 1}}),
					e.appendCmd(instanceworker.UpdateInstance, "crash", "things", id, map[string]any{"data": map[string]any{"w": 2}}))
			}
			rejected := e.appendCmd(instanceworker.DeleteInstance, "crash", "things", "ghost", map[string]any{})
			all = append(all, rejected)
			e.publish(all...)

			crash := map[string]string{"SLUICE_CRASH_POINT": instanceworker.HandlerName + ":" + point, "SLUICE_CRASH_MARKER_DIR": t.TempDir()}
			if code := e.startProcess(crash).ExitCode(t, 60*time.Second); code != crashpoint.ExitCode {
				t.Fatalf("first run exited %d, want %d", code, crashpoint.ExitCode)
			}
			p := e.startProcess(crash) // the marker makes it run through
			testenv.WaitFor(t, 60*time.Second, "all commands done", func() bool { return e.allDone(all...) })
			testenv.WaitFor(t, 30*time.Second, "offsets committed", func() bool { c, end := e.committed(); return c == end })
			if code := p.Term(t); code != 0 {
				t.Errorf("SIGTERM exit code %d, want 0", code)
			}

			for id, st := range e.statuses(all...) {
				if st != claim.StatusDone {
					t.Errorf("command %s: status %s", id, st)
				}
			}
			if o := e.outcome(rejected); o != claim.Rejected(instanceworker.ReasonMissing) {
				t.Errorf("rejected command outcome %+v", o)
			}
			want := map[string][]string{"crash:things:x": {"1×1", "2×1", "3×1"}, "crash:things:y": {"1×1", "2×1", "3×1"}}
			if got := e.domainEvents(); !reflect.DeepEqual(got, want) {
				t.Errorf("domain events %v, want %v", got, want)
			}
			for _, id := range []string{"x", "y"} {
				if v, src, _ := e.doc("crash", "things", id); v != 3 || src["v"] != float64(1) || src["w"] != float64(2) {
					t.Errorf("%s: version %d doc %v", id, v, src)
				}
			}
			if n := len(e.dlqRecords()); n != 0 {
				t.Errorf("DLQ holds %d records", n)
			}
		})
	}
}
