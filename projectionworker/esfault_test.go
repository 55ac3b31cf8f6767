package projectionworker_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/elastic/go-elasticsearch/v8"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/esserver"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/failure"
	"github.com/sluicehq/sluice/shared/observability"
	"github.com/sluicehq/sluice/worker"
)

// esGate stands between a worker and the test's esserver
// (testenv.Gate: a closed port, a frozen server).
type esGate struct{ *testenv.Gate }

func newESGate(t testing.TB, es *esserver.Server) *esGate {
	t.Helper()
	return &esGate{testenv.NewGate(t, es)}
}

// client is a worker's Elasticsearch client through the gate (request
// deadline 500 ms).
func (g *esGate) client(t testing.TB) *elasticsearch.Client {
	t.Helper()
	es, err := readmodel.NewClient(readmodel.Config{URLs: []string{g.URL()}, RequestTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// esFault is one kind of Elasticsearch outage (testenv.ESFaults).
type esFault struct {
	testenv.ESFault
}

func (f esFault) start(e *env, g *esGate) (end func()) { return f.Start(e.es, g.Gate) }

func esFaults() []esFault {
	var out []esFault
	for _, f := range testenv.ESFaults() {
		out = append(out, esFault{f})
	}
	return out
}

// TestESOutageIsAnOutage calls the handler for an event of a new scope
// (its index is created first; of a known scope for item faults) during
// each kind of Elasticsearch outage:
// the error is of class outage (the runtime pauses; never a dead letter)
// and readiness is red; once Elasticsearch is back readiness turns green
// by itself (for refused bulk items: at the first accepted write) and the
// same event is applied.
func TestESOutageIsAnOutage(t *testing.T) {
	for _, f := range esFaults() {
		t.Run(f.Name, func(t *testing.T) {
			e := newEnv(t, 1)
			g := newESGate(t, e.es)
			es := g.client(t)
			bulk := projectionworker.NewBulker(es, projectionworker.BulkOptions{RequestTimeout: 500 * time.Millisecond})
			w, err := projectionworker.NewWorker(projectionworker.Config{Elasticsearch: readmodel.Config{IndexPrefix: "sluice_"}}, projectionworker.Deps{ES: es},
				projectionworker.Spec{Projection: projectionworker.Instances{}, Version: 1}, bulk)
			if err != nil {
				t.Fatal(err)
			}
			ctx := ctxT(t)
			if f.Items {
				warm := e.event(projectionworker.InstanceCreated, "outg", "things", "warm", 1, nil)
				if _, err := w.Handle(ctx, &worker.Record{Envelope: warm, Attempt: 1}); err != nil {
					t.Fatal(err)
				}
			}
			ev := e.event(projectionworker.InstanceCreated, "outg", "things", "a", 1, map[string]any{"v": 1})
			end := f.start(e, g)
			_, err = w.Handle(ctx, &worker.Record{Envelope: ev, Attempt: 1})
			if c := worker.Classify(err); c != worker.ClassOutage {
				t.Errorf("Handle during the outage: class %s (%v), want %s", c, err, worker.ClassOutage)
			}
			res := w.HandleBatch(ctx, []*worker.Record{{Envelope: ev, Attempt: 1}})
			if c := worker.Classify(res[0].Err); c != worker.ClassOutage {
				t.Errorf("HandleBatch during the outage: class %s (%v), want %s", c, res[0].Err, worker.ClassOutage)
			}
			if err := bulk.Check(ctx); err == nil {
				t.Error("readiness green during the outage")
			}
			end()
			green := func() bool {
				cctx, cancel := context.WithTimeout(ctx, time.Second)
				defer cancel()
				return bulk.Check(cctx) == nil
			}
			if !f.Items {
				// Back by itself: while red, the check pings the cluster.
				testenv.WaitFor(t, 10*time.Second, "readiness green after the outage", green)
			}
			if out, err := w.Handle(ctx, &worker.Record{Envelope: ev, Attempt: 2}); err != nil || out != claim.Applied() {
				t.Errorf("Handle after the outage: %+v, %v", out, err)
			}
			if !green() {
				t.Error("readiness red after writes succeeded again")
			}
			if d := e.instance("outg", "things", "a", 1); d.Version != 1 {
				t.Errorf("document version %d", d.Version)
			}
		})
	}
}

// TestESOutagePausesTheWorker runs the instances and history projections
// through each kind of Elasticsearch outage, with events arriving during it
// (of a new scope, whose index is created first; of a known scope for item
// faults): readiness turns red, nothing is
// committed or dead-lettered; afterwards every event is projected exactly
// once (instance documents at their last version, one history document per
// event) and readiness is green again.
func TestESOutagePausesTheWorker(t *testing.T) {
	for _, f := range esFaults() {
		t.Run(f.Name, func(t *testing.T) {
			e := newEnv(t, 2)
			g := newESGate(t, e.es)
			warm := e.event(projectionworker.InstanceCreated, "known", "things", "warm", 1, nil)
			e.publish(warm)
			health := observability.NewHealth()
			esRed := func() bool {
				err := health.Ready(ctxT(t))
				return err != nil && strings.Contains(err.Error(), "projectionworker:elasticsearch")
			}
			cfg := e.serviceConfig(map[string]string{"ELASTICSEARCH_REQUEST_TIMEOUT": "500ms"}, spec("instances"), spec("history"))
			cfg.VersionCheck = -1
			metrics := prometheus.NewRegistry()
			d, closePool := e.deps(metrics)
			d.ES, d.Health = g.client(t), health
			svc, err := projectionworker.New(cfg, d, e.opts()...)
			if err != nil {
				t.Fatal(err)
			}
			testenv.RunInBackground(t, "worker", svc.Run, closePool)
			for _, gr := range []string{"projection-instances-v1", "projection-history-v1"} {
				testenv.WaitFor(t, 30*time.Second, "warm-up", e.caughtUp(gr))
			}
			if esRed() {
				t.Fatal("readiness red before the outage")
			}
			end := f.start(e, g)
			db := "fresh"
			if f.Items {
				db = "known"
			}
			var evs []envelope.Envelope
			for i := range 5 {
				id := fmt.Sprint("i", i)
				evs = append(evs, e.event(projectionworker.InstanceCreated, db, "things", id, 1, map[string]any{"v": 1}),
					e.event(projectionworker.InstanceUpdated, db, "things", id, 2, map[string]any{"v": 2}))
			}
			e.publish(evs...)
			testenv.WaitFor(t, 30*time.Second, "readiness red", esRed)
			// Positive evidence before the negative assertions: each
			// projection's worker probed Elasticsearch again more times
			// than the attempt budget (each probe re-runs the held
			// claims), so an outage that spent attempts would have
			// dead-lettered, and one that let a record finish would have
			// committed, by now.
			budget := e.maxRetries()
			from := map[string]float64{}
			for _, h := range []string{"projection:instances:v1", "projection:history:v1"} {
				from[h] = probes(t, metrics, h, failure.Elasticsearch)
			}
			for h, n := range from {
				testenv.WaitFor(t, 60*time.Second, h+": more probes of the outage than the attempt budget", func() bool {
					return probes(t, metrics, h, failure.Elasticsearch) >= n+budget
				})
			}
			for _, gr := range []string{"projection-instances-v1", "projection-history-v1"} {
				if l := e.lag(gr); l.Lag != int64(len(evs)) {
					t.Errorf("%s: lag %d during the outage, want %d (nothing committed)", gr, l.Lag, len(evs))
				}
			}
			if n := len(e.dlqRecords()); n != 0 {
				t.Errorf("DLQ holds %d records during the outage", n)
			}
			end()
			for _, gr := range []string{"projection-instances-v1", "projection-history-v1"} {
				testenv.WaitFor(t, 60*time.Second, "caught up after the outage", e.caughtUp(gr))
			}
			testenv.WaitFor(t, 10*time.Second, "readiness green", func() bool { return !esRed() })
			for i := range 5 {
				if doc := e.instance(db, "things", fmt.Sprint("i", i), 1); doc.Version != 2 || doc.Source["v"] != float64(2) {
					t.Errorf("%s i%d: version %d source %v", db, i, doc.Version, doc.Source)
				}
			}
			for _, ev := range evs {
				if doc := e.get("sluice_"+db+"_history_v1", envelope.ESDocumentID(ev.EventID)); !doc.Found || doc.Version != 1 {
					t.Errorf("history of %s: found %v version %d", ev.EventID, doc.Found, doc.Version)
				}
			}
			if n := len(e.dlqRecords()); n != 0 {
				t.Errorf("DLQ holds %d records", n)
			}
		})
	}
}

// TestBulkRequestRefused (issue 21, suspected "request-level bulk 400",
// confirmed): Elasticsearch refuses a whole bulk request because of one
// document in it; the bulker splits the request until that document is
// alone, so only its event is dead-lettered and the events batched with it
// are written.
func TestBulkRequestRefused(t *testing.T) {
	e := newEnv(t, 1)
	warm := e.event(projectionworker.InstanceCreated, "blk", "things", "warm", 1, nil)
	e.publish(warm)
	e.startInProcess(nil, nil, spec("instances"))
	testenv.WaitFor(t, 30*time.Second, "warm-up", e.caughtUp("projection-instances-v1"))
	e.es.InjectFault(esserver.Fault{Match: func(r *http.Request) bool {
		if !strings.Contains(r.URL.Path, "/_bulk") || r.Body == nil {
			return false
		}
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(b))
		return bytes.Contains(b, []byte("refuse-this-request"))
	}, Status: http.StatusBadRequest, ErrorType: "illegal_argument_exception", Reason: "request refused (test)"})
	var evs []envelope.Envelope
	for i := range 8 {
		data := map[string]any{"v": i}
		if i == 5 {
			data["poison"] = "refuse-this-request"
		}
		evs = append(evs, e.event(projectionworker.InstanceCreated, "blk", "things", fmt.Sprint("i", i), 1, data))
	}
	e.publish(evs...)
	testenv.WaitFor(t, 60*time.Second, "caught up", e.caughtUp("projection-instances-v1"))
	dlq := e.dlqRecords()
	if len(dlq) != 1 || !bytes.Contains(dlq[0].Value, []byte(evs[5].EventID)) {
		t.Errorf("DLQ holds %d records, want the poison event only", len(dlq))
	}
	for i := range evs {
		doc := e.instance("blk", "things", fmt.Sprint("i", i), 1)
		if doc.Found != (i != 5) {
			t.Errorf("i%d: document found %v", i, doc.Found)
		}
	}
}

// TestIndexCreatedAgainAfterLoss: a write answered 404 (the scope's index
// was deleted under the worker) makes the worker forget that it created the
// index, so the next write of the scope creates it again instead of
// failing forever (the Service also rebuilds; this worker runs without
// one).
func TestIndexCreatedAgainAfterLoss(t *testing.T) {
	e := newEnv(t, 1)
	bulk := projectionworker.NewBulker(e.esc, projectionworker.BulkOptions{})
	w, err := projectionworker.NewWorker(projectionworker.Config{Elasticsearch: readmodel.Config{IndexPrefix: "sluice_"}}, projectionworker.Deps{ES: e.esc},
		projectionworker.Spec{Projection: projectionworker.Instances{}, Version: 1}, bulk)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	names := projectionworker.IndexNames("sluice_", "lost", "instances", 1)
	steps := []struct {
		name    string
		id      string
		attempt int
		lose    bool
		applied bool
	}{
		{"first write creates the index", "a", 1, false, true},
		{"write after the index is deleted fails", "b", 1, true, false},
		{"the next write creates the index again", "b", 2, false, true},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if s.lose {
				res, err := e.esc.Indices.Delete([]string{names.Index}, e.esc.Indices.Delete.WithContext(ctx))
				if err != nil || res.IsError() {
					t.Fatalf("delete index: %v %v", res, err)
				}
				res.Body.Close()
				// Elasticsearch answers 404 (the test server would create
				// the index on write, without its aliases).
				e.es.InjectFault(esserver.Fault{Times: 1, BulkItemStatus: http.StatusNotFound,
					RejectBulkItems: func(it esserver.BulkItem) bool { return it.Index == names.Index }})
			}
			ev := e.event(projectionworker.InstanceCreated, "lost", "things", s.id, 1, map[string]any{"v": 1})
			out, err := w.Handle(ctx, &worker.Record{Envelope: ev, Attempt: s.attempt})
			if applied := err == nil && out == claim.Applied(); applied != s.applied {
				t.Fatalf("Handle: %+v, %v; want applied %v", out, err, s.applied)
			}
		})
	}
	// Created again by the worker: with its read alias (filtered to live
	// documents), which an index created by the write would not have.
	if n := e.countIn(names.ReadAlias); n != 1 {
		t.Errorf("%d documents through the read alias after the index came back, want 1", n)
	}
}
