package instanceworker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/shared/failure"
)

// TestPostgresOutage cuts Postgres mid-run: the worker pauses (readiness
// red, no attempt spent, no commits, no DLQ) and completes without
// duplicates once it is back. Once the whole of Postgres (registry and
// store on one server), and once the event store's server alone (the
// store role on a database of its own, EVENT_STORE_DATABASE_URL; the
// registry answers): the worker then pauses on its store calls
// (docs/failures.md, docs/scale-out.md#when-one-server-is-down).
func TestPostgresOutage(t *testing.T) {
	for _, tc := range []struct {
		name string
		vr   string // the variable pointed at the proxy
		dep  string // the dependency whose outage probes are counted ("": any)
	}{
		{"all of Postgres", "DATABASE_URL", ""},
		{"the store's server alone", "EVENT_STORE_DATABASE_URL", failure.Postgres},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 2)
			proxy := testenv.NewPGProxy(t, e.url)
			first := []cmd{e.appendCmd(instanceworker.CreateInstance, "out", "things", "a", create("out", "things", strp("a"), map[string]any{"v": 0}))}
			e.publish(first...)
			svc, _ := e.startInProcess(map[string]string{tc.vr: proxy.URL()})
			testenv.WaitFor(t, 30*time.Second, "first command done", func() bool { return e.allDone(first...) })
			testenv.WaitFor(t, 10*time.Second, "first commit", func() bool { c, end := e.committed(); return c == end })

			var second []cmd
			for i := range 3 {
				second = append(second, e.appendCmd(instanceworker.UpdateInstance, "out", "things", "a", map[string]any{"data": map[string]any{"v": i + 1}}))
				id := fmt.Sprintf("n%d", i)
				second = append(second, e.appendCmd(instanceworker.CreateInstance, "out", "things", id, create("out", "things", strp(id), map[string]any{"v": 0})))
			}
			committedBefore, _ := e.committed()
			proxy.Stop()
			e.publish(second...)
			testenv.WaitFor(t, 30*time.Second, "outage detected", svc.Consumer().InOutage)
			// Positive evidence before the negative assertions: the worker
			// probed the outage again more times than the attempt budget
			// (each probe would have been the chance to commit or
			// dead-letter wrongly).
			from := e.probes(tc.dep)
			testenv.WaitFor(t, 60*time.Second, "more probes of the outage than the attempt budget", func() bool { return e.probes(tc.dep) >= from+e.maxAttempts() })
			if c, _ := e.committed(); c != committedBefore {
				t.Errorf("committed %d during the outage, before %d", c, committedBefore)
			}
			if n := len(e.dlqRecords()); n != 0 {
				t.Errorf("DLQ holds %d records during the outage", n)
			}

			proxy.Start()
			testenv.WaitFor(t, 60*time.Second, "all done after restore", func() bool { return e.allDone(append(first, second...)...) })
			testenv.WaitFor(t, 20*time.Second, "committed after restore", func() bool { c, end := e.committed(); return c == end })
			if svc.Consumer().InOutage() {
				t.Error("still in outage after restore")
			}
			ev := e.domainEvents()
			if got := fmt.Sprint(ev["out:things:a"]); got != "[1×1 2×1 3×1 4×1]" {
				t.Errorf("out:things:a domain events %s", got)
			}
			for i := range 3 {
				if got := fmt.Sprint(ev[fmt.Sprintf("out:things:n%d", i)]); got != "[1×1]" {
					t.Errorf("n%d domain events %s", i, got)
				}
			}
			if v, src, _ := e.doc("out", "things", "a"); v != 4 || src["v"] != float64(3) {
				t.Errorf("a: version %d doc %v", v, src)
			}
			if n := len(e.dlqRecords()); n != 0 {
				t.Errorf("DLQ holds %d records", n)
			}
		})
	}
}
