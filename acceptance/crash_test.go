package acceptance

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/shared/crashpoint"
	"github.com/sluicehq/sluice/worker"
)

// crashCase is one crash point of a worker.
type crashCase struct {
	point string
	// redone: the crash comes before mark_done, so the crashed event is
	// claimed again (attempt 2) after the restart. Otherwise (before_commit)
	// the events of the crashed commit are done: their redelivery finds the
	// rows done and does nothing (counted as duplicates by the restarted
	// worker); events of other rounds still in flight at the crash (rounds
	// overlap, docs/worker-runtime.md) may be claimed again (attempt 2).
	redone bool
}

// TestInstanceWorkerCrashPointsReplaySafe is scenario 2: the instance
// worker process exits (code 42) at each of its crash points, the
// supervisor restarts it, and the end state is exactly that of a run
// without a crash: one domain event per applied command, the rejected
// command rejected once, instance documents at their last slot, each
// document version written once, empty DLQs, sluice verify clean.
func TestInstanceWorkerCrashPointsReplaySafe(t *testing.T) {
	t.Parallel()
	cases := []crashCase{
		{worker.PointAfterClaim, true},
		{instanceworker.PointBeforeAppend, true},
		{instanceworker.PointAfterAppend, true},
		{instanceworker.PointBeforeESWrite, true},
		{instanceworker.PointAfterESWrite, true},
		{worker.PointBeforeMarkDone, true},
		{worker.PointBeforeCommit, false},
	}
	p := newPipeline(t, setup{})
	p.startDefault()
	runCrashCases(t, p, p.service("instance-worker"), instanceworker.HandlerName, instanceHandler, cases)
}

// TestProjectionWorkerCrashPointsReplaySafe is scenario 3: the same for
// the projection worker (history projection) at each of its crash points:
// one history document per domain event, written once.
func TestProjectionWorkerCrashPointsReplaySafe(t *testing.T) {
	t.Parallel()
	cases := []crashCase{
		{worker.PointAfterClaim, true},
		{projectionworker.PointBeforeESWrite, true},
		{projectionworker.PointAfterESWrite, true},
		{worker.PointBeforeMarkDone, true},
		{worker.PointBeforeCommit, false},
	}
	p := newPipeline(t, setup{})
	p.startDefault()
	runCrashCases(t, p, p.service("projection-worker"), projectionworker.CrashWorker, historyHandler, cases)
}

func runCrashCases(t *testing.T, p *pipeline, svc *service, crashWorker, handler string, cases []crashCase) {
	for _, tc := range cases {
		t.Run(tc.point, func(t *testing.T) {
			svc.restart(map[string]string{"SLUICE_CRASH_POINT": crashWorker + ":" + tc.point, "SLUICE_CRASH_MARKER_DIR": t.TempDir()})
			crashes, starts := svc.exitCount(crashpoint.ExitCode), svc.startCount()
			exp := expectation{db: "crash", class: tc.point}
			for _, id := range []string{"x", "y/1", "Z"} {
				p.create(exp.db, exp.class, id, map[string]any{"v": 0, "id": id})
				p.patch(exp.db, exp.class, id, map[string]any{"v": 1})
				p.patch(exp.db, exp.class, id, map[string]any{"w": map[string]any{"deep": 2}})
				exp.instances++
				exp.applied += 3
			}
			p.del(exp.db, exp.class, "Z")
			exp.applied++
			p.del(exp.db, exp.class, "ghost") // rejected: no such instance
			exp.rejected++
			waitFor(t, 60*time.Second, "the crash at "+tc.point, func() bool { return svc.exitCount(crashpoint.ExitCode) == crashes+1 })
			p.waitDrained(90 * time.Second)
			if svc.startCount() != starts+1 {
				t.Errorf("%s started %d times after the crash, want 1 restart", svc.name, svc.startCount()-starts)
			}
			p.checkEndState(exp)
			maxAttempts := 0
			for _, r := range p.registry(handler, exp.db+":"+exp.class+":") {
				maxAttempts = max(maxAttempts, r.Attempts)
			}
			if tc.redone && maxAttempts != 2 {
				t.Errorf("%s: highest attempt count %d, want 2", handler, maxAttempts)
			}
			if !tc.redone {
				if maxAttempts < 1 || maxAttempts > 2 {
					t.Errorf("%s: highest attempt count %d, want 1 or 2", handler, maxAttempts)
				}
				if n := svc.metric("sluice_worker_records_total", `outcome="duplicate"`); n < 1 {
					t.Errorf("%s: the restarted worker counted %v duplicate records, want ≥ 1 (the done records of the crashed commit)", handler, n)
				}
			}
		})
	}
}
