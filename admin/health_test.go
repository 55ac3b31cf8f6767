package admin_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/projectionworker"
)

// The health strip, the flow and the groups of a deployment: this
// process's checks and series, a service in another process read from its
// health server (not ready, with its reason), every dependency probed,
// and a configured projection that nothing runs listed as not running
// instead of with a growing lag.
func TestHealthFlowAndGroups(t *testing.T) {
	remote := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/readyz":
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"status":"failing","checks":{"relay":"checkpoint frozen for 2m while the head grew","postgres":"ok"}}`)
		case "/metrics":
			_, _ = io.WriteString(w, "# TYPE sluice_relay_published_total counter\nsluice_relay_published_total{topic=\"x\"} 1000\n"+
				"# TYPE sluice_worker_paused gauge\nsluice_worker_paused{handler=\"projection:instances:v1\"} 1\n")
		default:
			http.NotFound(w, r)
		}
	}))
	defer remote.Close()
	e := &env{t: t, Env: pipelinetest.Start(t, pipelinetest.Options{
		APIRoutes: adminRoutes(t, func(d pipeline.Deps, cfg *admin.Config, deps *admin.Deps) {
			cfg.Services = []admin.Service{{Name: "relay-2", URL: remote.URL}}
			cfg.Workers = []admin.Worker{
				{Handler: instanceworker.HandlerName, Group: d.Config.Kafka.Group(instanceworker.GroupName)},
				{Handler: projectionworker.HandlerName("instances", 1), Group: d.Config.Kafka.Group(projectionworker.GroupName("instances", 1))},
			}
			deps.Health, deps.Metrics = d.Health, d.Metrics
		}),
	})}
	e.create("h-1")

	st, h, _ := e.call("GET", "/admin/v1/health", readToken, nil)
	if st != http.StatusOK {
		t.Fatalf("health: %d %v", st, h)
	}
	services := map[string]map[string]any{}
	for _, s := range h["services"].([]any) {
		services[s.(map[string]any)["name"].(string)] = s.(map[string]any)
	}
	if s := services["api"]; s == nil || s["ready"] != true || s["source"] != "this process" {
		t.Errorf("api: %v", s)
	}
	if s := services["relay-2"]; s == nil || s["ready"] != false || !strings.Contains(s["reason"].(string), "relay: checkpoint frozen") || s["source"] != remote.URL {
		t.Errorf("the remote relay: %v", s)
	}
	deps := map[string]bool{}
	for _, d := range h["dependencies"].([]any) {
		dm := d.(map[string]any)
		deps[dm["name"].(string)] = dm["ready"] == true
	}
	for _, n := range []string{"Postgres", "Kafka", "Elasticsearch", "Object storage"} {
		if !deps[n] {
			t.Errorf("dependency %s not ready: %v", n, h["dependencies"])
		}
	}
	// The pause state from the workers' gauges: the instance worker of
	// this process runs; the remote process reports a pause of the
	// projection in effect while its flag is clear (it has not read the
	// resume yet).
	if gs := h["groups"].([]any); len(gs) != 2 {
		t.Errorf("health groups: %v", gs)
	} else {
		for i, want := range []struct {
			state         string
			seen, stopped float64
		}{{"running", 1, 0}, {"resuming", 1, 1}} {
			g := gs[i].(map[string]any)
			w, _ := g["pause_workers"].(map[string]any)
			if g["paused"] != false || g["pause_state"] != want.state || w["seen"] != want.seen || w["paused"] != want.stopped {
				t.Errorf("health group %v: paused %v, state %v, workers %v; want false, %s, %v seen %v paused", g["group"], g["paused"], g["pause_state"], w, want.state, want.seen, want.stopped)
			}
		}
	}

	st, f, _ := e.call("GET", "/admin/v1/flow", readToken, nil)
	if st != http.StatusOK {
		t.Fatalf("flow: %d %v", st, f)
	}
	c := f["counters"].(map[string]any)
	if c["published"].(float64) < 1000 || c["appended"].(float64) < 1 {
		t.Errorf("flow counters (the remote's 1000 published and this process's appends): %v", c)
	}
	if src := f["sources"].([]any); len(src) != 2 {
		t.Errorf("flow sources: %v", src)
	}

	st, ov, _ := e.call("GET", "/admin/v1/overview", readToken, nil)
	if st != http.StatusOK {
		t.Fatalf("overview: %d %v", st, ov)
	}
	found := false
	for _, g := range ov["groups"].([]any) {
		gm := g.(map[string]any)
		if strings.HasSuffix(gm["group"].(string), "projection-instances-v1") {
			found = true
			if gm["status"] != "not running" || gm["lag"] != 0.0 || gm["configured"] != true || gm["note"] == nil {
				t.Errorf("a configured projection nothing runs: %v", gm)
			}
		}
	}
	if !found {
		t.Errorf("the configured instances projection's group is not listed: %v", ov["groups"])
	}
}
