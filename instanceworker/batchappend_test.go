package instanceworker_test

import (
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/worker"
)

// TestBatchAppendsOneGroup: the domain events of a round's commands reach
// the event store in one call and are stored as one group (one segment,
// one reservation and one commit transaction), where one append per
// command made an idle store start a group with the first alone; and
// Elasticsearch gets one _mget for the documents and one _bulk for the
// writes of the whole batch. Counted through the store's own group metric
// and the requests the ES test server answered, after a first command has
// created the index.
func TestBatchAppendsOneGroup(t *testing.T) {
	e := newEnv(t, 1)
	var mu sync.Mutex
	esReqs := map[string]int{}
	counted := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		esReqs[r.Method+" "+r.URL.Path]++
		mu.Unlock()
		e.es.ServeHTTP(w, r)
	}))
	t.Cleanup(counted.Close)
	w := e.newWorker(counted.URL)
	first := e.appendCmd(instanceworker.CreateInstance, "grp", "things", "first", create("grp", "things", strp("first"), map[string]any{"v": 0}))
	if r := w.HandleBatch(ctxT(t), []*worker.Record{{Envelope: first.ev.Envelope, Attempt: 1}}); r[0].Err != nil {
		t.Fatal(r[0].Err)
	}
	mu.Lock()
	clear(esReqs)
	mu.Unlock()
	reg := prometheus.NewRegistry()
	reg.MustRegister(e.store.Collectors()...)
	groups := func() uint64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "sluice_eventstore_group_events" {
				return mf.GetMetric()[0].GetHistogram().GetSampleCount()
			}
		}
		t.Fatal("no sluice_eventstore_group_events")
		return 0
	}
	var recs []*worker.Record
	for i := range 8 {
		id := fmt.Sprintf("g%d", i)
		c := e.appendCmd(instanceworker.CreateInstance, "grp", "things", id, create("grp", "things", strp(id), map[string]any{"v": i}))
		recs = append(recs, &worker.Record{Envelope: c.ev.Envelope, Attempt: 1})
	}
	before := groups()
	res := w.HandleBatch(ctxT(t), recs)
	for i, r := range res {
		if r.Err != nil || r.Outcome != claim.Applied() {
			t.Fatalf("command %d: %+v", i, r)
		}
	}
	if got := groups() - before; got != 1 {
		t.Errorf("the batch's 8 domain events were stored in %d groups, want 1", got)
	}
	mu.Lock()
	if want := map[string]int{"POST /_mget": 1, "POST /_bulk": 1}; !maps.Equal(esReqs, want) {
		t.Errorf("Elasticsearch requests of the batch %v, want %v", esReqs, want)
	}
	mu.Unlock()
	for i := range 8 {
		if v, _, ok := e.doc("grp", "things", fmt.Sprintf("g%d", i)); !ok || v != 1 {
			t.Errorf("g%d: document version %d found %v", i, v, ok)
		}
	}
}
