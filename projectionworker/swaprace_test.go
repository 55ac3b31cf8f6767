package projectionworker_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/elastic/go-elasticsearch/v8"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/worker"
)

// aliasTarget returns the indices alias points at.
func (e *env) aliasTarget(alias string) []string {
	e.t.Helper()
	res, err := e.esc.Indices.GetAlias(e.esc.Indices.GetAlias.WithName(alias))
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode == http.StatusNotFound {
		return nil
	}
	var body map[string]json.RawMessage
	b, _ := io.ReadAll(res.Body)
	if err := json.Unmarshal(b, &body); err != nil {
		e.t.Fatalf("alias %s: %v: %s", alias, err, b)
	}
	var out []string
	for ix := range body {
		out = append(out, ix)
	}
	return out
}

func (e *env) indexExists(index string) bool {
	e.t.Helper()
	res, err := e.esc.Indices.Exists([]string{index})
	if err != nil {
		e.t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode == http.StatusOK
}

// TestRebuildSwapRace (issue 21.6): a scope whose first event arrives while
// a rebuild swaps the aliases — after the swap listed the indices, so its
// new-version index is not in the swap, and the old live worker gave it
// aliases on the old version — ends with its aliases on the new version
// like every other scope.
func TestRebuildSwapRace(t *testing.T) {
	e := newEnv(t, 2)
	e.publish(e.event(projectionworker.InstanceCreated, "early", "things", "a", 1, map[string]any{"v": 1}))
	svc, _ := e.startInProcess(nil, nil, spec("instances"))
	testenv.WaitFor(t, 30*time.Second, "v1 caught up", e.caughtUp("projection-instances-v1"))

	// The rebuild talks to Elasticsearch through a hook that, at its first
	// _aliases request (the swap, after the listing), lets the new scope
	// "late" appear: both workers create its index before the swap goes on.
	var once sync.Once
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/_aliases") {
			once.Do(func() {
				e.publish(e.event(projectionworker.InstanceCreated, "late", "things", "b", 1, map[string]any{"v": 1}))
				testenv.WaitFor(t, 30*time.Second, "late indices of v1 and v2", func() bool {
					return e.indexExists("sluice_late_instances_v1") && e.indexExists("sluice_late_instances_v2")
				})
			})
		}
		e.es.ServeHTTP(w, r)
	}))
	t.Cleanup(hook.Close)
	es, err := elasticsearch.NewClient(elasticsearch.Config{Addresses: []string{hook.URL}, DisableRetry: true})
	if err != nil {
		t.Fatal(err)
	}
	d, closePool := e.deps(nil)
	defer closePool()
	d.ES = es
	if _, err := projectionworker.Rebuild(ctxT(t), projectionworker.SwitchOptions{Config: e.config(nil).ProjectionWorker(), Deps: d, Opts: e.opts(),
		Projection: projectionworker.Instances{}, Version: 2, Settle: time.Second}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "the live worker switched to v2", func() bool { return svc.Version("instances") == 2 })
	e.publish(e.event(projectionworker.InstanceUpdated, "late", "things", "b", 2, map[string]any{"v": 2}))
	testenv.WaitFor(t, 30*time.Second, "late's update in v2", func() bool { return e.instance("late", "things", "b", 2).Version == 2 })
	for _, scope := range []string{"early", "late"} {
		for _, alias := range []string{"sluice_" + scope + "_instances", "sluice_" + scope + "_instances_write"} {
			if got := e.aliasTarget(alias); len(got) != 1 || got[0] != "sluice_"+scope+"_instances_v2" {
				t.Errorf("%s points at %v, want v2", alias, got)
			}
		}
	}
	if got := e.search("sluice_late_instances", map[string]any{"term": map[string]any{"v": 2}}); len(got) != 1 {
		t.Errorf("late read through its alias: %v", got)
	}
}

// TestLiveWorkerClaimsAliases: a scope whose aliases an old live worker
// created on version 1 after a rebuild's last swap is claimed by the
// worker of the live version 2 (moved atomically to its index); a worker
// of a lower version never takes them from a higher one.
func TestLiveWorkerClaimsAliases(t *testing.T) {
	e := newEnv(t, 1)
	worker := func(v int) *projectionworker.Worker {
		w, err := projectionworker.NewWorker(e.config(nil).ProjectionWorker(), projectionworker.Deps{ES: e.esc},
			projectionworker.Spec{Projection: projectionworker.Instances{}, Version: v, Mode: projectionworker.Live},
			projectionworker.NewBulker(e.esc, projectionworker.BulkOptions{}))
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	handle := func(w *projectionworker.Worker, seq int64) {
		t.Helper()
		ev := e.event(projectionworker.InstanceCreated, "claim", "things", "a", seq, map[string]any{"v": seq})
		if _, err := w.Handle(ctxT(t), recordOf(ev)); err != nil {
			t.Fatal(err)
		}
	}
	want := func(v string) {
		t.Helper()
		for _, alias := range []string{"sluice_claim_instances", "sluice_claim_instances_write"} {
			if got := e.aliasTarget(alias); len(got) != 1 || got[0] != "sluice_claim_instances_"+v {
				t.Errorf("%s points at %v, want %s", alias, got, v)
			}
		}
	}
	handle(worker(1), 1) // the old live worker: index and aliases on v1
	want("v1")
	handle(worker(2), 2) // the live worker of v2 claims them
	want("v2")
	handle(worker(1), 3) // v1 writes its index but leaves v2's aliases alone
	want("v2")
}

func recordOf(ev envelope.Envelope) *worker.Record {
	return &worker.Record{Envelope: ev, Attempt: 1}
}
