package eventstore

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sluicehq/sluice/shared/envelope"
)

// The reservation's rules without Postgres: decide on facts written down.

var decideClock = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

// spec is one envelope of a decide test.
type spec struct {
	name   string // event_id is derived from it
	kind   envelope.Kind
	agg    string    // aggregate id (type Order)
	seq    int64     // sequence_number: a domain event's slot, or any envelope's with the allocator off
	exp    *int64    // expected_seq
	cause  string    // metadata.causation_id: a name, or "raw:" and the text
	data   string    // changes the canonical hash
	noTime bool      // occurred_at left to the store (decideClock)
	at     time.Time // occurred_at (default an hour before decideClock)
	unit   int       // > 0: member of atomic batch number unit (consecutive members)
	expect Expectation
}

func nameID(name string) string {
	return uuid.NewSHA1(uuid.NameSpaceOID, []byte("decide/"+name)).String()
}

// decideStore makes items the way Append does.
func decideStore(t testing.TB, allocatorOff bool) *Store {
	t.Helper()
	cfg := Config{}
	if allocatorOff {
		cfg.SequenceAllocatorMode = "off"
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	return &Store{cfg: cfg, hooks: hooks{now: func() time.Time { return decideClock }}}
}

func (s *Store) decideItems(t testing.TB, specs []spec) []*item {
	t.Helper()
	items := make([]*item, len(specs))
	units := map[int]*unit{}
	for n, sp := range specs {
		e := envelope.Envelope{EventID: nameID(sp.name), EventType: "DONE", Kind: sp.kind, AggregateType: "Order", AggregateID: sp.agg,
			SequenceNumber: sp.seq, ExpectedSeq: sp.exp, Data: []byte(fmt.Sprintf(`{"v":%q}`, sp.name+sp.data))}
		if e.Kind == "" {
			e.Kind = envelope.KindCommand
		}
		switch {
		case !sp.at.IsZero():
			e.OccurredAt = envelope.NewTimestamp(sp.at)
		case !sp.noTime:
			e.OccurredAt = envelope.NewTimestamp(decideClock.Add(-time.Hour))
		}
		if sp.cause != "" {
			c, raw := strings.CutPrefix(sp.cause, "raw:")
			if !raw {
				c = nameID(sp.cause)
			}
			e.Metadata.SetString(envelope.MetaCausationID, c)
		}
		it, err := s.newItem(context.Background(), e)
		if err != nil {
			t.Fatalf("%s: %v", sp.name, err)
		}
		if sp.unit > 0 {
			u := units[sp.unit]
			if u == nil {
				u = &unit{expect: sp.expect}
				units[sp.unit] = u
			}
			it.idx, it.unit = len(u.items), u
			u.items = append(u.items, it)
		}
		items[n] = it
	}
	return items
}

// row is a stored appends row for a decide test.
type row struct {
	name, state, agg, writer string
	seq                      int64
	kind                     envelope.Kind
	data                     string // the stored envelope's data differs: another hash
	stale, superseded        bool
	at                       time.Time // its occurred_at (default an hour before decideClock)
	exp                      *int64    // its expected_seq
}

// factsOf writes facts down: stored rows (also the slots they hold), and
// last sequences ("agg=n", "agg=n new" for no row; an aggregate not named is unknown).
func (s *Store) factsOf(t testing.TB, rows []row, last ...string) facts {
	t.Helper()
	f := facts{stored: map[string]indexRow{}, superseded: map[string]bool{}, slots: map[string]slotRow{}, last: map[aggKey]lastSeq{}}
	for _, r := range rows {
		kind := r.kind
		if kind == "" {
			kind = envelope.KindCommand
		}
		occ := r.at
		if occ.IsZero() {
			occ = decideClock.Add(-time.Hour)
		}
		probe := spec{name: r.name, kind: kind, agg: r.agg, data: r.data, at: occ, exp: r.exp}
		if s.cfg.allocatorOff() {
			probe.seq = r.seq
		}
		h := s.decideItems(t, []spec{probe})[0].hash
		id := nameID(r.name)
		writer := r.writer
		if writer == "" {
			writer = "other"
		}
		f.stored[id] = indexRow{position: 100 + r.seq, eventID: id, kind: string(kind), aggType: "Order", aggID: r.agg, seq: r.seq,
			state: r.state, key: "segments/k", hash: h[:], occurredAt: occ, writer: writer, stale: r.stale}
		f.superseded[id] = r.superseded
		f.slots[slotKeyOf("Order", r.agg, r.seq, kind)] = slotRow{eventID: id, state: r.state}
	}
	for _, l := range last {
		var agg string
		var v int64
		var created string
		if _, err := fmt.Sscanf(strings.Replace(l, "=", " ", 1), "%s %d %s", &agg, &v, &created); err != nil && created == "" && agg == "" {
			t.Fatalf("fact %q: %v", l, err)
		}
		f.last[aggKey{"Order", agg}] = lastSeq{seq: v, exists: created != "new"}
	}
	return f
}

// describeVerdict is a verdict in words, event_ids as names.
func describeVerdict(v verdict) string {
	var ce *ConflictError
	var se *SlotError
	var bc *BatchConflictError
	var ba *BatchAbortedError
	var pb *PartialBatchError
	var mm *IdempotencyMismatchError
	switch {
	case v.accepted && v.moved != nil:
		return fmt.Sprintf("moved seq %d", v.seq)
	case v.accepted && v.rel:
		return fmt.Sprintf("rel %d", v.seq)
	case v.accepted:
		return fmt.Sprintf("seq %d", v.seq)
	case errors.As(v.err, &ba): // before the others: it wraps the cause
		return fmt.Sprintf("aborted by %d", ba.Index)
	case errors.As(v.err, &bc):
		return fmt.Sprintf("batch conflict %s/%d", bc.Expected, bc.ActualSeq)
	case errors.As(v.err, &ce):
		return fmt.Sprintf("conflict %d/%d", ce.ExpectedSeq, ce.ActualSeq)
	case errors.As(v.err, &se):
		return "slot: " + se.Reason
	case errors.As(v.err, &pb):
		return fmt.Sprintf("partial %d", len(pb.StoredEventIDs))
	case errors.As(v.err, &mm):
		return "mismatch"
	case v.err != nil:
		return "error " + v.err.Error()
	case v.stored != nil && v.mismatch != nil:
		return "dup mismatch"
	case v.stored != nil:
		return fmt.Sprintf("dup %d", v.stored.seq)
	case v.resolve != "":
		return "resolve"
	case v.wait == waitWriter:
		return "wait"
	case v.wait == waitBatch:
		return "wait batch"
	}
	return "nothing"
}

func describeDecision(d decision) (verdicts []string, order []int, adv []string) {
	for _, v := range d.verdicts {
		verdicts = append(verdicts, describeVerdict(v))
	}
	for _, a := range d.advances {
		s := fmt.Sprintf("%s+%d", a.agg.i, a.delta)
		if a.create {
			s += " new"
		}
		adv = append(adv, s)
	}
	return verdicts, d.order, adv
}

func TestDecide(t *testing.T) {
	e := expect
	cases := []struct {
		name     string
		off      bool // allocator off
		warn     bool // mismatch mode warn
		specs    []spec
		rows     []row
		last     []string
		want     []string
		order    []int    // nil: the accepted ones in arrival order
		advances []string // "agg+delta", " new" when created
		err      error
	}{
		{name: "commands take the next sequences",
			specs: []spec{{name: "a1", agg: "a"}, {name: "b1", agg: "b"}, {name: "a2", agg: "a"}},
			last:  []string{"a=4", "b=0 new"},
			want:  []string{"seq 5", "seq 1", "seq 6"}, advances: []string{"a+2", "b+1 new"}},
		{name: "unknown last sequences: relative",
			specs: []spec{{name: "a1", agg: "a"}, {name: "b1", agg: "b"}, {name: "a2", agg: "a"}},
			want:  []string{"rel 1", "rel 1", "rel 2"}, advances: []string{"a+2", "b+1"}},
		{name: "optimistic concurrency in arrival order",
			specs: []spec{{name: "fresh", agg: "a", exp: e(2)}, {name: "stale", agg: "a", exp: e(1)}, {name: "after", agg: "a", exp: e(3)},
				{name: "first", agg: "new", exp: e(0)}, {name: "never", agg: "ghost", exp: e(5)}},
			last: []string{"a=2", "new=0 new", "ghost=0 new"},
			want: []string{"seq 3", "conflict 1/3", "seq 4", "seq 1", "conflict 5/0"}, advances: []string{"a+2", "new+1 new"}},
		{name: "expected_seq needs the last sequence",
			specs: []spec{{name: "a1", agg: "a"}, {name: "occ", agg: "b", exp: e(0)}}, last: []string{"a=1"}, err: errNeedFacts},
		{name: "all stale: nothing moves",
			specs: []spec{{name: "s1", agg: "a", exp: e(1)}, {name: "s2", agg: "a", exp: e(1)}}, last: []string{"a=4"},
			want: []string{"conflict 1/4", "conflict 1/4"}},
		{name: "idempotency: stored equal, stored other, committed without occurred_at",
			specs: []spec{{name: "same", agg: "a"}, {name: "other", agg: "a", data: "!"}, {name: "default time", agg: "a", noTime: true}, {name: "new", agg: "a"}},
			rows: []row{{name: "same", agg: "a", state: stateCommitted, seq: 1}, {name: "other", agg: "a", state: stateCommitted, seq: 2},
				{name: "default time", agg: "a", state: stateCommitted, seq: 3, at: decideClock.Add(-5 * time.Minute)}},
			last: []string{"a=3"},
			want: []string{"dup 1", "mismatch", "dup 3", "seq 4"}, advances: []string{"a+1"}},
		{name: "idempotency before optimistic concurrency",
			specs: []spec{{name: "stored", agg: "a", exp: e(0)}}, rows: []row{{name: "stored", agg: "a", state: stateCommitted, seq: 1, exp: e(0)}},
			last: []string{"a=7"}, want: []string{"dup 1"}},
		{name: "warn mode answers a mismatch with the stored event",
			warn: true, specs: []spec{{name: "other", agg: "a", data: "!"}}, rows: []row{{name: "other", agg: "a", state: stateCommitted, seq: 1}},
			last: []string{"a=1"}, want: []string{"dup mismatch"}},
		{name: "reserved: own or stale is resolved, a live writer's waited for",
			specs: []spec{{name: "own", agg: "a"}, {name: "stale", agg: "a"}, {name: "live", agg: "a"}},
			rows: []row{{name: "own", agg: "a", state: stateReserved, writer: "me", seq: 1}, {name: "stale", agg: "a", state: stateReserved, stale: true, seq: 2},
				{name: "live", agg: "a", state: stateReserved, seq: 3}},
			last: []string{"a=3"}, want: []string{"resolve", "resolve", "wait"}},
		{name: "abandoned retries keep their slot unless superseded",
			specs: []spec{{name: "keeps", agg: "a"}, {name: "moves on", agg: "b"}, {name: "mismatch", agg: "a", data: "!"}},
			rows: []row{{name: "keeps", agg: "a", state: stateAbandoned, seq: 3}, {name: "moves on", agg: "b", state: stateAbandoned, seq: 1, superseded: true},
				{name: "mismatch", agg: "a", state: stateAbandoned, seq: 2}},
			last: []string{"a=3", "b=2"}, want: []string{"moved seq 3", "moved seq 3", "mismatch"}, advances: []string{"b+1"}},
		{name: "an abandoned retry behind a new sequence of the group takes a new one",
			specs: []spec{{name: "new", agg: "a"}, {name: "old", agg: "a"}},
			rows:  []row{{name: "old", agg: "a", state: stateAbandoned, seq: 2}},
			last:  []string{"a=2"}, want: []string{"seq 3", "moved seq 4"}, advances: []string{"a+2"}},
		{name: "slot rules",
			specs: []spec{
				{name: "ok", kind: envelope.KindDomain, agg: "s", seq: 1, cause: "c1"},
				{name: "ok without cause", kind: envelope.KindDomain, agg: "s", seq: 2},
				{name: "no command", kind: envelope.KindDomain, agg: "s", seq: 9},
				{name: "abandoned", kind: envelope.KindDomain, agg: "s", seq: 3},
				{name: "other cause", kind: envelope.KindDomain, agg: "s", seq: 4, cause: "c1"},
				{name: "not a uuid", kind: envelope.KindDomain, agg: "s", seq: 4, cause: "raw:x\x00y"},
				{name: "taken", kind: envelope.KindDomain, agg: "s", seq: 5},
				{name: "command", agg: "s"},
			},
			rows: []row{{name: "c1", agg: "s", state: stateCommitted, seq: 1}, {name: "c2", agg: "s", state: stateReserved, seq: 2},
				{name: "c3", agg: "s", state: stateAbandoned, seq: 3}, {name: "c4", agg: "s", state: stateCommitted, seq: 4},
				{name: "c5", agg: "s", state: stateCommitted, seq: 5}, {name: "d5", kind: envelope.KindDomain, agg: "s", state: stateAbandoned, seq: 5}},
			last: []string{"s=5"},
			want: []string{"seq 1", "seq 2", "slot: the slot holds no command (a domain event without a command must not set sequence_number)",
				"slot: the slot's command was abandoned", "slot: metadata.causation_id " + nameID("c1") + " is not the slot's command",
				"slot: metadata.causation_id x\x00y is not the slot's command",
				"slot: the slot already holds another domain (abandoned; only a retry of that event_id can take it)", "seq 6"},
			advances: []string{"s+1"}},
		{name: "a stored domain event is an idempotent hit",
			specs: []spec{{name: "d1", kind: envelope.KindDomain, agg: "s", seq: 1}},
			rows: []row{{name: "c1", agg: "s", state: stateCommitted, seq: 1},
				{name: "d1", kind: envelope.KindDomain, agg: "s", state: stateCommitted, seq: 1}},
			want: []string{"dup 1"}},
		{name: "allocator off: the caller's sequences, unique per kind, last the highest",
			off: true,
			specs: []spec{{name: "c7", agg: "a", seq: 7}, {name: "c3", agg: "a", seq: 3}, {name: "taken", agg: "a", seq: 2},
				{name: "occ", agg: "a", seq: 9, exp: e(5)}, {name: "stale", agg: "a", seq: 10, exp: e(5)}},
			rows:     []row{{name: "c2", agg: "a", state: stateCommitted, seq: 2}},
			last:     []string{"a=5"},
			want:     []string{"seq 7", "seq 3", "slot: the slot already holds another command", "conflict 5/7", "conflict 5/7"},
			advances: []string{"a+2"}},
		{name: "atomic batches: expectations hold or the batch fails whole",
			specs: []spec{
				{name: "u1", agg: "a", unit: 1, expect: Expectation{Kind: ExpectSequence, Seq: 2}},
				{name: "u2", agg: "a", unit: 1},
				{name: "x", agg: "b"},
				{name: "v1", agg: "a", unit: 2, expect: Expectation{Kind: ExpectNoStream}},
				{name: "v2", agg: "a", unit: 2},
				{name: "w1", agg: "c", unit: 3, expect: Expectation{Kind: ExpectExists}},
			},
			last:     []string{"a=2", "b=0 new", "c=0 new"},
			want:     []string{"seq 3", "seq 4", "seq 1", "batch conflict no_stream/4", "aborted by 0", "batch conflict exists/0"},
			advances: []string{"a+2", "b+1 new"}},
		{name: "atomic batches: stored whole, partly, or waiting",
			specs: []spec{
				{name: "s1", agg: "a", unit: 1}, {name: "s2", agg: "a", unit: 1},
				{name: "p1", agg: "b", unit: 2}, {name: "p2", agg: "b", unit: 2},
				{name: "w1", agg: "c", unit: 3}, {name: "w2", agg: "c", unit: 3},
				{name: "m1", agg: "d", unit: 4}, {name: "m2", agg: "d", unit: 4, data: "!"},
			},
			rows: []row{{name: "s1", agg: "a", state: stateCommitted, seq: 1}, {name: "s2", agg: "a", state: stateCommitted, seq: 2},
				{name: "p2", agg: "b", state: stateCommitted, seq: 1}, {name: "w2", agg: "c", state: stateReserved, seq: 1},
				{name: "m2", agg: "d", state: stateCommitted, seq: 1}},
			last: []string{"a=2", "b=1", "c=1", "d=1"},
			want: []string{"dup 1", "dup 2", "partial 1", "aborted by 0", "wait batch", "wait", "aborted by 1", "mismatch"}},
		{name: "atomic batches: an abandoned batch keeps its slots, a mixed one fails",
			specs: []spec{
				{name: "r1", agg: "a", unit: 1}, {name: "r2", agg: "a", unit: 1},
				{name: "q1", agg: "b", unit: 2}, {name: "q2", agg: "b", unit: 2},
			},
			rows: []row{{name: "r1", agg: "a", state: stateAbandoned, seq: 1}, {name: "r2", agg: "a", state: stateAbandoned, seq: 2},
				{name: "q1", agg: "b", state: stateAbandoned, seq: 1}},
			last: []string{"a=2", "b=1"},
			want: []string{"moved seq 1", "moved seq 2", "error eventstore: batch mixes retries of abandoned appends with new envelopes", "aborted by 0"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := decideStore(t, c.off)
			items := s.decideItems(t, c.specs)
			r := s.rules()
			r.writerID, r.mismatchWarn = "me", c.warn
			d, err := decide(items, s.factsOf(t, c.rows, c.last...), r)
			if !errors.Is(err, c.err) {
				t.Fatalf("decide: %v, want %v", err, c.err)
			}
			if err != nil {
				return
			}
			verdicts, order, adv := describeDecision(d)
			if !reflect.DeepEqual(verdicts, c.want) {
				t.Errorf("verdicts\n got %q\nwant %q", verdicts, c.want)
			}
			want := c.order
			if want == nil {
				for n, v := range d.verdicts {
					if v.accepted {
						want = append(want, n)
					}
				}
			}
			if !reflect.DeepEqual(order, want) {
				t.Errorf("order %v, want %v", order, want)
			}
			if !reflect.DeepEqual(adv, c.advances) {
				t.Errorf("advances %q, want %q", adv, c.advances)
			}
		})
	}
}

// scenario is a group and its facts, made from fuzz input.
type scenario struct {
	off   bool
	specs []spec
	rows  []row
	last  []string
}

// byteSource reads small numbers from fuzz input (0 once it is used up).
type byteSource []byte

func (b *byteSource) next(n int) int {
	if len(*b) == 0 || n <= 1 {
		return 0
	}
	v := int((*b)[0]) % n
	*b = (*b)[1:]
	return v
}

func scenarioOf(data []byte) scenario {
	src := byteSource(data)
	sc := scenario{off: src.next(5) == 0}
	aggs := []string{"a", "b", "c"}
	lasts := map[string]int64{} // known; unknown ones hold slots up to 3
	for _, a := range aggs {
		switch src.next(4) {
		case 0: // unknown
			lasts[a] = -3
		case 1:
			sc.last = append(sc.last, a+"=0 new")
		default:
			lasts[a] = int64(1 + src.next(6))
			sc.last = append(sc.last, fmt.Sprintf("%s=%d", a, lasts[a]))
		}
	}
	n := 1 + src.next(8)
	for i := 0; i < n; i++ {
		sp := spec{name: fmt.Sprintf("e%d", i), agg: aggs[src.next(len(aggs))]}
		switch mode := src.next(6); {
		case sc.off:
			sp.seq = int64(1 + src.next(8))
			if src.next(3) == 0 {
				sp.kind = envelope.KindDomain
			}
		case mode == 2:
			sp.exp = expect(int64(src.next(8)))
		case mode == 3:
			sp.kind = envelope.KindDomain
		case mode == 4:
			sp.kind, sp.seq = envelope.KindDomain, int64(1+src.next(5))
			switch src.next(3) {
			case 1:
				sp.cause = fmt.Sprintf("cmd-%s-%d", sp.agg, sp.seq)
			case 2:
				sp.cause = "someone else"
			}
		case mode == 5 && i+1 < n:
			// an atomic batch of two on one aggregate
			u := i + 1
			ex := Expectation{Kind: ExpectKind(src.next(4)), Seq: int64(src.next(8))}
			sp.unit, sp.expect = u, ex
			sc.specs = append(sc.specs, sp)
			i++
			sp = spec{name: fmt.Sprintf("e%d", i), agg: sp.agg, unit: u}
		}
		sc.specs = append(sc.specs, sp)
	}
	states := []string{stateCommitted, stateAbandoned, stateReserved}
	for _, sp := range sc.specs {
		// a stored row's slot is one its aggregate handed out
		if top := max(lasts[sp.agg], -lasts[sp.agg]); src.next(4) == 0 && (top > 0 || sp.seq != 0) {
			r := row{name: sp.name, kind: sp.kind, agg: sp.agg, state: states[src.next(3)], exp: sp.exp,
				seq: int64(1 + src.next(int(top)))}
			if sp.seq != 0 {
				r.seq = sp.seq
			}
			if src.next(4) == 0 {
				r.data = "!"
			}
			switch src.next(4) {
			case 1:
				r.writer = "me"
			case 2:
				r.stale = true
			}
			r.superseded = src.next(2) == 0
			sc.rows = append(sc.rows, r)
		}
		if sp.seq != 0 && sp.kind == envelope.KindDomain && src.next(4) != 0 {
			sc.rows = append(sc.rows, row{name: fmt.Sprintf("cmd-%s-%d", sp.agg, sp.seq), agg: sp.agg, seq: sp.seq, state: states[src.next(3)]})
		}
	}
	return sc
}

// FuzzDecide decides random groups on random facts and checks the rules'
// invariants: every envelope gets one outcome; positions follow arrival
// (an atomic batch at its first member); per aggregate, the new sequences
// are the next ones after its last, contiguous, in position order, and
// the sequences rows move by exactly their number; an envelope with
// expected_seq is accepted exactly when it equals the aggregate's last
// sequence at its place in the group, else refused alone with that
// sequence as actual; an atomic batch is all or nothing; a domain event
// goes into a slot exactly when its slot rules hold; the same input gives
// the same decision; an idempotent retry of the group after the write gets
// the same sequences, as duplicates; and sequences handed out on an
// unknown last sequence are those of a known one, shifted.
func FuzzDecide(f *testing.F) {
	for _, seed := range [][]byte{
		{2, 2, 3, 4, 5, 0, 2, 1, 2, 3, 0, 1, 2},
		{1, 0, 1, 6, 4, 1, 2, 4, 2, 1, 4, 0, 0, 1, 1, 1},
		{3, 3, 3, 7, 5, 0, 1, 2, 0, 2, 0, 3, 1, 0, 0, 0, 2, 2},
		{0, 2, 2, 5, 0, 1, 3, 2, 0, 1, 2, 0, 0, 1, 2, 0},
		{2, 0, 0, 3, 2, 0, 2, 2, 0, 1, 2, 1, 0, 5, 2, 2},
	} {
		f.Add(seed)
	}
	stores := map[bool]*Store{false: decideStore(f, false), true: decideStore(f, true)}
	f.Fuzz(func(t *testing.T, data []byte) {
		sc := scenarioOf(data)
		s := stores[sc.off]
		items := s.decideItems(t, sc.specs)
		f := s.factsOf(t, sc.rows, sc.last...)
		r := s.rules()
		r.writerID = "me"
		d, err := decide(items, f, r)
		if errors.Is(err, errNeedFacts) {
			if len(f.last) == 3 {
				t.Fatalf("errNeedFacts with every last sequence known")
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		again, _ := decide(items, f, r)
		if !reflect.DeepEqual(d, again) {
			t.Fatalf("two decisions on the same input differ:\n%+v\n%+v", d, again)
		}
		checkDecision(t, items, f, r, d)
		checkRetry(t, s, items, f, r, d)
		checkRelative(t, items, f, r, d)
	})
}

// checkDecision checks one decision's invariants.
func checkDecision(t *testing.T, items []*item, f facts, r rules, d decision) {
	t.Helper()
	pos := map[int]int{}
	for p, n := range d.order {
		if _, dup := pos[n]; dup || !d.verdicts[n].accepted {
			t.Fatalf("order %v: item %d twice or not accepted", d.order, n)
		}
		pos[n] = p
	}
	for n, v := range d.verdicts {
		classes := 0
		for _, c := range []bool{v.accepted, v.err != nil, v.stored != nil, v.resolve != "", v.wait != waitNone} {
			if c {
				classes++
			}
		}
		if classes != 1 || v.accepted != hasKey(pos, n) {
			t.Fatalf("item %d: verdict %+v is not exactly one outcome", n, v)
		}
	}
	for p := 1; p < len(d.order); p++ {
		a, b := items[d.order[p-1]], items[d.order[p]]
		if d.order[p] < d.order[p-1] && (b.unit == nil || b.unit != a.unit) {
			t.Fatalf("order %v does not follow arrival", d.order)
		}
	}
	checkSequences(t, items, f, r, d)
	checkUnitsAndSlots(t, items, f, r, d)
}

func hasKey(m map[int]int, k int) bool { _, ok := m[k]; return ok }

// checkSequences: new sequences per aggregate are contiguous after its
// last one, in position order, advances match them, and optimistic
// concurrency compares with the last sequence at the envelope's place.
func checkSequences(t *testing.T, items []*item, f facts, r rules, d decision) {
	t.Helper()
	base := func(k aggKey) int64 { return f.last[k].seq }
	handed := map[aggKey]int64{} // new sequences handed out, in arrival order so far
	before := make([]int64, len(items))
	prevSeq := map[aggKey]int64{}
	for _, n := range d.order {
		it, v := items[n], d.verdicts[n]
		if it.slot {
			continue
		}
		k := aggKey{it.env.AggregateType, it.env.AggregateID}
		if v.seq <= prevSeq[k] && !r.allocatorOff {
			t.Fatalf("aggregate %s: sequence %d after %d in position order", k.i, v.seq, prevSeq[k])
		}
		prevSeq[k] = v.seq
	}
	for n, it := range items {
		k := aggKey{it.env.AggregateType, it.env.AggregateID}
		v := d.verdicts[n]
		before[n] = handed[k]
		kept := v.moved != nil && v.accepted && (v.rel || v.seq <= base(k))
		if v.accepted && !it.slot && !kept && !r.allocatorOff {
			if want := handed[k] + 1 + base(k)*b2i(!v.rel); v.seq != want {
				t.Fatalf("item %d of %s: sequence %d, want %d (last %d, %d handed out before)", n, k.i, v.seq, want, base(k), handed[k])
			}
			handed[k]++
		}
	}
	for _, a := range d.advances {
		if !r.allocatorOff && a.delta != handed[a.agg] {
			t.Fatalf("aggregate %s advances by %d, %d new sequences", a.agg.i, a.delta, handed[a.agg])
		}
		if l, known := f.last[a.agg]; a.create != (known && !l.exists) {
			t.Fatalf("aggregate %s: create %v with fact %+v", a.agg.i, a.create, l)
		}
		delete(handed, a.agg)
	}
	for k, h := range handed {
		if h != 0 && !r.allocatorOff {
			t.Fatalf("aggregate %s: %d new sequences without an advance", k.i, h)
		}
	}
	for n, it := range items {
		exp, v := it.env.ExpectedSeq, d.verdicts[n]
		var ce *ConflictError
		if exp == nil || it.unit != nil || r.allocatorOff || v.moved != nil {
			continue
		}
		cur := base(aggKey{it.env.AggregateType, it.env.AggregateID}) + before[n]
		switch {
		case v.accepted && *exp != cur:
			t.Fatalf("item %d accepted with expected_seq %d at last sequence %d", n, *exp, cur)
		case errors.As(v.err, &ce) && (ce.ExpectedSeq != *exp || ce.ActualSeq != cur || *exp == cur):
			t.Fatalf("item %d: %v at last sequence %d", n, ce, cur)
		}
	}
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// checkUnitsAndSlots: atomic batches are all or nothing, with consecutive
// sequences; domain events into their commands' slots follow the rules.
func checkUnitsAndSlots(t *testing.T, items []*item, f facts, r rules, d decision) {
	t.Helper()
	accepted := map[*unit][]int64{}
	members := map[*unit]int{}
	for n, it := range items {
		if it.unit != nil {
			members[it.unit]++
			if v := d.verdicts[n]; v.accepted && v.moved == nil {
				accepted[it.unit] = append(accepted[it.unit], v.seq)
			}
		}
		if !it.slot || r.allocatorOff {
			continue
		}
		e, v := it.env, d.verdicts[n]
		if _, stored := f.stored[e.EventID]; stored {
			continue
		}
		cmd, ok := f.slots[slotKeyOf(e.AggregateType, e.AggregateID, e.SequenceNumber, envelope.KindCommand)]
		held, taken := f.slots[it.slotKey]
		cause := e.Metadata.CausationID()
		allowed := ok && cmd.state != stateAbandoned && (cause == "" || cause == cmd.eventID) && (!taken || held.eventID == e.EventID)
		var se *SlotError
		if allowed != v.accepted || !allowed && !errors.As(v.err, &se) {
			t.Fatalf("slot item %d: verdict %s, the rules allow it: %v", n, describeVerdict(v), allowed)
		}
	}
	for u, seqs := range accepted {
		if len(seqs) != 0 && len(seqs) != members[u] {
			t.Fatalf("atomic batch: %d of %d members accepted", len(seqs), members[u])
		}
		for j := 1; j < len(seqs); j++ {
			if seqs[j] != seqs[j-1]+1 {
				t.Fatalf("atomic batch: sequences %v", seqs)
			}
		}
	}
}

// checkRetry writes the decision into the facts (every accepted item a
// committed row, the last sequences advanced; an unknown last sequence
// taken as 0) and decides the same group again: every accepted item is now
// an idempotent hit with the same sequence.
func checkRetry(t *testing.T, s *Store, items []*item, f facts, r rules, d decision) {
	t.Helper()
	g := facts{stored: map[string]indexRow{}, superseded: f.superseded, slots: map[string]slotRow{}, last: map[aggKey]lastSeq{}}
	for k, v := range f.stored {
		g.stored[k] = v
	}
	for k, v := range f.slots {
		g.slots[k] = v
	}
	for k, v := range f.last {
		g.last[k] = v
	}
	for _, a := range d.advances {
		l := g.last[a.agg]
		g.last[a.agg] = lastSeq{seq: l.seq + a.delta, exists: true}
	}
	for p, n := range d.order {
		it, v := items[n], d.verdicts[n]
		e := it.env
		g.stored[e.EventID] = indexRow{position: 1000 + int64(p), eventID: e.EventID, kind: string(e.Kind), aggType: e.AggregateType, aggID: e.AggregateID,
			seq: v.seq, state: stateCommitted, hash: it.hash[:], occurredAt: e.OccurredAt.Time(), writer: "me"}
		g.slots[slotKeyOf(e.AggregateType, e.AggregateID, v.seq, e.Kind)] = slotRow{eventID: e.EventID, state: stateCommitted}
	}
	d2, err := decide(items, g, r)
	if err != nil {
		t.Fatalf("the retry: %v", err)
	}
	for n, v := range d.verdicts {
		if w := d2.verdicts[n]; v.accepted && (w.stored == nil || w.stored.seq != v.seq) {
			t.Fatalf("item %d: retry after %s is %s", n, describeVerdict(v), describeVerdict(w))
		}
	}
}

// checkRelative: when last sequences were unknown, deciding with them known
// gives the same verdicts, relative sequences shifted by the known value.
func checkRelative(t *testing.T, items []*item, f facts, r rules, d decision) {
	t.Helper()
	const known = 3
	g := f
	g.last = map[aggKey]lastSeq{}
	unknown := map[aggKey]bool{}
	for _, it := range items {
		k := aggKey{it.env.AggregateType, it.env.AggregateID}
		if l, ok := f.last[k]; ok {
			g.last[k] = l
		} else {
			g.last[k], unknown[k] = lastSeq{seq: known, exists: true}, true
		}
	}
	if len(unknown) == 0 {
		return
	}
	d2, err := decide(items, g, r)
	if err != nil {
		t.Fatalf("with the last sequences known: %v", err)
	}
	for n, v := range d.verdicts {
		w := d2.verdicts[n]
		want := v
		if v.rel {
			want.seq, want.rel = v.seq+known, false
		}
		if describeVerdict(w) != describeVerdict(want) {
			t.Fatalf("item %d: %s with the last sequence unknown, %s with it %d", n, describeVerdict(v), describeVerdict(w), known)
		}
	}
}
