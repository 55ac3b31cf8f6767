package instanceworker_test

import (
	"crypto/sha256"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/eventstoretest"
	"github.com/sluicehq/sluice/registry/registrytest"

	"github.com/google/uuid"

	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/envelope"
)

// healLease is the PROCESSED_EVENT_LEASE_TIMEOUT of the heal tests: also the
// stall after which a WAIT heals (docs/registry.md#sequence-guard-policies-per-handler).
const healLease = 3 * time.Second

var healVars = map[string]string{
	"PROCESSED_EVENT_LEASE_TIMEOUT_SECONDS":      "3",
	"PROCESSED_EVENT_HEARTBEAT_INTERVAL_SECONDS": "1",
}

// processedAt returns the database time at which the command's registry row
// was finished.
func (e *env) processedAt(c cmd) time.Time {
	e.t.Helper()
	row, err := registrytest.Row(ctxT(e.t), e.pool, instanceworker.HandlerName, c.ev.Envelope.EventID)
	if err != nil {
		e.t.Fatal(err)
	}
	if row.ProcessedAt.IsZero() {
		e.t.Fatalf("%s: not finished", c.ev.Envelope.EventID)
	}
	return row.ProcessedAt
}

// lastSequence returns the instance worker's aggregate_versions value.
func (e *env) lastSequence(agg string) int64 {
	e.t.Helper()
	last, err := registrytest.LastSequence(ctxT(e.t), e.pool, instanceworker.HandlerName, agg)
	if err != nil {
		e.t.Fatal(err)
	}
	return last
}

// abandonSlot reserves the next slot of an instance aggregate the way a
// writer that crashed after its reservation leaves it, already resolved by
// the relay: an appends row in state abandoned, no segment line, no command.
// It returns the slot.
func (e *env) abandonSlot(db, class, id string) int64 {
	e.t.Helper()
	agg, err := envelope.InstanceAggregateID(db, class, id)
	if err != nil {
		e.t.Fatal(err)
	}
	hash := sha256.Sum256([]byte("abandoned"))
	_, slot, err := eventstoretest.Forge(ctxT(e.t), e.pool, eventstoretest.Forged{EventID: uuid.NewString(), Kind: envelope.KindCommand,
		AggregateType: envelope.AggregateTypeInstance, AggregateID: agg, State: eventstore.StateAbandoned, CanonicalHash: hash[:]})
	if err != nil {
		e.t.Fatal(err)
	}
	return slot
}

// TestHealMissingCommands: the commands of slots 2 and 3 are in the event
// store but never delivered on the topic. Slot 4 waits (the worker does not
// commit past it) until the aggregate has been stalled for the lease
// timeout, then the worker heals: it reads slots 2 and 3 from the store,
// processes them in order, then slot 4.
func TestHealMissingCommands(t *testing.T) {
	e := newEnv(t, 1)
	c1 := e.appendCmd(instanceworker.CreateInstance, "heal", "things", "m", create("heal", "things", strp("m"), map[string]any{"v": 1}))
	c2 := e.appendCmd(instanceworker.UpdateInstance, "heal", "things", "m", map[string]any{"data": map[string]any{"v": 2, "a": "x"}})
	c3 := e.appendCmd(instanceworker.UpdateInstance, "heal", "things", "m", map[string]any{"data": map[string]any{"b": 3}})
	c4 := e.appendCmd(instanceworker.UpdateInstance, "heal", "things", "m", map[string]any{"data": map[string]any{"v": 4, "a": nil}})
	if c4.ev.Envelope.SequenceNumber != 4 {
		t.Fatalf("slot of the last command %d, want 4", c4.ev.Envelope.SequenceNumber)
	}
	e.publish(c1, c4) // slots 2 and 3 never reach the topic

	start := time.Now()
	e.startInProcess(healVars)
	testenv.WaitFor(t, 30*time.Second, "slot 1 done", func() bool { return e.allDone(c1) })
	testenv.WaitFor(t, 10*time.Second, "slot 1 committed", func() bool { c, _ := e.committed(); return c == 1 })

	// Slot 4 waits: nothing of slots 2–4 is done, the document stays at
	// slot 1, and the offset does not move past the waiting record. The
	// evidence that it waits (not a pause): its claims answered WAIT twice.
	e.waitedTwice()
	if st := e.statuses(c2, c3, c4); st[c2.ev.Envelope.EventID] != "none" || st[c3.ev.Envelope.EventID] != "none" || st[c4.ev.Envelope.EventID] != "none" {
		t.Fatalf("before the lease timeout: statuses %v, want no rows (WAIT records nothing)", st)
	}
	if v, _, _ := e.doc("heal", "things", "m"); v != 1 {
		t.Fatalf("before the lease timeout: document version %d, want 1", v)
	}
	if c, end := e.committed(); c != 1 || end != 2 {
		t.Fatalf("while waiting: committed %d of %d, want 1 (not past the waiting record)", c, end)
	}

	testenv.WaitFor(t, 30*time.Second, "healed and all done", func() bool { return e.allDone(c1, c2, c3, c4) })
	t.Logf("healed %s after start", time.Since(start).Round(time.Millisecond))
	// Healing started no earlier than the lease timeout after the aggregate
	// last advanced (database clock), and went in slot order.
	if d := e.processedAt(c2).Sub(e.processedAt(c1)); d < healLease {
		t.Errorf("slot 2 healed %s after slot 1 finished, want >= the lease timeout %s", d, healLease)
	}
	if p2, p3, p4 := e.processedAt(c2), e.processedAt(c3), e.processedAt(c4); !p2.Before(p3) || !p3.Before(p4) {
		t.Errorf("slots finished out of order: 2 at %s, 3 at %s, 4 at %s", p2, p3, p4)
	}
	for _, c := range []cmd{c1, c2, c3, c4} {
		if o := e.outcome(c); o != claim.Applied() {
			t.Errorf("slot %d outcome %+v, want applied", c.ev.Envelope.SequenceNumber, o)
		}
	}
	if got := e.domainEvents()["heal:things:m"]; !reflect.DeepEqual(got, []string{"1×1", "2×1", "3×1", "4×1"}) {
		t.Errorf("domain events %v, want one per slot 1–4", got)
	}
	v, src, _ := e.doc("heal", "things", "m")
	if v != 4 || src["v"] != float64(4) || src["b"] != float64(3) || src["a"] != nil || src["sequence_number"] != float64(4) {
		t.Errorf("document version %d %v, want version 4 {v:4, b:3}", v, src)
	}
	if last := e.lastSequence("Instance:heal:things:m"); last != 4 {
		t.Errorf("aggregate_versions.last_sequence %d, want 4", last)
	}
	testenv.WaitFor(t, 10*time.Second, "offsets committed", func() bool { c, end := e.committed(); return c == end })
	if n := len(e.dlqRecords()); n != 0 {
		t.Errorf("DLQ holds %d records, want 0", n)
	}
}

// TestHealAbandonedSlot: slot 2 is an abandoned reservation (no command
// will ever exist for it). The command at slot 3 waits, and after the lease
// timeout the worker finishes slot 2 with AdvanceTo and applies slot 3 on
// top of slot 1's state.
func TestHealAbandonedSlot(t *testing.T) {
	e := newEnv(t, 1)
	c1 := e.appendCmd(instanceworker.CreateInstance, "heal", "things", "g", create("heal", "things", strp("g"), map[string]any{"v": 1, "keep": true}))
	if slot := e.abandonSlot("heal", "things", "g"); slot != 2 {
		t.Fatalf("abandoned slot %d, want 2", slot)
	}
	c3 := e.appendCmd(instanceworker.UpdateInstance, "heal", "things", "g", map[string]any{"data": map[string]any{"v": 3}})
	if c3.ev.Envelope.SequenceNumber != 3 {
		t.Fatalf("slot of the update %d, want 3", c3.ev.Envelope.SequenceNumber)
	}
	e.publish(c1, c3)

	e.startInProcess(healVars)
	testenv.WaitFor(t, 30*time.Second, "slot 1 done", func() bool { return e.allDone(c1) })
	e.waitedTwice()
	if st := e.statuses(c3)[c3.ev.Envelope.EventID]; st != "none" {
		t.Fatalf("before the lease timeout: slot 3 status %s, want no row (WAIT)", st)
	}
	if c, _ := e.committed(); c > 1 {
		t.Fatalf("while waiting: committed %d, want at most 1", c)
	}

	testenv.WaitFor(t, 30*time.Second, "slot 3 done after healing", func() bool { return e.allDone(c3) })
	if d := e.processedAt(c3).Sub(e.processedAt(c1)); d < healLease {
		t.Errorf("slot 3 applied %s after slot 1, want >= the lease timeout %s", d, healLease)
	}
	if o := e.outcome(c3); o != claim.Applied() {
		t.Errorf("slot 3 outcome %+v, want applied", o)
	}
	if got := e.domainEvents()["heal:things:g"]; !reflect.DeepEqual(got, []string{"1×1", "3×1"}) {
		t.Errorf("domain events %v, want slots 1 and 3 (slot 2 empty)", got)
	}
	v, src, _ := e.doc("heal", "things", "g")
	if v != 3 || src["v"] != float64(3) || src["keep"] != true || src["sequence_number"] != float64(3) {
		t.Errorf("document version %d %v, want version 3 {v:3, keep:true}", v, src)
	}
	if last := e.lastSequence("Instance:heal:things:g"); last != 3 {
		t.Errorf("aggregate_versions.last_sequence %d, want 3", last)
	}
	testenv.WaitFor(t, 10*time.Second, "offsets committed", func() bool { c, end := e.committed(); return c == end })
	if n := len(e.dlqRecords()); n != 0 {
		t.Errorf("DLQ holds %d records, want 0", n)
	}
}

// waitedTwice waits until the in-process worker's claims were answered
// WAIT (a record behind a missing slot) at least twice: the evidence that
// a record is held back, before the checks that it was not applied. The
// deadline is a hang guard; the checks must come before the lease timeout
// heals the slot, and this returns as soon as the worker has gone round.
func (e *env) waitedTwice() {
	e.t.Helper()
	testenv.WaitFor(e.t, 30*time.Second, "claims answered WAIT twice", func() bool {
		return e.counter("sluice_worker_retries_total", map[string]string{"reason": "wait"}) >= 2
	})
}
