package admin_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/esserver"
	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/registry"
)

// Pausing the instance worker's group through the admin API: the overview
// says the group is paused only once the pause has taken effect in its
// worker (sluice_worker_paused), that is once the command the worker was
// handling when the pause was set is done; a command accepted from then on
// is not claimed (no registry row, lag left on the topic) while the worker
// stays in the group; after resume it is processed exactly once and the
// lag drains. The overview shows the group's pause flag (who, why) and
// state throughout. 401 and 403 guard both actions, a dry run changes
// nothing, and every call is audited.
func TestAdminPauseResume(t *testing.T) {
	e := &env{t: t, Env: pipelinetest.Start(t, pipelinetest.Options{
		Env:       map[string]string{"WORKER_PAUSE_POLL_INTERVAL": "100ms"},
		Services:  []string{"api", "relay", "instance-worker"},
		APIRoutes: adminRoutes(t, withMetrics),
	})}
	group := "/admin/v1/consumers/" + e.Config.Kafka.Group(instanceworker.GroupName)
	reg, err := registry.New(registry.Config{Owner: "pause-test"}, registry.Deps{Pool: e.Pool})
	if err != nil {
		t.Fatal(err)
	}
	rows := func() (all, done int64) {
		t.Helper()
		stats, err := reg.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range stats {
			if s.Handler == instanceworker.HandlerName {
				return s.InProgress + s.Expired + s.Failed + s.Dead + s.Finished, s.Finished
			}
		}
		return 0, 0
	}
	lag := func() float64 {
		t.Helper()
		st, body, _ := e.call("GET", group, readToken, nil)
		if st != 200 {
			t.Fatalf("group lag: %d %v", st, body)
		}
		return body["total"].(float64)
	}
	// published is the number of records on the commands topic (the sum of
	// its end offsets), whether or not they were consumed.
	published := func() float64 {
		t.Helper()
		st, body, _ := e.call("GET", group, readToken, nil)
		if st != 200 {
			t.Fatalf("group lag: %d %v", st, body)
		}
		var n float64
		for _, p := range body["partitions"].([]any) {
			n += p.(map[string]any)["end"].(float64)
		}
		return n
	}
	// overviewPause is the group as the overview shows it: its pause
	// flag, the flag's details and the pause state of its workers.
	type groupPause struct {
		paused  any
		pause   map[string]any
		state   any
		workers map[string]any
	}
	overviewPause := func() groupPause {
		t.Helper()
		st, ov, _ := e.call("GET", "/admin/v1/overview", readToken, nil)
		if st != 200 {
			t.Fatalf("overview: %d %v", st, ov)
		}
		for _, g := range ov["groups"].([]any) {
			g := g.(map[string]any)
			if g["group"] == e.Config.Kafka.Group(instanceworker.GroupName) {
				if g["pause_error"] != nil {
					t.Fatalf("overview pause error: %v", g)
				}
				p, _ := g["pause"].(map[string]any)
				w, _ := g["pause_workers"].(map[string]any)
				return groupPause{g["paused"], p, g["pause_state"], w}
			}
		}
		t.Fatalf("overview without the instance worker's group: %v", ov["groups"])
		return groupPause{}
	}
	applied := func() float64 {
		t.Helper()
		return gathered(t, e.Deps.Metrics, "sluice_worker_records_total", map[string]string{"handler": instanceworker.HandlerName, "outcome": "applied"})
	}
	e.create("1")
	pipelinetest.WaitFor(t, 30*time.Second, "the first command processed", func() bool { _, d := rows(); return d == 1 && lag() == 0 })
	if g := overviewPause(); g.paused != false || g.state != "running" || g.workers["seen"] != float64(1) || g.workers["paused"] != float64(0) {
		t.Errorf("overview before any pause: paused %v, state %v, workers %v; want false, running, 1 seen 0 paused", g.paused, g.state, g.workers)
	}

	// Guards: no token 401, the read token 403 (audited); a dry run
	// changes nothing.
	for _, p := range []string{group + "/pause", group + "/resume"} {
		if st, _, _ := e.call("POST", p, "", map[string]any{}); st != http.StatusUnauthorized {
			t.Errorf("POST %s without a token: %d, want 401", p, st)
		}
		if st, body, _ := e.call("POST", p, readToken, map[string]any{}); st != http.StatusForbidden || body["code"] != "forbidden" {
			t.Errorf("POST %s with the read token: %d %v, want 403", p, st, body)
		}
	}
	st, body, _ := e.call("POST", group+"/pause", opToken, map[string]any{"dry_run": true, "reason": "look first"})
	if st != 200 || body["changed"] != true || body["dry_run"] != true || body["after"].(map[string]any)["paused"] != true {
		t.Fatalf("pause dry run: %d %v", st, body)
	}
	if st, body, _ := e.call("GET", group+"/pause", readToken, nil); st != 200 || body["paused"] != false {
		t.Fatalf("pause state after the dry run: %d %v, want not paused", st, body)
	}

	// A command in the worker's hands when the pause is set: its instance
	// document write is held for a few seconds (longer than the worker
	// takes to read the flag), and its registry row shows it was claimed.
	e.ES.InjectFault(esserver.Fault{Match: mentions("slow"), Delay: 3 * time.Second, Times: 1})
	e.create("slow")
	pipelinetest.WaitFor(t, 30*time.Second, "the slow command claimed", func() bool { a, _ := rows(); return a == 2 })

	// Pause.
	st, body, _ = e.call("POST", group+"/pause", opToken, map[string]any{"reason": "maintenance"})
	if st != 200 || body["changed"] != true || body["after"].(map[string]any)["paused"] != true {
		t.Fatalf("pause: %d %v", st, body)
	}
	if st, body, _ := e.call("POST", group+"/pause", opToken, map[string]any{}); st != 200 || body["changed"] != false {
		t.Errorf("second pause: %d %v, want unchanged", st, body)
	}
	if st, body, _ := e.call("GET", group+"/pause", readToken, nil); st != 200 || body["paused"] != true ||
		body["by"] != "admin:operator" || body["reason"] != "maintenance" {
		t.Fatalf("pause state: %d %v", st, body)
	}
	if g := overviewPause(); g.paused != true || g.pause["by"] != "admin:operator" || g.pause["reason"] != "maintenance" || g.pause["changed_at"] == nil {
		t.Errorf("overview after the pause: paused %v, pause %v", g.paused, g.pause)
	}
	// Positive evidence that the worker stopped, not a sleep: the overview
	// says paused once the worker's pause has taken effect, and then the
	// command it was handling is done.
	pipelinetest.WaitFor(t, 30*time.Second, "the pause taken effect", func() bool { return overviewPause().state == "paused" })
	if all, done := rows(); all != 2 || done != 2 {
		t.Fatalf("paused with the slow command unfinished: %d registry rows, %d done; want 2 done", all, done)
	}
	e.create("2")
	pipelinetest.WaitFor(t, 30*time.Second, "the second command on the topic", func() bool { return published() == 3 })
	if all, done := rows(); all != 2 || done != 2 {
		t.Fatalf("while paused: %d registry rows (%d done), want the first two commands' only", all, done)
	}
	if l := lag(); l != 1 {
		t.Fatalf("lag while paused: %v, want 1 (the second command)", l)
	}
	if g := overviewPause(); g.state != "paused" || g.workers["seen"] != float64(1) || g.workers["paused"] != float64(1) {
		t.Errorf("overview while paused: state %v, workers %v; want paused, 1 of 1", g.state, g.workers)
	}
	if st, body, _ := e.call("POST", group+"/reset", opToken, map[string]any{"to": "earliest", "dry_run": true}); st != 200 || len(body["members"].([]any)) != 1 {
		t.Errorf("the paused worker left its group: %d %v", st, body)
	}

	// Resume: processed once, the lag drains.
	st, body, _ = e.call("POST", group+"/resume", opToken, map[string]any{})
	if st != 200 || body["changed"] != true || body["after"].(map[string]any)["paused"] != false {
		t.Fatalf("resume: %d %v", st, body)
	}
	if g := overviewPause(); g.paused != false || g.state != "resuming" && g.state != "running" {
		t.Errorf("overview after the resume: paused %v, state %v; want false, resuming or running", g.paused, g.state)
	}
	pipelinetest.WaitFor(t, 30*time.Second, "the second command processed", func() bool { _, d := rows(); return d == 3 && lag() == 0 })
	if all, done := rows(); all != 3 || done != 3 {
		t.Errorf("after resume: %d registry rows (%d done), want 3 done", all, done)
	}
	if n := applied(); n != 3 {
		t.Errorf("the worker applied %v commands, want 3 (each once)", n)
	}
	pipelinetest.WaitFor(t, 30*time.Second, "the overview says running", func() bool { return overviewPause().state == "running" })

	recs := e.audit(t)
	checkAudit(t, recs, []auditWant{
		{"consumer.pause", "read", "forbidden", false, 1},
		{"consumer.resume", "read", "forbidden", false, 1},
		{"consumer.pause", "operator", "ok", true, 1},
		{"consumer.pause", "operator", "ok", false, 2},
		{"consumer.resume", "operator", "ok", false, 1},
	})
}

// mentions matches requests whose path or body contains s (the body is
// read and put back).
func mentions(s string) func(*http.Request) bool {
	return func(r *http.Request) bool {
		if strings.Contains(r.URL.Path, s) {
			return true
		}
		if r.Body == nil {
			return false
		}
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(b))
		return bytes.Contains(b, []byte(s))
	}
}

// gathered sums the series of metric name in g whose labels include want.
func gathered(t *testing.T, g prometheus.Gatherer, name string, want map[string]string) float64 {
	t.Helper()
	return testenv.MetricSum(t, g, name, want)
}

// withMetrics gives the admin API the pipeline's metrics registry, where
// the workers of this process report their pause.
func withMetrics(d pipeline.Deps, _ *admin.Config, deps *admin.Deps) { deps.Metrics = d.Metrics }
