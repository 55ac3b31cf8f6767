package eventstore

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/shared/envelope"
)

// The reservation's rules, in one place (docs/eventstore.md#append-protocol-group-commit):
// decide is the pure step between reading what the rules need from
// Postgres (lookup, or assume) and writing what they decided (write). It
// does no I/O, reads no clock and keeps no state, so it is tested without
// Postgres (decide_test.go, FuzzDecide).

// facts is what the rules of a group look at in Postgres.
type facts struct {
	// stored: appends rows with the group's event_ids (idempotency).
	stored map[string]indexRow
	// superseded: event_ids of abandoned rows whose aggregate has a later
	// slot that is not abandoned.
	superseded map[string]bool
	// slots: rows at the slots the group names, by slotKeyOf.
	slots map[string]slotRow
	// last: the aggregates' sequences rows. An aggregate that is not in it
	// has an unknown last sequence: decide then hands out sequences
	// relative to it, which the write turns into numbers (relative
	// verdicts), and a rule that needs the number fails with errNeedFacts.
	last map[aggKey]lastSeq
}

// lastSeq is an aggregate's sequences row.
type lastSeq struct {
	seq    int64
	exists bool // the row exists (seq is 0 when it does not)
}

type slotRow struct{ eventID, state string }

type aggKey struct{ t, i string }

// compareAggKeys orders aggregates by (type, id), bytewise (COLLATE "C"
// in SQL): concurrent reservations lock sequences rows in this one order,
// so they cannot deadlock.
func compareAggKeys(a, b aggKey) int {
	if c := strings.Compare(a.t, b.t); c != 0 {
		return c
	}
	return strings.Compare(a.i, b.i)
}

// slotKeyOf names slot seq of an aggregate for one kind of event.
func slotKeyOf(aggType, aggID string, seq int64, kind envelope.Kind) string {
	return aggType + "\x00" + aggID + "\x00" + strconv.FormatInt(seq, 10) + "\x00" + string(kind)
}

// rules are the settings the rules depend on.
type rules struct {
	allocatorOff bool   // EVENT_STORE_SEQUENCE_ALLOCATOR_MODE=off
	mismatchWarn bool   // EVENT_STORE_IDEMPOTENCY_MISMATCH_MODE=warn
	writerID     string // this Store's writer_id
}

// errNeedFacts: a rule needs a fact the decision was not given (an
// aggregate's last sequence); the caller reads the facts and decides again.
var errNeedFacts = errors.New("eventstore: reserve: the rules need facts that were not read")

// waitKind says why an item waits instead of being reserved.
type waitKind uint8

const (
	waitNone   waitKind = iota
	waitWriter          // another writer's live reservation holds its event_id: back off
	waitBatch           // its atomic batch waits for another member
)

// verdict is what decide says of one item.
type verdict struct {
	accepted bool
	// seq is an accepted item's sequence number; when rel, its place in
	// the aggregate's advance (1 for the first sequence handed out), the
	// aggregate's last sequence being unknown.
	seq int64
	rel bool

	err      error
	stored   *indexRow                 // an idempotent hit: the stored event is the result
	mismatch *IdempotencyMismatchError // warn mode: stored, but the canonical forms differ
	moved    *indexRow                 // a retry of an abandoned append: it replaces this row
	resolve  string                    // a dead reservation of its event_id to settle (segment key); then again
	wait     waitKind
}

// advance moves one aggregate's last sequence.
type advance struct {
	agg   aggKey
	delta int64
	// create: the row does not exist (a fact read): the write creates it,
	// and a concurrent creation fails the write. Otherwise the write adds
	// delta to the row's value (creating it at delta when missing).
	create bool
}

// decision is decide's answer for a group.
type decision struct {
	verdicts []verdict // one per item
	order    []int     // the accepted items (indices) in position order
	advances []advance // sorted by aggregate (compareAggKeys)
}

// decide applies the reservation's rules to a group (items in arrival
// order) given the facts: idempotency by event_id, the slot rules, the
// all-or-nothing rule of atomic batches, then sequences with optimistic
// concurrency in arrival order. It is pure.
func decide(items []*item, f facts, r rules) (decision, error) {
	d := decision{verdicts: make([]verdict, len(items))}
	live := make([]int, 0, len(items))
	for n, it := range items {
		v := &d.verdicts[n]
		if row, ok := f.stored[it.env.EventID]; ok {
			*v = r.settleStored(it, row)
			if v.moved == nil {
				continue
			}
		}
		if it.slotKey != "" {
			if err := slotRefusal(it, f.slots); err != nil {
				*v = verdict{err: err}
				continue
			}
		}
		live = append(live, n)
	}
	live = settleUnits(items, d.verdicts, live)
	sq := sequencer{r: r, facts: f, last: map[aggKey]int64{}, top: map[aggKey]int64{}}
	for _, n := range live {
		if err := sq.assign(items, live, n, &d); err != nil {
			return decision{}, err
		}
	}
	d.advances = sq.advances()
	return d, nil
}

// settleStored decides what becomes of an item whose event_id is in
// appends (docs/eventstore.md#idempotency-event_id).
func (r rules) settleStored(it *item, row indexRow) verdict {
	switch row.state {
	case stateCommitted, stateAbandoned:
		h := it.hashWithTime(envelope.NewTimestamp(row.occurredAt))
		if !bytes.Equal(h[:], row.hash) {
			mm := &IdempotencyMismatchError{EventID: row.eventID, StoredHash: hex.EncodeToString(row.hash), NewHash: hex.EncodeToString(h[:])}
			if r.mismatchWarn && row.state == stateCommitted {
				return verdict{stored: &row, mismatch: mm}
			}
			return verdict{err: mm}
		}
		if row.state == stateCommitted {
			return verdict{stored: &row}
		}
		// Never re-committed at its old position, which the relay may
		// have passed (and left its lookback): the append is reserved
		// afresh, and published in order like a new one.
		return verdict{moved: &row}
	case stateReserved:
		if row.writer == r.writerID || row.stale {
			// Our own reservation whose group is over (the committer never
			// has one event_id in two groups), or a writer silent for longer
			// than the append timeout: settle it, then try again.
			return verdict{resolve: row.key}
		}
		return verdict{wait: waitWriter}
	default:
		return verdict{err: fmt.Errorf("eventstore: event %s has unknown state %q", row.eventID, row.state)}
	}
}

// slotRefusal applies the slot rules (docs/eventstore.md#slots-commands-and-domain-events)
// to an item that names its sequence number: no other event of its kind
// may hold the slot, and a domain event into its command's slot needs a
// command there that is not abandoned and, when metadata.causation_id is
// set, has that event_id. It returns the rule broken, or nil.
func slotRefusal(it *item, slots map[string]slotRow) *SlotError {
	e := it.env
	serr := &SlotError{AggregateType: e.AggregateType, AggregateID: e.AggregateID, Sequence: e.SequenceNumber, Kind: string(e.Kind)}
	if held, ok := slots[it.slotKey]; ok && held.eventID != e.EventID {
		serr.ExistingEventID, serr.Reason = held.eventID, "the slot already holds another "+string(e.Kind)
		if held.state == stateAbandoned {
			serr.Reason += " (abandoned; only a retry of that event_id can take it)"
		}
		return serr
	}
	if !it.slot {
		return nil
	}
	cmd, ok := slots[slotKeyOf(e.AggregateType, e.AggregateID, e.SequenceNumber, envelope.KindCommand)]
	switch cause := e.Metadata.CausationID(); {
	case !ok:
		serr.Reason = "the slot holds no command (a domain event without a command must not set sequence_number)"
	case cmd.state == stateAbandoned:
		serr.ExistingEventID, serr.Reason = cmd.eventID, "the slot's command was abandoned"
	case cause != "" && cause != cmd.eventID:
		serr.ExistingEventID, serr.Reason = cmd.eventID, "metadata.causation_id "+cause+" is not the slot's command"
	default:
		return nil
	}
	return serr
}

// settleUnits applies the all-or-nothing rule to the atomic batches of a
// group after the idempotency and slot rules: a member that failed fails
// the batch; a member that waits (another writer's live reservation of its
// event_id, or a dead one to settle) makes the whole batch wait; a mix of
// stored and new members is refused. It returns live without the members
// of the batches it settled.
func settleUnits(items []*item, vs []verdict, live []int) []int {
	var units map[*unit][]int
	for n, it := range items {
		if it.unit != nil {
			if units == nil {
				units = map[*unit][]int{}
			}
			units[it.unit] = append(units[it.unit], n)
		}
	}
	dead := map[*unit]bool{}
	for u, ms := range units {
		failed, wait, fresh := -1, false, false
		var stored []string
		for _, m := range ms {
			switch v := vs[m]; {
			case v.err != nil && failed < 0:
				failed = m
			case v.wait != waitNone || v.resolve != "":
				wait = true
			case v.stored != nil:
				stored = append(stored, items[m].env.EventID)
			default:
				fresh = true
			}
		}
		switch {
		case failed >= 0:
			abortUnit(items, vs, ms, failed, vs[failed].err)
		case wait:
			for _, m := range ms {
				if vs[m].wait != waitWriter {
					vs[m] = verdict{wait: waitBatch}
				}
			}
		case len(stored) > 0 && fresh:
			abortUnit(items, vs, ms, ms[0], &PartialBatchError{StoredEventIDs: stored})
		default:
			continue
		}
		dead[u] = true
	}
	if len(dead) == 0 {
		return live
	}
	return slices.DeleteFunc(slices.Clone(live), func(n int) bool { return dead[items[n].unit] })
}

// abortUnit fails every member of an atomic batch: failed with cause, the
// others with a BatchAbortedError naming it.
func abortUnit(items []*item, vs []verdict, ms []int, failed int, cause error) {
	for _, m := range ms {
		vs[m] = verdict{err: &BatchAbortedError{Index: items[failed].idx, Cause: cause}}
	}
	vs[failed] = verdict{err: cause}
}

// sequencer hands out sequence numbers per aggregate in arrival order.
type sequencer struct {
	r     rules
	facts facts
	last  map[aggKey]int64 // last sequence handed out (counted from 0 when the aggregate's is unknown)
	top   map[aggKey]int64 // highest sequence accepted in this group
	units map[*unit]bool   // atomic batches done
}

// cur is the aggregate's last sequence at this point of the group, and
// whether it is known.
func (sq *sequencer) cur(k aggKey) (int64, bool) {
	f, known := sq.facts.last[k]
	if _, seen := sq.last[k]; !seen {
		sq.last[k] = f.seq
	}
	return sq.last[k], known
}

// assign decides item n (live), or the whole atomic batch it belongs to
// when it is the batch's first live member.
func (sq *sequencer) assign(items []*item, live []int, n int, d *decision) error {
	it := items[n]
	if u := it.unit; u != nil {
		if sq.units[u] {
			return nil
		}
		if sq.units == nil {
			sq.units = map[*unit]bool{}
		}
		sq.units[u] = true
		var ms []int
		for _, m := range live {
			if items[m].unit == u {
				ms = append(ms, m)
			}
		}
		slices.SortFunc(ms, func(a, b int) int { return items[a].idx - items[b].idx })
		return sq.unit(items, ms, d)
	}
	v := &d.verdicts[n]
	if it.slot {
		// a domain event into its command's slot: no sequence moves
		sq.accept(d, n, it.env.SequenceNumber, false)
		return nil
	}
	k := aggKey{it.env.AggregateType, it.env.AggregateID}
	cur, known := sq.cur(k)
	if v.moved != nil && !known {
		return errNeedFacts // its slot is compared with the aggregate's
	}
	if m := v.moved; m != nil && (sq.r.allocatorOff || !sq.facts.superseded[it.env.EventID] && m.seq > sq.top[k]) {
		// A retry of an abandoned append whose slot nothing after it
		// filled (every later slot of the aggregate is abandoned too, or
		// being retried here, in order): it keeps its slot — its
		// expected_seq held when the slot was handed out — and only its
		// position is fresh, so consumers still see the aggregate's
		// sequences in position order.
		sq.top[k] = max(sq.top[k], m.seq)
		sq.accept(d, n, m.seq, false)
		return nil
	}
	// Otherwise it is a new append: optimistic concurrency against the
	// aggregate as it is, and the next sequence; a retry's old slot stays
	// an empty one (docs/eventstore.md#abandoned-is-final-issue-21-item-2).
	if exp := it.env.ExpectedSeq; exp != nil {
		if !known {
			return errNeedFacts
		}
		if *exp != cur {
			*v = verdict{err: &ConflictError{AggregateType: k.t, AggregateID: k.i, ExpectedSeq: *exp, ActualSeq: cur}}
			return nil
		}
	}
	seq := cur + 1
	if sq.r.allocatorOff {
		if !known {
			return errNeedFacts
		}
		seq = it.env.SequenceNumber
	}
	sq.last[k] = max(cur, seq)
	sq.top[k] = max(sq.top[k], seq)
	sq.accept(d, n, seq, !known)
	return nil
}

// unit decides the members of one atomic batch (ms, in batch order): the
// batch's precondition against the aggregate's last sequence, then
// consecutive sequences; or every member fails. Retries of an abandoned
// batch (every member's row abandoned) keep the per-envelope rule of
// assign: their precondition held when they were first reserved.
func (sq *sequencer) unit(items []*item, ms []int, d *decision) error {
	u := items[ms[0]].unit
	k := aggKey{items[ms[0]].env.AggregateType, items[ms[0]].env.AggregateID}
	cur, known := sq.cur(k)
	if !known {
		return errNeedFacts
	}
	moved := 0
	for _, m := range ms {
		if d.verdicts[m].moved != nil {
			moved++
		}
	}
	switch {
	case moved == len(ms):
		for _, m := range ms {
			seq := d.verdicts[m].moved.seq
			if sq.facts.superseded[items[m].env.EventID] || seq <= sq.top[k] {
				seq = sq.last[k] + 1
				sq.last[k] = seq
			}
			sq.top[k] = max(sq.top[k], seq)
			sq.accept(d, m, seq, false)
		}
		return nil
	case moved > 0:
		abortUnit(items, d.verdicts, ms, ms[0], fmt.Errorf("eventstore: batch mixes retries of abandoned appends with new envelopes"))
		return nil
	case !u.expect.holds(cur):
		abortUnit(items, d.verdicts, ms, ms[0], &BatchConflictError{AggregateType: k.t, AggregateID: k.i, Expected: u.expect, ActualSeq: cur})
		return nil
	}
	for _, m := range ms {
		cur++
		sq.accept(d, m, cur, false)
	}
	sq.last[k] = cur
	sq.top[k] = max(sq.top[k], cur)
	return nil
}

// accept records item n as accepted with sequence seq (relative to the
// aggregate's unknown last sequence when rel), taking the next position.
func (sq *sequencer) accept(d *decision, n int, seq int64, rel bool) {
	v := &d.verdicts[n]
	v.accepted, v.seq, v.rel = true, seq, rel
	d.order = append(d.order, n)
}

// advances lists the aggregates whose last sequence moves, sorted.
func (sq *sequencer) advances() []advance {
	var out []advance
	for k, last := range sq.last {
		f, known := sq.facts.last[k]
		if delta := last - f.seq; delta > 0 {
			out = append(out, advance{agg: k, delta: delta, create: known && !f.exists})
		}
	}
	slices.SortFunc(out, func(a, b advance) int { return compareAggKeys(a.agg, b.agg) })
	return out
}
