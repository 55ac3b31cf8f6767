package projectionworker_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/esserver"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/shared/envelope"
)

func instanceEvents(e *env, db string, n int) []envelope.Envelope {
	var evs []envelope.Envelope
	for i := range n {
		id := fmt.Sprintf("f%d", i)
		evs = append(evs, e.event(projectionworker.InstanceCreated, db, "things", id, 1, map[string]any{"v": 1}),
			e.event(projectionworker.InstanceUpdated, db, "things", id, 2, map[string]any{"v": 2}))
	}
	return evs
}

// TestElasticsearchFaults: 429 storms (whole requests and items) and a 503
// outage are retried without committing past unfinished records, and the
// projection completes after recovery.
func TestElasticsearchFaults(t *testing.T) {
	tests := []struct {
		name   string
		fault  esserver.Fault
		outage bool // removed by the test after the outage was ridden out (else Times ends it)
	}{
		{"429 requests", esserver.Fault{Match: esserver.MatchPath(http.MethodPost, "/_bulk"), Status: http.StatusTooManyRequests, Times: 8}, false},
		{"429 items", esserver.Fault{BulkItemStatus: http.StatusTooManyRequests, Times: 6}, false},
		{"429 every other item", esserver.Fault{RejectBulkItems: func(it esserver.BulkItem) bool { return it.Position%2 == 1 }, Times: 4}, false},
		{"503 outage", esserver.Fault{Match: esserver.MatchPath(http.MethodPost, "/_bulk"), Status: http.StatusServiceUnavailable}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 2)
			// Indices exist before the storm, so only bulk writes fail.
			warm := e.event(projectionworker.InstanceCreated, "flt", "things", "warm", 1, nil)
			e.publish(warm)
			svc, _ := e.startInProcess(nil, nil, spec("instances"))
			testenv.WaitFor(t, 30*time.Second, "warm-up", e.caughtUp("projection-instances-v1"))
			evs := instanceEvents(e, "flt", 20)
			fault := tc.fault
			var sends atomic.Int64 // refused bulk requests carrying the first event's write
			if tc.outage {
				match, id := fault.Match, []byte(evs[0].EventID)
				fault.Match = func(r *http.Request) bool {
					if !match(r) {
						return false
					}
					if b, err := io.ReadAll(r.Body); err == nil {
						r.Body = io.NopCloser(bytes.NewReader(b))
						if bytes.Contains(b, id) {
							sends.Add(1)
						}
					}
					return true
				}
			}
			remove := e.es.InjectFault(fault)
			e.publish(evs...)
			if tc.outage {
				// Positive evidence before the negative assertions: the
				// first event's write was refused more than twice the
				// attempt budget (the bulker sends a batch again itself
				// while the handler waits), so a worker that spent an
				// attempt per refusal, or per two, would have dead-lettered
				// it, and one that took a refusal for a success would have
				// committed.
				testenv.WaitFor(t, 60*time.Second, "the first event's write refused more than twice the attempt budget", func() bool {
					return float64(sends.Load()) > 2*e.maxRetries()
				})
				if l := e.lag("projection-instances-v1"); l.Lag != int64(len(evs)) {
					t.Errorf("during the outage the lag is %d, want %d (nothing committed)", l.Lag, len(evs))
				}
				if !svc.Bulker().InOutage() {
					t.Error("bulker does not report the outage")
				}
				remove()
			}
			testenv.WaitFor(t, 60*time.Second, "caught up after recovery", e.caughtUp("projection-instances-v1"))
			for i := range 20 {
				if d := e.instance("flt", "things", fmt.Sprintf("f%d", i), 1); d.Version != 2 || d.Source["v"] != float64(2) {
					t.Errorf("f%d: version %d source %v", i, d.Version, d.Source)
				}
			}
			if n := len(e.dlqRecords()); n != 0 {
				t.Errorf("DLQ holds %d records", n)
			}
			if svc.Bulker().InOutage() {
				t.Error("bulker still reports an outage")
			}
		})
	}
}

// TestMappingError: one document Elasticsearch cannot map goes to the DLQ;
// the rest are applied.
func TestMappingError(t *testing.T) {
	e := newEnv(t, 1)
	evs := []envelope.Envelope{e.event(projectionworker.InstanceCreated, "map", "things", "ok1", 1, map[string]any{"n": 1})}
	e.publish(evs...)
	_, _ = e.startInProcess(nil, nil, spec("instances"))
	testenv.WaitFor(t, 30*time.Second, "first document", e.caughtUp("projection-instances-v1"))
	bad := e.event(projectionworker.InstanceCreated, "map", "things", "bad", 1, map[string]any{"n": "not a number"})
	rest := []envelope.Envelope{bad,
		e.event(projectionworker.InstanceCreated, "map", "things", "ok2", 1, map[string]any{"n": 2}),
		e.event(projectionworker.InstanceUpdated, "map", "things", "ok1", 2, map[string]any{"n": 3})}
	e.publish(rest...)
	testenv.WaitFor(t, 60*time.Second, "caught up", e.caughtUp("projection-instances-v1"))
	dlq := e.dlqRecords()
	if len(dlq) != 1 {
		t.Fatalf("DLQ holds %d records, want 1", len(dlq))
	}
	var d struct {
		OriginalValue string `json:"original_value"`
		ErrorClass    string `json:"error_class"`
		Handler       string `json:"handler"`
	}
	if err := json.Unmarshal(dlq[0].Value, &d); err != nil {
		t.Fatal(err)
	}
	got, err := envelope.Parse([]byte(d.OriginalValue), envelope.DefaultLimits())
	if err != nil || got.EventID != bad.EventID || d.ErrorClass != "permanent" || d.Handler != "projection:instances:v1" {
		t.Errorf("dead letter %+v (event %s, err %v)", d, got.EventID, err)
	}
	for id, v := range map[string]int64{"ok1": 2, "ok2": 1} {
		if doc := e.instance("map", "things", id, 1); doc.Version != v {
			t.Errorf("%s: version %d, want %d", id, doc.Version, v)
		}
	}
	if doc := e.instance("map", "things", "bad", 1); doc.Found {
		t.Errorf("bad document written: %v", doc.Source)
	}
}

// TestElasticsearchDownAtStartup: the worker starts while Elasticsearch
// answers 503 to the index listing that resolves the live version; it waits
// instead of returning an error, then projects everything.
func TestElasticsearchDownAtStartup(t *testing.T) {
	e := newEnv(t, 2)
	var refused atomic.Int64
	listing := esserver.MatchPath(http.MethodGet, "_history_v")
	remove := e.es.InjectFault(esserver.Fault{Match: func(r *http.Request) bool {
		if listing(r) {
			refused.Add(1)
			return true
		}
		return false
	}, Status: http.StatusServiceUnavailable})
	evs := instanceEvents(e, "boot", 5)
	e.publish(evs...)
	svc, stop := e.startInProcess(nil, nil, spec("history"))
	// Positive evidence, not a sleep: the worker has tried the listing
	// several times (each refused) before the negative assertion.
	testenv.WaitFor(t, 30*time.Second, "three refused listings", func() bool { return refused.Load() >= 3 })
	if v := svc.Version("history"); v != 0 {
		t.Fatalf("running at version %d while the listing fails", v)
	}
	remove()
	testenv.WaitFor(t, 30*time.Second, "caught up after Elasticsearch came back", e.caughtUp("projection-history-v1"))
	stop() // reports an error if Run returned one
}
