package admin_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/registry"
)

// Pausing the instance worker's group through the admin API: a command
// accepted while it is paused is not claimed (no registry row, lag left on
// the topic) while the worker stays in the group; after resume it is
// processed exactly once and the lag drains. The overview shows the
// group's pause state (who, why) throughout. 401 and 403 guard both
// actions, a dry run changes nothing, and every call is audited.
func TestAdminPauseResume(t *testing.T) {
	e := &env{t: t, Env: pipelinetest.Start(t, pipelinetest.Options{
		Env:       map[string]string{"WORKER_PAUSE_POLL_INTERVAL": "100ms"},
		Services:  []string{"api", "relay", "instance-worker"},
		APIRoutes: adminRoutes(t),
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
	// overviewPause is the group's pause state as the overview shows it.
	overviewPause := func() (paused any, pause map[string]any) {
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
				return g["paused"], p
			}
		}
		t.Fatalf("overview without the instance worker's group: %v", ov["groups"])
		return nil, nil
	}
	e.create("1")
	pipelinetest.WaitFor(t, 30*time.Second, "the first command processed", func() bool { _, d := rows(); return d == 1 && lag() == 0 })
	if paused, _ := overviewPause(); paused != false {
		t.Errorf("overview paused before any pause: %v, want false", paused)
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
	if paused, p := overviewPause(); paused != true || p["by"] != "admin:operator" || p["reason"] != "maintenance" || p["changed_at"] == nil {
		t.Errorf("overview after the pause: paused %v, pause %v", paused, p)
	}
	time.Sleep(1500 * time.Millisecond) // > the poll interval and one poll's wait: the worker has seen it
	e.create("2")
	pipelinetest.WaitFor(t, 30*time.Second, "the second command on the topic", func() bool { return lag() >= 1 })
	time.Sleep(3 * time.Second)
	if all, done := rows(); all != 1 || done != 1 {
		t.Fatalf("while paused: %d registry rows (%d done), want the first command's only", all, done)
	}
	if l := lag(); l < 1 {
		t.Fatalf("lag while paused: %v, want at least 1", l)
	}
	if st, body, _ := e.call("POST", group+"/reset", opToken, map[string]any{"to": "earliest", "dry_run": true}); st != 200 || len(body["members"].([]any)) != 1 {
		t.Errorf("the paused worker left its group: %d %v", st, body)
	}

	// Resume: processed once, the lag drains.
	st, body, _ = e.call("POST", group+"/resume", opToken, map[string]any{})
	if st != 200 || body["changed"] != true || body["after"].(map[string]any)["paused"] != false {
		t.Fatalf("resume: %d %v", st, body)
	}
	if paused, _ := overviewPause(); paused != false {
		t.Errorf("overview after the resume: paused %v, want false", paused)
	}
	pipelinetest.WaitFor(t, 30*time.Second, "the second command processed", func() bool { _, d := rows(); return d == 2 && lag() == 0 })
	time.Sleep(time.Second)
	if all, done := rows(); all != 2 || done != 2 {
		t.Errorf("after resume: %d registry rows (%d done), want 2 done", all, done)
	}

	recs := e.audit(t)
	checkAudit(t, recs, []auditWant{
		{"consumer.pause", "read", "forbidden", false, 1},
		{"consumer.resume", "read", "forbidden", false, 1},
		{"consumer.pause", "operator", "ok", true, 1},
		{"consumer.pause", "operator", "ok", false, 2},
		{"consumer.resume", "operator", "ok", false, 1},
	})
}

// adminRoutes mounts the admin API on the pipeline's API.
func adminRoutes(t *testing.T) func(d pipeline.Deps) map[string]http.Handler {
	return func(d pipeline.Deps) map[string]http.Handler {
		reg, err := registry.New(registry.Config{Owner: "admin-test"}, registry.Deps{Pool: d.Pool})
		if err != nil {
			t.Fatal(err)
		}
		es, err := readmodel.NewClient(d.Config.Elasticsearch)
		if err != nil {
			t.Fatal(err)
		}
		srv, err := admin.New(admin.Config{Process: d.Config, OperatorToken: opToken, ReadToken: readToken}, admin.Deps{Pool: d.Pool, Store: d.Store, Bucket: d.Bucket, Registry: reg, ES: es, Logger: d.Logger})
		if err != nil {
			t.Fatal(err)
		}
		return map[string]http.Handler{admin.Prefix: srv}
	}
}
