package projectionworker_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/esserver"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/shared/envelope"
)

// TestReadModelLost: a worker restarted after its index was deleted (the
// dev Elasticsearch lost its data) finds the read model empty while its
// registry handler has done rows, rebuilds it as v2 from the start of the
// topic, and every document comes back through the read alias; a fresh
// deployment (nothing projected yet) does not rebuild.
func TestReadModelLost(t *testing.T) {
	for _, tc := range []struct {
		name string
		lose bool
	}{{"index deleted", true}, {"fresh deployment", false}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 3)
			tap := &testenv.Buffer{}
			e.logs = tap
			const n = 20
			var evs []envelope.Envelope
			for i := range n {
				evs = append(evs, e.event(projectionworker.InstanceCreated, "rl", "things", fmt.Sprint(i), 1, map[string]any{"v": i}))
			}
			readAlias := projectionworker.IndexNames("sluice_", "rl", "instances", 1).ReadAlias
			if tc.lose {
				e.publish(evs...)
				_, stop := e.startInProcess(nil, nil, spec("instances"))
				testenv.WaitFor(t, 30*time.Second, "v1 caught up", e.caughtUp("projection-instances-v1"))
				testenv.WaitFor(t, 30*time.Second, "v1 complete", func() bool {
					return e.countIn(readAlias) == n
				})
				stop()
				res, err := e.esc.Indices.Delete([]string{projectionworker.IndexNames("sluice_", "rl", "instances", 1).Index})
				if err != nil || res.IsError() {
					t.Fatalf("delete index: %v %v", res, err)
				}
				res.Body.Close()
			}
			running := tap.Count("projection worker running")
			svc, stop := e.startInProcess(nil, nil, spec("instances"))
			if !tc.lose {
				// The start-up check runs before the worker logs that it
				// runs: a rebuild it wrongly started is under way (and is
				// waited for by stop, below) before the events come.
				testenv.WaitFor(t, 60*time.Second, "the start-up check done (worker running)", func() bool {
					return tap.Count("projection worker running") > running
				})
				e.publish(evs...)
			}
			testenv.WaitFor(t, 60*time.Second, "all documents through the read alias", func() bool {
				return e.countIn(readAlias) == n
			})
			want := 1
			if tc.lose {
				want = 2
			}
			testenv.WaitFor(t, 30*time.Second, fmt.Sprintf("the worker runs v%d", want), func() bool { return svc.Version("instances") == want })
			if v, err := projectionworker.LiveVersion(ctxT(t), e.esc, "sluice_", "instances"); err != nil || v != want {
				t.Errorf("live version %d (%v), want %d", v, err, want)
			}
			for i := range n {
				if d := e.instance("rl", "things", fmt.Sprint(i), want); !d.Found || d.Source["v"] != float64(i) {
					t.Errorf("document %d in v%d: %+v", i, want, d)
				}
			}
			if !tc.lose {
				// Stopping waits for a rebuild the check started; every
				// path of one logs "read model missing" first.
				stop()
				if tap.Contains("read model missing") {
					t.Error("fresh deployment: the start-up check found the read model lost")
				}
				if l := e.lag("projection-instances-v2"); l.Committed != 0 {
					t.Errorf("fresh deployment: group v2 has committed %d (a rebuild was triggered)", l.Committed)
				}
				idx, err := projectionworker.Indices(ctxT(t), e.esc, "sluice_", "instances")
				if err != nil || len(idx) != 1 {
					t.Errorf("fresh deployment: indices %+v (%v), want only v1", idx, err)
				}
			}
		})
	}
}

// countIn counts the documents of index (or alias); -1 when it is missing.
func (e *env) countIn(index string) int {
	res, err := e.esc.Count(e.esc.Count.WithIndex(index))
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	if res.IsError() {
		return -1
	}
	var c struct {
		Count int `json:"count"`
	}
	if err := json.NewDecoder(res.Body).Decode(&c); err != nil {
		e.t.Fatal(err)
	}
	return c.Count
}

// TestReadModelLostWhileRunning: the index of a live projection is deleted
// under the running worker and the next write is answered 404 (an
// Elasticsearch that does not create indices on write). The event is
// retried into the index created again, and the read model is rebuilt as
// v2 from the topic, exactly as at start-up: every document, old and new,
// comes back through the read alias, nothing is dead-lettered. Then the
// same again after that swap (the v1 consumer, and its Kafka client, are
// gone by then): v2's index is deleted, a 404 → rebuilt as v3.
func TestReadModelLostWhileRunning(t *testing.T) {
	e := newEnv(t, 3)
	const n, m, k = 20, 5, 5
	var evs []envelope.Envelope
	for i := range n + m + k {
		evs = append(evs, e.event(projectionworker.InstanceCreated, "rl", "things", fmt.Sprint(i), 1, map[string]any{"v": i}))
	}
	names := projectionworker.IndexNames("sluice_", "rl", "instances", 1)
	e.publish(evs[:n]...)
	// The worker as startInProcess runs it, its log also kept (at info:
	// the end of a rebuild is logged there).
	logs := &testenv.Buffer{}
	d, closePool := e.deps(nil)
	d.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(testenv.LogWriter{T: t}, logs), &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg := e.serviceConfig(nil, spec("instances"))
	cfg.VersionCheck = 200 * time.Millisecond
	svc, err := projectionworker.New(cfg, d, e.opts()...)
	if err != nil {
		t.Fatal(err)
	}
	testenv.RunInBackground(t, "worker", svc.Run, closePool)
	testenv.WaitFor(t, 30*time.Second, "v1 complete", func() bool { return e.countIn(names.ReadAlias) == n })
	res, err2 := e.esc.Indices.Delete([]string{names.Index})
	if err2 != nil || res.IsError() {
		t.Fatalf("delete index: %v %v", res, err2)
	}
	res.Body.Close()
	e.es.InjectFault(esserver.Fault{Times: 1, BulkItemStatus: http.StatusNotFound,
		RejectBulkItems: func(it esserver.BulkItem) bool { return it.Index == names.Index }})
	e.publish(evs[n : n+m]...)
	testenv.WaitFor(t, 60*time.Second, "the worker runs v2", func() bool { return svc.Version("instances") == 2 })
	testenv.WaitFor(t, 60*time.Second, "all documents through the read alias", func() bool {
		return e.countIn(names.ReadAlias) == n+m
	})
	for i := range n + m {
		if d := e.instance("rl", "things", fmt.Sprint(i), 2); !d.Found || d.Source["v"] != float64(i) {
			t.Errorf("document %d in v2: %+v", i, d)
		}
	}

	// Lost again, after the swap: the rebuild must not depend on the
	// Kafka client of the consumer that the swap closed. First the
	// rebuild ends (until it has settled, its own v2 consumer shares the
	// group with the live worker, and a 404 finds the rebuild running).
	testenv.WaitFor(t, 60*time.Second, "the first rebuild ended", func() bool { return logs.Contains("read model rebuilt") })
	v2 := projectionworker.IndexNames("sluice_", "rl", "instances", 2)
	res, err2 = e.esc.Indices.Delete([]string{v2.Index})
	if err2 != nil || res.IsError() {
		t.Fatalf("delete v2 index: %v %v", res, err2)
	}
	res.Body.Close()
	e.es.InjectFault(esserver.Fault{Times: 1, BulkItemStatus: http.StatusNotFound,
		RejectBulkItems: func(it esserver.BulkItem) bool { return it.Index == v2.Index }})
	e.publish(evs[n+m:]...)
	testenv.WaitFor(t, 60*time.Second, "the worker runs v3", func() bool { return svc.Version("instances") == 3 })
	testenv.WaitFor(t, 60*time.Second, "all documents through the read alias after the second loss", func() bool {
		return e.countIn(names.ReadAlias) == n+m+k
	})
	for i := range n + m + k {
		if d := e.instance("rl", "things", fmt.Sprint(i), 3); !d.Found || d.Source["v"] != float64(i) {
			t.Errorf("document %d in v3: %+v", i, d)
		}
	}
	if recs := e.dlqRecords(); len(recs) != 0 {
		t.Errorf("%d dead letters", len(recs))
	}
}
