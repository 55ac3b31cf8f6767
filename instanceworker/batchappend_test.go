package instanceworker_test

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/worker"
)

// TestBatchAppendsOneGroup: the domain events of a round's commands reach
// the event store in one call and are stored as one group (one segment,
// one reservation and one commit transaction), where one append per
// command made an idle store start a group with the first alone. Counted
// through the store's own group metric.
func TestBatchAppendsOneGroup(t *testing.T) {
	e := newEnv(t, 1)
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
	res := e.newWorker(e.esURL).HandleBatch(ctxT(t), recs)
	for i, r := range res {
		if r.Err != nil || r.Outcome != claim.Applied() {
			t.Fatalf("command %d: %+v", i, r)
		}
	}
	if got := groups() - before; got != 1 {
		t.Errorf("the batch's 8 domain events were stored in %d groups, want 1", got)
	}
	for i := range 8 {
		if v, _, ok := e.doc("grp", "things", fmt.Sprintf("g%d", i)); !ok || v != 1 {
			t.Errorf("g%d: document version %d found %v", i, v, ok)
		}
	}
}
