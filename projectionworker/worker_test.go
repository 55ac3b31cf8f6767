package projectionworker_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/shared/envelope"
)

func TestNames(t *testing.T) {
	for _, v := range []int{1, 2, 7} {
		got := projectionworker.IndexNames("sluice_", "shop", readmodel.Projection, v)
		want := readmodel.InstanceNames("sluice_", "shop", v)
		if got.Index != want.Index || got.ReadAlias != want.ReadAlias || got.WriteAlias != want.WriteAlias {
			t.Errorf("v%d: %+v, readmodel %+v", v, got, want)
		}
	}
	if h := projectionworker.HandlerName("history", 3); h != "projection:history:v3" {
		t.Errorf("handler %s", h)
	}
	if g := projectionworker.GroupName("history", 3); g != "projection-history-v3" {
		t.Errorf("group %s", g)
	}
}

// TestProjectOrderAndTombstones runs instances and history (live v1) over
// three aggregates — in order, shuffled sequence numbers, and delete then a
// late older update — and checks the end state.
func TestProjectOrderAndTombstones(t *testing.T) {
	e := newEnv(t, 3)
	var evs []envelope.Envelope
	// in order: created, 2 updates
	evs = append(evs, e.event(projectionworker.InstanceCreated, "shop", "orders", "plain", 1, map[string]any{"v": 1}),
		e.event(projectionworker.InstanceUpdated, "shop", "orders", "plain", 2, map[string]any{"v": 2}),
		e.event(projectionworker.InstanceUpdated, "shop", "orders", "plain", 3, map[string]any{"v": 3}))
	// shuffled: 8 events published in random order
	var sh []envelope.Envelope
	for s := int64(1); s <= 8; s++ {
		typ := projectionworker.InstanceUpdated
		if s == 1 {
			typ = projectionworker.InstanceCreated
		}
		sh = append(sh, e.event(typ, "shop", "orders", "shuffled", s, map[string]any{"v": s}))
	}
	rand.Shuffle(len(sh), func(i, j int) { sh[i], sh[j] = sh[j], sh[i] })
	if sh[len(sh)-1].SequenceNumber == 8 { // make sure something stale follows seq 8
		sh[0], sh[len(sh)-1] = sh[len(sh)-1], sh[0]
	}
	evs = append(evs, sh...)
	// delete, then a late older update
	created := e.event(projectionworker.InstanceCreated, "shop", "orders", "gone", 1, map[string]any{"v": 1})
	late := e.event(projectionworker.InstanceUpdated, "shop", "orders", "gone", 2, map[string]any{"v": 2})
	deleted := e.event(projectionworker.InstanceDeleted, "shop", "orders", "gone", 3, nil)
	evs = append(evs, created, deleted)
	e.publish(evs...)

	metrics := prometheus.NewRegistry()
	_, stop := e.startInProcess(nil, metrics, spec("instances"), spec("history"))
	for _, g := range []string{"projection-instances-v1", "projection-history-v1"} {
		testenv.WaitFor(t, 60*time.Second, g+" caught up", e.caughtUp(g))
	}
	e.publish(late) // arrives after the delete was applied
	evs = append(evs, late)
	for _, g := range []string{"projection-instances-v1", "projection-history-v1"} {
		testenv.WaitFor(t, 60*time.Second, g+" caught up", e.caughtUp(g))
	}
	stop()

	tests := []struct {
		id      string
		version int64
		v       any
		deleted bool
	}{
		{"plain", 3, float64(3), false},
		{"shuffled", 8, float64(8), false},
		{"gone", 3, nil, true},
	}
	for _, tc := range tests {
		d := e.instance("shop", "orders", tc.id, 1)
		if !d.Found || d.Version != tc.version || d.Source["v"] != tc.v || d.Source["deleted"] != tc.deleted ||
			d.Source["sequence_number"] != float64(tc.version) {
			t.Errorf("%s: found %v version %d source %v", tc.id, d.Found, d.Version, d.Source)
		}
	}
	// The tombstone is invisible through the read alias; the others are visible.
	ids := e.search("sluice_shop_instances", map[string]any{"match_all": map[string]any{}})
	if len(ids) != 2 {
		t.Errorf("read alias shows %v, want the 2 live instances", ids)
	}
	if d := e.get("sluice_shop_instances", readmodel.DocumentID("orders", "gone")); d.Found && d.Source["deleted"] != true {
		t.Errorf("deleted instance resurrected: %v", d.Source)
	}
	// Stale events were counted (409 or registry STALE), never applied.
	stale := counter(t, metrics, "sluice_projection_conflicts_total", map[string]string{"projection": "instances"}) +
		counter(t, metrics, "sluice_worker_records_total", map[string]string{"handler": "projection:instances:v1", "outcome": "stale"})
	if stale < 1 {
		t.Errorf("stale events counted %v, want ≥ 1", stale)
	}
	applied := counter(t, metrics, "sluice_worker_records_total", map[string]string{"handler": "projection:instances:v1"})
	if applied != float64(len(evs)) {
		t.Errorf("instances finished %v records, want %d", applied, len(evs))
	}
	// History: one document per projected event, _id = event_id, none twice.
	hist := e.search("sluice_shop_history", map[string]any{"match_all": map[string]any{}})
	seen := map[string]bool{}
	for _, id := range hist {
		if seen[id] {
			t.Errorf("history document %s twice", id)
		}
		seen[id] = true
	}
	// Every event, including the shuffled ones that arrived after a higher
	// sequence and the update published after the delete: history is
	// unguarded (claim.Unguarded), so a late event still gets its document.
	for _, ev := range evs {
		if !seen[ev.EventID] {
			t.Errorf("history lacks event %s (%s seq %d)", ev.EventID, ev.AggregateID, ev.SequenceNumber)
		}
	}
	if len(hist) != len(evs) {
		t.Errorf("history has %d documents for %d events", len(hist), len(evs))
	}
	if n := len(e.dlqRecords()); n != 0 {
		t.Errorf("DLQ holds %d records", n)
	}
}

// TestReplayIntoLiveVersion resets the live group to the start: every
// event is acknowledged without a document change, and counted.
func TestReplayIntoLiveVersion(t *testing.T) {
	e := newEnv(t, 2)
	var evs []envelope.Envelope
	for i, id := range []string{"a", "b", "c", "d"} {
		evs = append(evs, e.event(projectionworker.InstanceCreated, "rp", "things", id, 1, map[string]any{"n": i}),
			e.event(projectionworker.InstanceUpdated, "rp", "things", id, 2, map[string]any{"n": i + 10}))
	}
	e.publish(evs...)
	_, stop := e.startInProcess(nil, nil, spec("instances"), spec("history"))
	testenv.WaitFor(t, 60*time.Second, "caught up", func() bool {
		return e.lag("projection-instances-v1").Lag == 0 && e.lag("projection-history-v1").Lag == 0
	})
	stop()
	before := map[string]esDoc{}
	for _, id := range []string{"a", "b", "c", "d"} {
		before[id] = e.instance("rp", "things", id, 1)
	}
	for _, ev := range evs {
		before[ev.EventID] = e.get("sluice_rp_history_v1", ev.EventID)
	}
	adm := kadm.NewClient(e.producer())
	kc := e.config(nil).Kafka
	if _, err := adm.DeleteGroups(context.Background(), kc.Group("projection-instances-v1"), kc.Group("projection-history-v1")); err != nil {
		t.Fatal(err)
	}
	metrics := prometheus.NewRegistry()
	_, stop = e.startInProcess(nil, metrics, spec("instances"), spec("history"))
	testenv.WaitFor(t, 60*time.Second, "replay caught up", func() bool {
		return e.lag("projection-instances-v1").Lag == 0 && e.lag("projection-history-v1").Lag == 0
	})
	stop()
	for k, b := range before {
		var a esDoc
		if len(k) == 1 {
			a = e.instance("rp", "things", k, 1)
		} else {
			a = e.get("sluice_rp_history_v1", k)
		}
		if a.Version != b.Version || a.SeqNo != b.SeqNo || !a.Found {
			t.Errorf("%s changed: before v%d seq_no %d, after v%d seq_no %d", k, b.Version, b.SeqNo, a.Version, a.SeqNo)
		}
	}
	for _, h := range []string{"projection:instances:v1", "projection:history:v1"} {
		n := counter(t, metrics, "sluice_worker_records_total", map[string]string{"handler": h, "outcome": "duplicate"}) +
			counter(t, metrics, "sluice_worker_records_total", map[string]string{"handler": h, "outcome": "stale"})
		if n != float64(len(evs)) {
			t.Errorf("%s: %v replayed records counted duplicate/stale, want %d", h, n, len(evs))
		}
		if a := counter(t, metrics, "sluice_worker_records_total", map[string]string{"handler": h, "outcome": "applied"}); a != 0 {
			t.Errorf("%s: %v records applied again", h, a)
		}
	}
}
