package instanceworker_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/failure"
	"github.com/sluicehq/sluice/shared/observability"
	"github.com/sluicehq/sluice/worker"
)

// esFault is one kind of Elasticsearch outage (testenv.ESFaults).
type esFault struct {
	testenv.ESFault
}

// start begins the outage between the workers and e's esserver through g
// (testenv.NewGate: a closed port, a frozen server).
func (f esFault) start(e *env, g *testenv.Gate) (end func()) { return f.Start(e.es, g) }

func esFaults() []esFault {
	var out []esFault
	for _, f := range testenv.ESFaults() {
		// "429 items": only the document writes fail, after the domain
		// events are appended: still an outage, neither DEAD nor a stale
		// read model.
		out = append(out, esFault{f})
	}
	return out
}

// newWorker builds a Worker on the env's store and registry with an
// Elasticsearch client to url (request deadline 300 ms).
func (e *env) newWorker(url string) *instanceworker.Worker {
	e.t.Helper()
	reg, err := registry.New(registry.Config{Owner: "direct"}, registry.Deps{Pool: e.pool})
	if err != nil {
		e.t.Fatal(err)
	}
	es, err := readmodel.NewClient(readmodel.Config{URLs: []string{url}, RequestTimeout: 300 * time.Millisecond})
	if err != nil {
		e.t.Fatal(err)
	}
	w, err := instanceworker.NewWorker(instanceworker.Config{ESRetry: readmodel.Retry{Tries: 1, Base: time.Millisecond, Cap: 5 * time.Millisecond}},
		instanceworker.Deps{Store: e.store, ES: es}, reg)
	if err != nil {
		e.t.Fatal(err)
	}
	return w
}

// TestESOutageIsAnOutage calls the handler (one command and a batch)
// during each kind of Elasticsearch outage: the error is of class outage
// (the runtime pauses; it is never a dead letter), readiness is red; once
// Elasticsearch is back, readiness turns green by itself (for refused bulk
// items: at the first accepted write) and the same commands are applied.
func TestESOutageIsAnOutage(t *testing.T) {
	for _, f := range esFaults() {
		t.Run(f.Name, func(t *testing.T) {
			e := newEnv(t, 1)
			g := testenv.NewGate(t, e.es)
			w := e.newWorker(g.URL())
			ctx := ctxT(t)
			if err := w.Availability().Check(ctx); err != nil {
				t.Fatalf("readiness red before the outage: %v", err)
			}
			one := e.appendCmd(instanceworker.CreateInstance, "out", "things", "one", create("out", "things", strp("one"), map[string]any{"v": 1}))
			two := e.appendCmd(instanceworker.CreateInstance, "out", "things", "two", create("out", "things", strp("two"), map[string]any{"v": 2}))
			end := f.start(e, g)
			if !f.Items { // Handle writes with the index API, not _bulk
				_, err := w.Handle(ctx, &worker.Record{Envelope: one.ev.Envelope, Attempt: 1})
				if c := worker.Classify(err); c != worker.ClassOutage {
					t.Errorf("Handle during the outage: class %s (%v), want %s", c, err, worker.ClassOutage)
				}
			}
			res := w.HandleBatch(ctx, []*worker.Record{{Envelope: two.ev.Envelope, Attempt: 1}})
			if c := worker.Classify(res[0].Err); c != worker.ClassOutage {
				t.Errorf("HandleBatch during the outage: class %s (%v), want %s", c, res[0].Err, worker.ClassOutage)
			}
			if err := w.Availability().Check(ctx); err == nil {
				t.Error("readiness green during the outage")
			}
			end()
			green := func() bool {
				cctx, cancel := context.WithTimeout(ctx, time.Second)
				defer cancel()
				return w.Availability().Check(cctx) == nil
			}
			if !f.Items {
				// Back by itself: while red, the check pings the cluster.
				testenv.WaitFor(t, 10*time.Second, "readiness green after the outage", green)
			}
			if out, err := w.Handle(ctx, &worker.Record{Envelope: one.ev.Envelope, Attempt: 2}); err != nil || out != claim.Applied() {
				t.Errorf("Handle after the outage: %+v, %v", out, err)
			}
			res = w.HandleBatch(ctx, []*worker.Record{{Envelope: two.ev.Envelope, Attempt: 2}})
			if res[0].Err != nil || res[0].Outcome != claim.Applied() {
				t.Errorf("HandleBatch after the outage: %+v", res[0])
			}
			if !green() {
				t.Error("readiness red after writes succeeded again")
			}
			for _, id := range []string{"one", "two"} {
				if v, _, ok := e.doc("out", "things", id); !ok || v != 1 {
					t.Errorf("%s: version %d found %v", id, v, ok)
				}
			}
		})
	}
}

// TestESOutagePausesTheWorker runs the instance worker through each kind of
// Elasticsearch outage with commands arriving during it: readiness turns
// red, nothing is dead-lettered and no command is DEAD; after the outage
// every command is applied exactly once (one domain event per slot, the
// documents at their last version) and readiness is green again.
func TestESOutagePausesTheWorker(t *testing.T) {
	for _, f := range esFaults() {
		t.Run(f.Name, func(t *testing.T) {
			e := newEnv(t, 2)
			g := testenv.NewGate(t, e.es)
			first := []cmd{e.appendCmd(instanceworker.CreateInstance, "out", "things", "a", create("out", "things", strp("a"), map[string]any{"v": 0}))}
			e.publish(first...)
			health := observability.NewHealth()
			esRed := func() bool {
				err := health.Ready(ctxT(t))
				return err != nil && strings.Contains(err.Error(), "instanceworker:elasticsearch")
			}
			e.startInProcessWith(map[string]string{"ELASTICSEARCH_URLS": g.URL(), "ELASTICSEARCH_REQUEST_TIMEOUT": "500ms"}, health)
			testenv.WaitFor(t, 30*time.Second, "first command done", func() bool { return e.allDone(first...) })
			if esRed() {
				t.Fatal("readiness red before the outage")
			}

			var second []cmd
			for i := range 3 {
				second = append(second, e.appendCmd(instanceworker.UpdateInstance, "out", "things", "a", map[string]any{"data": map[string]any{"v": i + 1}}))
				id := fmt.Sprintf("n%d", i)
				second = append(second, e.appendCmd(instanceworker.CreateInstance, "out", "things", id, create("out", "things", strp(id), map[string]any{"v": 0})))
			}
			end := f.start(e, g)
			e.publish(second...)
			testenv.WaitFor(t, 30*time.Second, "readiness red", esRed)
			// Positive evidence before the negative assertions: the worker
			// probed Elasticsearch again more times than the attempt
			// budget (each probe re-runs the held claims), so an outage
			// that spent attempts would have dead-lettered by now.
			from := e.probes(failure.Elasticsearch)
			testenv.WaitFor(t, 60*time.Second, "more probes of the outage than the attempt budget", func() bool {
				return e.probes(failure.Elasticsearch) >= from+e.maxAttempts()
			})
			for id, st := range e.statuses(second...) {
				if st == claim.StatusDead {
					t.Errorf("command %s DEAD during the outage", id)
				}
			}
			if n := len(e.dlqRecords()); n != 0 {
				t.Errorf("DLQ holds %d records during the outage", n)
			}
			end()
			testenv.WaitFor(t, 60*time.Second, "all done after the outage", func() bool { return e.allDone(append(first, second...)...) })
			testenv.WaitFor(t, 20*time.Second, "committed after the outage", func() bool { c, end := e.committed(); return c == end })
			testenv.WaitFor(t, 10*time.Second, "readiness green", func() bool { return !esRed() })
			ev := e.domainEvents()
			if got := fmt.Sprint(ev["out:things:a"]); got != "[1×1 2×1 3×1 4×1]" {
				t.Errorf("out:things:a domain events %s", got)
			}
			for i := range 3 {
				if got := fmt.Sprint(ev[fmt.Sprintf("out:things:n%d", i)]); got != "[1×1]" {
					t.Errorf("n%d domain events %s", i, got)
				}
			}
			for _, c := range append(first, second...) {
				if o := e.outcome(c); o != claim.Applied() {
					t.Errorf("command %s outcome %+v", c.ev.Envelope.EventID, o)
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

// matchBody matches requests whose path contains path and whose body
// contains substr (the body is read and put back).
func matchBody(path, substr string) func(*http.Request) bool {
	return func(r *http.Request) bool {
		if !strings.Contains(r.URL.Path, path) || r.Body == nil {
			return false
		}
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(b))
		return bytes.Contains(b, []byte(substr))
	}
}
