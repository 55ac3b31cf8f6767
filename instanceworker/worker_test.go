package instanceworker_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/registry/registrytest"

	"github.com/sluicehq/sluice/esserver"
	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/worker"
)

func create(db, class string, id *string, data map[string]any) map[string]any {
	p := map[string]any{"db": db, "class": class, "data": data}
	if id != nil {
		p["instance_id"] = *id
	}
	return p
}

func strp(s string) *string { return &s }

// TestCommands runs every command kind through a worker and checks the end
// state: outcomes, domain events per slot, documents and versions, offsets.
func TestCommands(t *testing.T) {
	e := newEnv(t, 3)
	a1 := e.appendCmd(instanceworker.CreateInstance, "shop", "orders", "a", create("shop", "orders", strp("a"), map[string]any{"n": 1, "tags": map[string]any{"x": 1, "y": 2}}))
	a2 := e.appendCmd(instanceworker.UpdateInstance, "shop", "orders", "a", map[string]any{"data": map[string]any{"n": 2, "tags": map[string]any{"x": nil}}})
	b1 := e.appendCmd(instanceworker.CreateInstance, "shop", "orders", "42", create("shop", "orders", nil, map[string]any{"orders_id": 42, "n": 1}))
	missing := e.appendCmd(instanceworker.UpdateInstance, "shop", "orders", "nope", map[string]any{"data": map[string]any{"n": 1}})
	a3 := e.appendCmd(instanceworker.CreateInstance, "shop", "orders", "a", create("shop", "orders", strp("a"), map[string]any{"n": 9}))
	b2 := e.appendCmd(instanceworker.DeleteInstance, "shop", "orders", "42", map[string]any{})
	b3 := e.appendCmd(instanceworker.UpdateInstance, "shop", "orders", "42", map[string]any{"data": map[string]any{"n": 5}})
	// Same instance id, other class: a different document.
	c1 := e.appendCmd(instanceworker.CreateInstance, "shop", "customers", "a", create("shop", "customers", strp("a"), map[string]any{"name": "Ann"}))
	all := []cmd{a1, a2, b1, missing, a3, b2, b3, c1}
	e.publish(all...)

	e.startInProcess(nil)
	testenv.WaitFor(t, 30*time.Second, "all commands done", func() bool { return e.allDone(all...) })

	wantOutcomes := []struct {
		c    cmd
		want claim.Outcome
	}{
		{a1, claim.Applied()}, {a2, claim.Applied()}, {b1, claim.Applied()},
		{missing, claim.Rejected(instanceworker.ReasonMissing)}, {a3, claim.Rejected(instanceworker.ReasonExists)},
		{b2, claim.Applied()}, {b3, claim.Rejected(instanceworker.ReasonDeleted)}, {c1, claim.Applied()},
	}
	for i, w := range wantOutcomes {
		if got := e.outcome(w.c); got != w.want {
			t.Errorf("command %d: outcome %+v, want %+v", i, got, w.want)
		}
	}
	wantEvents := map[string][]string{
		"shop:orders:a": {"1×1", "2×1"}, "shop:orders:42": {"1×1", "2×1"}, "shop:customers:a": {"1×1"},
	}
	if got := e.domainEvents(); !reflect.DeepEqual(got, wantEvents) {
		t.Errorf("domain events %v, want %v", got, wantEvents)
	}
	v, src, ok := e.doc("shop", "orders", "a")
	if !ok || v != 2 || src["n"] != float64(2) || !reflect.DeepEqual(src["tags"], map[string]any{"y": float64(2)}) || src["deleted"] != false ||
		src["sequence_number"] != float64(2) || src["instance_id"] != "a" || src["class"] != "orders" || src["db"] != "shop" {
		t.Errorf("orders:a version %d doc %v", v, src)
	}
	v, src, ok = e.doc("shop", "orders", "42")
	if !ok || v != 2 || src["deleted"] != true || src["n"] != nil {
		t.Errorf("orders:42 (tombstone) version %d doc %v", v, src)
	}
	if v, src, ok = e.doc("shop", "customers", "a"); !ok || v != 1 || src["name"] != "Ann" {
		t.Errorf("customers:a version %d doc %v", v, src)
	}
	// The domain event of a2 carries the full new state and the deterministic id.
	ev, err := e.store.ByEventID(ctxT(t), envelope.DomainEventID(a2.ev.Envelope.Metadata.CommandID(), instanceworker.InstanceUpdated,
		envelope.AggregateTypeInstance, "shop:orders:a").String())
	if err != nil {
		t.Fatal(err)
	}
	var state map[string]any
	_ = json.Unmarshal(ev.Envelope.Data, &state)
	if ev.Envelope.SequenceNumber != 2 || ev.Envelope.Metadata.CausationID() != a2.ev.Envelope.EventID ||
		!reflect.DeepEqual(state, map[string]any{"n": float64(2), "tags": map[string]any{"y": float64(2)}}) {
		t.Errorf("domain event %s", ev.Raw)
	}
	testenv.WaitFor(t, 10*time.Second, "offsets committed", func() bool { c, end := e.committed(); return c == end })
	if n := len(e.dlqRecords()); n != 0 {
		t.Errorf("DLQ holds %d records, want 0", n)
	}
}

// TestOutOfOrder publishes slot k+1 before slot k: k+1 waits, k applies,
// then k+1; the result equals in-order processing.
func TestOutOfOrder(t *testing.T) {
	e := newEnv(t, 1)
	c1 := e.appendCmd(instanceworker.CreateInstance, "shop", "orders", "o", create("shop", "orders", strp("o"), map[string]any{"v": 1}))
	c2 := e.appendCmd(instanceworker.UpdateInstance, "shop", "orders", "o", map[string]any{"data": map[string]any{"v": 2}})
	c3 := e.appendCmd(instanceworker.UpdateInstance, "shop", "orders", "o", map[string]any{"data": map[string]any{"w": 3}})
	e.publish(c3, c1, c2)
	e.startInProcess(nil)
	testenv.WaitFor(t, 30*time.Second, "all done", func() bool { return e.allDone(c1, c2, c3) })
	v, src, _ := e.doc("shop", "orders", "o")
	if v != 3 || src["v"] != float64(2) || src["w"] != float64(3) {
		t.Errorf("version %d doc %v, want version 3 {v:2, w:3}", v, src)
	}
	if got := e.domainEvents()["shop:orders:o"]; !reflect.DeepEqual(got, []string{"1×1", "2×1", "3×1"}) {
		t.Errorf("domain events %v", got)
	}
	testenv.WaitFor(t, 10*time.Second, "offsets committed", func() bool { c, end := e.committed(); return c == end })
}

// TestDuplicatesAndTwoWorkers delivers every command twice to two workers
// running at once: one effect each.
func TestDuplicatesAndTwoWorkers(t *testing.T) {
	e := newEnv(t, 4)
	var all []cmd
	for i := range 10 {
		id := fmt.Sprintf("i%d", i)
		all = append(all, e.appendCmd(instanceworker.CreateInstance, "shop", "orders", id, create("shop", "orders", strp(id), map[string]any{"v": 0})))
		for v := 1; v <= 3; v++ {
			all = append(all, e.appendCmd(instanceworker.UpdateInstance, "shop", "orders", id, map[string]any{"data": map[string]any{"v": v}}))
		}
	}
	e.publish(all...)
	e.publish(all...)
	e.startInProcess(map[string]string{"PROCESSED_EVENT_OWNER": "worker-a"})
	e.startInProcess(map[string]string{"PROCESSED_EVENT_OWNER": "worker-b"})
	testenv.WaitFor(t, 60*time.Second, "all done", func() bool { return e.allDone(all...) })
	events := e.domainEvents()
	for i := range 10 {
		agg := fmt.Sprintf("shop:orders:i%d", i)
		if got := events[agg]; !reflect.DeepEqual(got, []string{"1×1", "2×1", "3×1", "4×1"}) {
			t.Errorf("%s: domain events %v", agg, got)
		}
		if v, src, _ := e.doc("shop", "orders", fmt.Sprintf("i%d", i)); v != 4 || src["v"] != float64(3) {
			t.Errorf("%s: version %d doc %v", agg, v, src)
		}
	}
	testenv.WaitFor(t, 20*time.Second, "offsets committed", func() bool { c, end := e.committed(); return c == end })
	if n := len(e.dlqRecords()); n != 0 {
		t.Errorf("DLQ holds %d records", n)
	}
}

// TestFailures: poison records go to the DLQ with the shape of docs/worker-runtime.md#the-dead-letter-record without
// blocking others; retryable ES failures are retried. A document write
// that fails after the domain event was appended never makes the command
// DEAD (APPLIED means applied): a permanent one (a 400 mapping error) at
// once, a retryable one (500 on every write) after the max attempts, the
// command is applied with a stale read model. A redelivery does not re-run
// a finished command.
func TestFailures(t *testing.T) {
	e := newEnv(t, 1)
	ok1 := e.appendCmd(instanceworker.CreateInstance, "shop", "orders", "ok1", create("shop", "orders", strp("ok1"), map[string]any{"v": 1}))
	unknown := e.appendCmd("RENAME_INSTANCE", "shop", "orders", "u", map[string]any{})
	ok2 := e.appendCmd(instanceworker.CreateInstance, "shop", "orders", "ok2", create("shop", "orders", strp("ok2"), map[string]any{"v": 1}))

	// The documents are written in one bulk per round: faults are per item.
	rejectItem := func(id string, times int) func() {
		return e.es.InjectFault(esserver.Fault{Match: esserver.MatchPath(http.MethodPost, "/_bulk"), Times: times,
			RejectBulkItems: func(it esserver.BulkItem) bool { return it.ID == id }})
	}
	// 429 on the first two writes of ok1: repeated within the first attempt
	// (ESRetry), neither dead-lettered nor charged a second attempt.
	removeOK1 := rejectItem("orders:ok1", 2)
	e.publishRaw([]byte("Instance:shop:orders:bad"), []byte(`{"event_id": nope`))
	e.publish(ok1, unknown, ok2)
	e.startInProcess(nil)
	testenv.WaitFor(t, 30*time.Second, "done", func() bool { return e.allDone(ok1, ok2) })
	testenv.WaitFor(t, 10*time.Second, "unknown dead", func() bool { return e.statuses(unknown)[unknown.ev.Envelope.EventID] == claim.StatusDead })
	removeOK1()
	row, err := registrytest.Row(ctxT(t), e.pool, instanceworker.HandlerName, ok1.ev.Envelope.EventID)
	if attempts := row.Attempts; err != nil || attempts != 1 {
		t.Errorf("ok1 took %d registry attempts (%v), want 1: the 429s are repeated within the attempt", attempts, err)
	}

	// A permanent ES failure after the append (a 400 mapping error: v is a
	// long since ok1): applied at the first attempt, read model stale.
	perm := e.appendCmd(instanceworker.CreateInstance, "shop", "orders", "perm", create("shop", "orders", strp("perm"), map[string]any{"v": "not a number"}))
	e.publish(perm)
	testenv.WaitFor(t, 30*time.Second, "perm done", func() bool { return e.allDone(perm) })
	// A retryable one (500 on every write of busy): applied with a stale
	// read model at the last attempt.
	busy := e.appendCmd(instanceworker.CreateInstance, "shop", "orders", "busy", create("shop", "orders", strp("busy"), map[string]any{"v": 1}))
	e.es.InjectFault(esserver.Fault{Match: matchBody("/_bulk", "orders:busy"), BulkItemStatus: http.StatusInternalServerError})
	e.publish(busy)
	testenv.WaitFor(t, 30*time.Second, "busy done", func() bool { return e.allDone(busy) })
	testenv.WaitFor(t, 10*time.Second, "offsets committed", func() bool { c, end := e.committed(); return c == end })
	for _, c := range []struct {
		c        cmd
		attempts int
		reason   string
	}{{perm, 1, "400 document_parsing_exception"}, {busy, 3, "500"}} {
		o := e.outcome(c.c)
		if o.Result != claim.OutcomeApplied || !readmodel.IsStaleReason(o.Reason) || !strings.Contains(o.Reason, c.reason) {
			t.Errorf("%s: outcome %+v, want applied with a stale read model (%s)", c.c.ev.Envelope.AggregateID, o, c.reason)
		}
		row, err := registrytest.Row(ctxT(t), e.pool, instanceworker.HandlerName, c.c.ev.Envelope.EventID)
		if n := row.Attempts; err != nil || n != c.attempts {
			t.Errorf("%s: %d attempts (%v), want %d", c.c.ev.Envelope.AggregateID, n, err, c.attempts)
		}
	}
	if got := e.domainEvents(); fmt.Sprint(got["shop:orders:perm"], got["shop:orders:busy"]) != "[1×1] [1×1]" {
		t.Errorf("domain events of perm and busy: %v", got)
	}
	recs := e.dlqRecords()
	byClass := map[string][]worker.DLQRecord{}
	for _, r := range recs {
		var d worker.DLQRecord
		if err := json.Unmarshal(r.Value, &d); err != nil {
			t.Fatal(err)
		}
		var fields map[string]any
		_ = json.Unmarshal(r.Value, &fields)
		if len(fields) != 12 {
			t.Errorf("DLQ record has %d fields: %v", len(fields), fields)
		}
		if string(r.Key) != d.OriginalKey || d.Handler != instanceworker.HandlerName || d.OriginalTopic != e.topic || d.FailedAt.IsZero() || d.FirstFailedAt.IsZero() {
			t.Errorf("DLQ record %s", r.Value)
		}
		byClass[d.ErrorClass] = append(byClass[d.ErrorClass], d)
	}
	if len(recs) != 2 || len(byClass[worker.ClassParse]) != 1 || len(byClass[worker.ClassPermanent]) != 1 {
		t.Errorf("DLQ by class: %v", byClass)
	}
	if _, _, found := e.doc("shop", "orders", "perm"); found {
		t.Error("a document was written for perm")
	}
	if v, _, _ := e.doc("shop", "orders", "ok1"); v != 1 {
		t.Errorf("ok1 version %d", v)
	}

	// Redelivery of a finished command: acknowledged, not re-run, no DLQ
	// record.
	e.es.ClearFaults()
	e.publish(perm)
	testenv.WaitFor(t, 10*time.Second, "redelivery committed", func() bool { c, end := e.committed(); return c == end })
	if n := len(e.dlqRecords()); n != 2 {
		t.Errorf("DLQ holds %d records after redelivery, want 2", n)
	}
	if got := e.domainEvents()["shop:orders:perm"]; fmt.Sprint(got) != "[1×1]" {
		t.Errorf("redelivery re-ran perm: domain events %v", got)
	}
}
