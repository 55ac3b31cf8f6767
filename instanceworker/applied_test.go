package instanceworker_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/esserver"
	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/shared/claim"
)

// TestMappingConflictAfterAppend (issue 21.5): a command whose domain event
// is appended but whose document Elasticsearch refuses (a mapping conflict)
// is APPLIED with a stale read model, not DEAD; the instance is not
// blocked: later commands on it are applied too (stale while the state
// still conflicts), the first write that fits brings the document up to
// date, other instances are untouched, nothing goes to the DLQ.
func TestMappingConflictAfterAppend(t *testing.T) {
	e := newEnv(t, 2)
	steps := []struct {
		c     cmd
		stale bool
	}{
		{e.appendCmd(instanceworker.CreateInstance, "map", "things", "a", create("map", "things", strp("a"), map[string]any{"v": 1, "n": 1})), false},
		// v is mapped long: "abc" conflicts.
		{e.appendCmd(instanceworker.UpdateInstance, "map", "things", "a", map[string]any{"data": map[string]any{"v": "abc"}}), true},
		// The state still holds v "abc": stale again, but applied.
		{e.appendCmd(instanceworker.UpdateInstance, "map", "things", "a", map[string]any{"data": map[string]any{"n": 2}}), true},
		// Fixes v: written, the document is current again.
		{e.appendCmd(instanceworker.UpdateInstance, "map", "things", "a", map[string]any{"data": map[string]any{"v": 5}}), false},
	}
	other := e.appendCmd(instanceworker.CreateInstance, "map", "things", "b", create("map", "things", strp("b"), map[string]any{"v": 2}))
	all := []cmd{other}
	for _, s := range steps {
		all = append(all, s.c)
	}
	e.startInProcess(nil)
	// One at a time, so that the conflict is with the mapping v got from a.
	e.publish(steps[0].c)
	testenv.WaitFor(t, 30*time.Second, "create done", func() bool { return e.allDone(steps[0].c) })
	e.publish(steps[1].c)
	testenv.WaitFor(t, 30*time.Second, "conflicting update done", func() bool { return e.allDone(steps[1].c) })
	if v, src, _ := e.doc("map", "things", "a"); v != 1 || src["v"] != float64(1) {
		t.Errorf("after the conflict: version %d doc %v, want the old version 1", v, src)
	}
	e.publish(steps[2].c, other)
	testenv.WaitFor(t, 30*time.Second, "later commands done", func() bool { return e.allDone(steps[2].c, other) })
	e.publish(steps[3].c)
	testenv.WaitFor(t, 30*time.Second, "all done", func() bool { return e.allDone(all...) })
	for i, s := range steps {
		o := e.outcome(s.c)
		if o.Result != claim.OutcomeApplied || readmodel.IsStaleReason(o.Reason) != s.stale {
			t.Errorf("step %d: outcome %+v, want applied (stale %v)", i, o, s.stale)
		}
		if s.stale && !strings.Contains(o.Reason, "400") {
			t.Errorf("step %d: reason %q does not carry the refusal", i, o.Reason)
		}
	}
	if got := fmt.Sprint(e.domainEvents()["map:things:a"]); got != "[1×1 2×1 3×1 4×1]" {
		t.Errorf("domain events of a: %s", got)
	}
	if v, src, _ := e.doc("map", "things", "a"); v != 4 || src["v"] != float64(5) || src["n"] != float64(2) {
		t.Errorf("a after the fix: version %d doc %v", v, src)
	}
	if v, _, _ := e.doc("map", "things", "b"); v != 1 {
		t.Errorf("b: version %d", v)
	}
	if n := len(e.dlqRecords()); n != 0 {
		t.Errorf("DLQ holds %d records", n)
	}
}

// TestRepairStaleDocument: a document left stale by a refused write is
// rewritten from the event store by Repair once the cause is gone.
func TestRepairStaleDocument(t *testing.T) {
	e := newEnv(t, 1)
	c1 := e.appendCmd(instanceworker.CreateInstance, "rep", "things", "a", create("rep", "things", strp("a"), map[string]any{"v": 1}))
	c2 := e.appendCmd(instanceworker.UpdateInstance, "rep", "things", "a", map[string]any{"data": map[string]any{"v": 2}})
	e.startInProcess(nil)
	e.publish(c1)
	testenv.WaitFor(t, 30*time.Second, "create done", func() bool { return e.allDone(c1) })
	remove := e.es.InjectFault(esserver.Fault{Match: matchBody("/_bulk", "things:a"), BulkItemStatus: http.StatusBadRequest})
	e.publish(c2)
	testenv.WaitFor(t, 30*time.Second, "update done", func() bool { return e.allDone(c2) })
	remove()
	if o := e.outcome(c2); !readmodel.IsStaleReason(o.Reason) {
		t.Fatalf("update outcome %+v, want a stale read model", o)
	}
	if v, _, _ := e.doc("rep", "things", "a"); v != 1 {
		t.Fatalf("document version %d before the repair, want 1 (stale)", v)
	}
	w := e.newWorker(e.esURL)
	for i, want := range []readmodel.WriteResult{readmodel.Written, readmodel.AlreadyApplied} {
		res, err := w.Repair(ctxT(t), c1.ev.Envelope.AggregateID)
		if err != nil || res != want {
			t.Fatalf("repair %d: %v, %v; want %v", i, res, err, want)
		}
	}
	if v, src, _ := e.doc("rep", "things", "a"); v != 2 || src["v"] != float64(2) || src["created_at"] == nil {
		t.Errorf("after the repair: version %d doc %v", v, src)
	}
}

// TestReusedCommandID (issue 21.7): a command that reuses another command's
// command_id with a different payload is REJECTED with the idempotency
// mismatch as reason; it is never applied with the other command's domain
// event, and its slot gets no domain event.
func TestReusedCommandID(t *testing.T) {
	e := newEnv(t, 1)
	create1 := e.appendCmd(instanceworker.CreateInstance, "dup", "things", "a", create("dup", "things", strp("a"), map[string]any{"v": 1}))
	first := e.appendCmdID(instanceworker.UpdateInstance, "dup", "things", "a", map[string]any{"data": map[string]any{"v": 2}}, "cmd-reused")
	again := e.appendCmdID(instanceworker.UpdateInstance, "dup", "things", "a", map[string]any{"data": map[string]any{"v": 3}}, "cmd-reused")
	after := e.appendCmd(instanceworker.UpdateInstance, "dup", "things", "a", map[string]any{"data": map[string]any{"w": 1}})
	all := []cmd{create1, first, again, after}
	e.startInProcess(nil)
	for _, c := range all { // one at a time: batches and single handling alike
		e.publish(c)
		testenv.WaitFor(t, 30*time.Second, "command done", func() bool { return e.allDone(c) })
	}
	if o := e.outcome(first); o != claim.Applied() {
		t.Errorf("first use: %+v", o)
	}
	o := e.outcome(again)
	if o.Result != claim.OutcomeRejected || !strings.HasPrefix(o.Reason, instanceworker.ReasonCommandIDReused) || !strings.Contains(o.Reason, "cmd-reused") {
		t.Errorf("reuse: outcome %+v, want rejected (%s)", o, instanceworker.ReasonCommandIDReused)
	}
	if o := e.outcome(after); o != claim.Applied() {
		t.Errorf("after: %+v", o)
	}
	if got := fmt.Sprint(e.domainEvents()["dup:things:a"]); got != "[1×1 2×1 4×1]" {
		t.Errorf("domain events %s, want none in the reusing command's slot 3", got)
	}
	if v, src, _ := e.doc("dup", "things", "a"); v != 4 || src["v"] != float64(2) || src["w"] != float64(1) {
		t.Errorf("document version %d %v", v, src)
	}
}

// TestBulkRequestRefused (issue 21, suspected "request-level bulk 400"):
// when Elasticsearch refuses a whole bulk request because of one of its
// documents, the batch is split until the refused document is alone: only
// its command is affected (applied, read model stale: its event is
// stored), the others are written.
func TestBulkRequestRefused(t *testing.T) {
	e := newEnv(t, 1)
	var cs []cmd
	for i := range 6 {
		data := map[string]any{"v": i}
		if i == 3 {
			data["poison"] = "refuse-this-request"
		}
		id := fmt.Sprint("i", i)
		cs = append(cs, e.appendCmd(instanceworker.CreateInstance, "blk", "things", id, create("blk", "things", strp(id), data)))
	}
	e.es.InjectFault(esserver.Fault{Match: matchBody("/_bulk", "refuse-this-request"), Status: http.StatusBadRequest,
		ErrorType: "illegal_argument_exception", Reason: "request refused (test)"})
	e.publish(cs...) // one partition, one poll: one batch
	e.startInProcess(nil)
	testenv.WaitFor(t, 30*time.Second, "all done", func() bool { return e.allDone(cs...) })
	for i, c := range cs {
		o := e.outcome(c)
		_, _, found := e.doc("blk", "things", fmt.Sprint("i", i))
		if i == 3 {
			if !readmodel.IsStaleReason(o.Reason) || found {
				t.Errorf("poison: outcome %+v, document found %v", o, found)
			}
			continue
		}
		if o != claim.Applied() || !found {
			t.Errorf("command %d: outcome %+v, document found %v", i, o, found)
		}
	}
	if n := len(e.dlqRecords()); n != 0 {
		t.Errorf("DLQ holds %d records", n)
	}
}

// TestStateOverTheLimitRejected: a patch whose resulting state makes the
// domain event larger than the envelope limit is REJECTED with the store's
// reason — decided by the command and the state before it, so a retry can
// never succeed — instead of going DEAD to the DLQ; the instance's later
// commands are applied.
func TestStateOverTheLimitRejected(t *testing.T) {
	e := newEnv(t, 1)
	blob := strings.Repeat("x", 600<<10)
	c1 := e.appendCmd(instanceworker.CreateInstance, "big", "things", "a", create("big", "things", strp("a"), map[string]any{"a": blob}))
	c2 := e.appendCmd(instanceworker.UpdateInstance, "big", "things", "a", map[string]any{"data": map[string]any{"b": blob}})
	c3 := e.appendCmd(instanceworker.UpdateInstance, "big", "things", "a", map[string]any{"data": map[string]any{"w": 1}})
	e.startInProcess(nil)
	e.publish(c1, c2, c3)
	testenv.WaitFor(t, 60*time.Second, "commands done", func() bool { return e.allDone(c1, c2, c3) })
	if o := e.outcome(c1); o != claim.Applied() {
		t.Errorf("create: %+v", o)
	}
	if o := e.outcome(c2); o.Result != claim.OutcomeRejected || !strings.HasPrefix(o.Reason, instanceworker.ReasonInvalidEvent) || !strings.Contains(o.Reason, "exceeds the limit") {
		t.Errorf("patch over the limit: outcome %+v, want rejected (%s …)", o, instanceworker.ReasonInvalidEvent)
	}
	if o := e.outcome(c3); o != claim.Applied() {
		t.Errorf("later patch: %+v", o)
	}
	if n := len(e.dlqRecords()); n != 0 {
		t.Errorf("%d DLQ records, want 0", n)
	}
	if v, src, _ := e.doc("big", "things", "a"); v != 3 || src["w"] != float64(1) || src["b"] != nil {
		t.Errorf("document version %d, w=%v, b set=%v", v, src["w"], src["b"] != nil)
	}
}
