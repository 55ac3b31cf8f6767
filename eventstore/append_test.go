package eventstore

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/shared/envelope"
)

// 50 goroutines append to one aggregate: sequences are 1..N without gaps or
// duplicates, positions are unique, and every event reads back byte for
// byte through Stream and ByEventID.
func TestConcurrentAppendsToOneAggregate(t *testing.T) {
	e := newEnv(t)
	s := e.store(t, testConfig())
	const goroutines, perG = 50, 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	var got []Result
	errs := make(chan error, goroutines*perG)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perG {
				r, err := s.AppendOne(ctxT(t), command("Order", "order-1", map[string]any{"g": g, "i": i}))
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				got = append(got, r)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	n := goroutines * perG
	seqs, positions := map[int64]bool{}, map[int64]bool{}
	byID := map[string]Result{}
	for _, r := range got {
		seqs[r.Event.Envelope.SequenceNumber] = true
		positions[r.Event.Envelope.Position] = true
		byID[r.Event.Envelope.EventID] = r
	}
	if len(seqs) != n || len(positions) != n {
		t.Fatalf("%d distinct sequences, %d distinct positions, want %d", len(seqs), len(positions), n)
	}
	for k := int64(1); k <= int64(n); k++ {
		if !seqs[k] {
			t.Fatalf("sequence %d missing", k)
		}
	}
	stream, err := s.Stream(ctxT(t), "Order", "order-1", 1, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(stream) != n {
		t.Fatalf("stream has %d events, want %d", len(stream), n)
	}
	for i, ev := range stream {
		if ev.Envelope.SequenceNumber != int64(i+1) {
			t.Fatalf("stream[%d] has sequence %d", i, ev.Envelope.SequenceNumber)
		}
		want := byID[ev.Envelope.EventID]
		if !bytes.Equal(ev.Raw, want.Event.Raw) {
			t.Fatalf("stream[%d] bytes differ from the append result:\n%s\n%s", i, ev.Raw, want.Event.Raw)
		}
	}
	for id, r := range byID {
		ev, err := s.ByEventID(ctxT(t), id)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(ev.Raw, r.Event.Raw) || ev.Envelope.Position != r.Event.Envelope.Position {
			t.Fatalf("ByEventID(%s) differs from the append result", id)
		}
		// the segment holds exactly these bytes
		seg, err := s.ReadSegment(ctxT(t), ev.SegmentKey)
		if err != nil {
			t.Fatal(err)
		}
		first, _, _ := ParseSegmentKey(ev.SegmentKey)
		if line := seg[ev.Envelope.Position-first]; !bytes.Equal(line.Raw, r.Event.Raw) {
			t.Fatalf("segment line differs from the append result")
		}
	}
	head, err := s.Head(ctxT(t))
	if err != nil || head != int64(n) {
		t.Fatalf("Head = %d, %v; want %d", head, err, n)
	}
}

// A stale expected_seq fails alone with the actual sequence; nothing is
// written for it and the rest of its group succeeds.
func TestOptimisticConcurrency(t *testing.T) {
	e := newEnv(t)
	s := e.store(t, testConfig())
	mustAppend(t, s, command("Order", "o", 1), command("Order", "o", 2), command("Order", "o", 3))

	fresh := command("Order", "o", "fresh")
	fresh.ExpectedSeq = expect(3)
	stale := command("Order", "o", "stale")
	stale.ExpectedSeq = expect(1)
	afterFresh := command("Order", "o", "after fresh")
	afterFresh.ExpectedSeq = expect(4)
	raced := command("Order", "o", "raced")
	raced.ExpectedSeq = expect(3) // the fresh one took 4 in the same group
	first := command("Order", "new", "first")
	first.ExpectedSeq = expect(0)
	other := command("Order", "other", "unconditional")
	rs, err := s.Append(ctxT(t), fresh, stale, afterFresh, raced, first, other)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		seq    int64
		actual int64 // conflict when > -1
	}{{4, -1}, {0, 5}, {5, -1}, {0, 5}, {1, -1}, {1, -1}}
	// stale is checked after fresh (group order): actual is then 4, not 3
	want[1].actual = 4
	for i, w := range want {
		r := rs[i]
		if w.actual >= 0 {
			var ce *ConflictError
			if !errors.As(r.Err, &ce) {
				t.Fatalf("envelope %d: %s, want a conflict", i, describe(r))
			}
			if ce.ActualSeq != w.actual || ce.HTTPStatus() != 409 {
				t.Errorf("envelope %d: conflict %+v, want actual_seq %d", i, ce, w.actual)
			}
			continue
		}
		if r.Err != nil || r.Event.Envelope.SequenceNumber != w.seq {
			t.Errorf("envelope %d: %s, want seq %d", i, describe(r), w.seq)
		}
	}
	for _, id := range []string{stale.EventID, raced.EventID} {
		if st := rowState(t, e.pool, id); st != "none" {
			t.Errorf("conflicting envelope %s left a row (%s)", id, st)
		}
		if _, err := s.ByEventID(ctxT(t), id); !errors.Is(err, ErrNotFound) {
			t.Errorf("conflicting envelope readable: %v", err)
		}
	}
	// a group whose envelopes all conflict writes nothing at all
	puts := e.bucket.creates.Load()
	allStale := command("Order", "o", "x")
	allStale.ExpectedSeq = expect(2)
	rs, _ = s.Append(ctxT(t), allStale)
	var ce *ConflictError
	if !errors.As(rs[0].Err, &ce) || ce.ActualSeq != 5 {
		t.Fatalf("got %s, want conflict with actual 5", describe(rs[0]))
	}
	if e.bucket.creates.Load() != puts {
		t.Error("a fully conflicting group wrote a segment")
	}
	snap := snapshot(t, e.pool)
	if snap.head != 8 {
		t.Errorf("log_head %d, want 8 (7 appended)", snap.head)
	}
}

func TestIdempotentAppend(t *testing.T) {
	t.Run("sequential", func(t *testing.T) {
		e := newEnv(t)
		s := e.store(t, testConfig())
		ev := command("Order", "o", map[string]any{"x": 1})
		r1 := mustAppend(t, s, ev)[0]
		r2 := mustAppend(t, s, ev)[0]
		if !r2.Duplicate || r1.Duplicate {
			t.Fatalf("duplicate flags %v %v", r1.Duplicate, r2.Duplicate)
		}
		if !bytes.Equal(r1.Event.Raw, r2.Event.Raw) || r2.Event.Envelope.Position != r1.Event.Envelope.Position {
			t.Fatalf("second append returned %s, first %s", describe(r2), describe(r1))
		}
		// key order, whitespace in data and transport metadata do not matter
		same := ev
		same.Data = []byte(`{ "x" : 1 }`)
		same.Metadata.SetString(envelope.MetaTraceparent, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
		if r := mustAppend(t, s, same)[0]; !r.Duplicate || r.Event.Envelope.SequenceNumber != 1 {
			t.Fatalf("canonically equal append: %s", describe(r))
		}
		// an absent occurred_at takes the stored one for the comparison
		noTime := command("Order", "o", 2)
		noTime.OccurredAt = envelope.Timestamp{}
		a := mustAppend(t, s, noTime)[0]
		b := mustAppend(t, s, noTime)[0]
		if !b.Duplicate || a.Event.Envelope.Position != b.Event.Envelope.Position {
			t.Fatalf("retry without occurred_at: %s / %s", describe(a), describe(b))
		}
		if n := len(mustStream(t, s, "Order", "o")); n != 2 {
			t.Fatalf("%d events stored, want 2", n)
		}
	})
	t.Run("concurrent", func(t *testing.T) {
		e := newEnv(t)
		s := e.store(t, testConfig())
		ev := command("Order", "o", map[string]any{"x": 1})
		const n = 20
		rs := make([]Result, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := s.AppendOne(ctxT(t), ev)
				if err != nil {
					t.Error(err)
				}
				rs[i] = r
			}()
		}
		wg.Wait()
		fresh := 0
		for _, r := range rs {
			if !r.Duplicate {
				fresh++
			}
			if r.Event.Envelope.SequenceNumber != 1 || r.Event.Envelope.Position != 1 || !bytes.Equal(r.Event.Raw, rs[0].Event.Raw) {
				t.Fatalf("caller got %s", describe(r))
			}
		}
		if fresh != 1 {
			t.Errorf("%d callers were told they stored the event, want 1", fresh)
		}
		if head, _ := s.Head(ctxT(t)); head != 1 {
			t.Errorf("head %d, want 1", head)
		}
	})
	for _, mode := range []string{MismatchError, MismatchWarn} {
		t.Run("different payload/"+mode, func(t *testing.T) {
			e := newEnv(t)
			cfg := testConfig()
			cfg.IdempotencyMismatchMode = mode
			rec := &levelRecorder{}
			s := e.storeLogging(t, cfg, slog.New(rec))
			ev := command("Order", "o", map[string]any{"x": 1})
			stored := mustAppend(t, s, ev)[0]
			changed := ev
			changed.Data = []byte(`{"x":2}`)
			rs, err := s.Append(ctxT(t), changed)
			if err != nil {
				t.Fatal(err)
			}
			r := rs[0]
			var mm *IdempotencyMismatchError
			switch mode {
			case MismatchError:
				if !errors.As(r.Err, &mm) || mm.StoredHash == mm.NewHash || len(mm.StoredHash) != 64 {
					t.Fatalf("got %s, want a mismatch naming both hashes", describe(r))
				}
			case MismatchWarn:
				if r.Err != nil || !r.Duplicate || r.Mismatch == nil || !bytes.Equal(r.Event.Raw, stored.Event.Raw) {
					t.Fatalf("warn mode: %s mismatch %v", describe(r), r.Mismatch)
				}
				rec.mu.Lock()
				logged := slices.Contains(rec.levels, slog.LevelError)
				rec.mu.Unlock()
				if !logged {
					t.Error("warn mode did not log the mismatch at error level")
				}
			}
			if n := len(mustStream(t, s, "Order", "o")); n != 1 {
				t.Fatalf("%d events stored, want 1", n)
			}
		})
	}
}

func mustStream(t testing.TB, s *Store, aggType, aggID string) []Event {
	t.Helper()
	evs, err := s.Stream(ctxT(t), aggType, aggID, 1, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// The instance worker's domain event goes into its command's slot; the slot
// takes one domain event; a retry of it is a no-op.
func TestDomainEventIntoCommandSlot(t *testing.T) {
	e := newEnv(t)
	s := e.store(t, testConfig())
	cmds := mustAppend(t, s, command("Instance", "db:cls:1", 1), command("Instance", "db:cls:1", 2))
	k := cmds[1].Event.Envelope.SequenceNumber // 2

	dom := domainEvent("Instance", "db:cls:1", map[string]any{"state": "full"})
	dom.SequenceNumber = k
	dom.Metadata.SetString(envelope.MetaCausationID, cmds[1].Event.Envelope.EventID)
	r := mustAppend(t, s, dom)[0]
	if r.Event.Envelope.SequenceNumber != k || r.Event.Envelope.Kind != envelope.KindDomain {
		t.Fatalf("domain event stored as %s", describe(r))
	}
	if again := mustAppend(t, s, dom)[0]; !again.Duplicate || again.Event.Envelope.Position != r.Event.Envelope.Position {
		t.Fatalf("retry of the domain event: %s", describe(again))
	}

	second := domainEvent("Instance", "db:cls:1", map[string]any{"state": "other"})
	second.SequenceNumber = k
	noCmd := domainEvent("Instance", "db:cls:1", 1)
	noCmd.SequenceNumber = 9
	wrongCause := domainEvent("Instance", "db:cls:1", 1)
	wrongCause.SequenceNumber = 1
	wrongCause.Metadata.SetString(envelope.MetaCausationID, cmds[1].Event.Envelope.EventID)
	direct := domainEvent("Instance", "db:cls:1", "direct") // no command: own slot
	cmdWithSeq := command("Instance", "db:cls:1", 1)
	cmdWithSeq.SequenceNumber = 7
	rs, err := s.Append(ctxT(t), second, noCmd, wrongCause, direct, cmdWithSeq)
	if err != nil {
		t.Fatal(err)
	}
	for i, reason := range []string{"already holds", "holds no command", "causation_id"} {
		var se *SlotError
		if !errors.As(rs[i].Err, &se) || !strings.Contains(se.Error(), reason) {
			t.Errorf("envelope %d: %s, want slot error %q", i, describe(rs[i]), reason)
		}
	}
	if rs[3].Err != nil || rs[3].Event.Envelope.SequenceNumber != 3 {
		t.Errorf("direct domain event: %s, want its own slot 3", describe(rs[3]))
	}
	var ve *envelope.ValidationError
	if !errors.As(rs[4].Err, &ve) || ve.Field != "sequence_number" {
		t.Errorf("command with a sequence number: %s", describe(rs[4]))
	}
	// the stream: slot 1 command, slot 2 command + domain, slot 3 domain
	var got []string
	for _, ev := range mustStream(t, s, "Instance", "db:cls:1") {
		got = append(got, fmt.Sprintf("%d%s", ev.Envelope.SequenceNumber, ev.Envelope.Kind[:1]))
	}
	if strings.Join(got, " ") != "1c 2c 2d 3d" {
		t.Errorf("stream %v", got)
	}
	if doms, _ := s.Stream(ctxT(t), "Instance", "db:cls:1", 1, 2, envelope.KindDomain); len(doms) != 1 {
		t.Errorf("domain stream 1..2 has %d events", len(doms))
	}
	if c, err := s.Command(ctxT(t), "Instance", "db:cls:1", 2); err != nil || c.Envelope.EventID != cmds[1].Event.Envelope.EventID {
		t.Errorf("Command(2) = %v, %v", c.Envelope.EventID, err)
	}
	if _, err := s.Command(ctxT(t), "Instance", "db:cls:1", 3); !errors.Is(err, ErrNotFound) {
		t.Errorf("Command(3) of a domain-only slot: %v", err)
	}
}

func TestSequenceAllocatorOff(t *testing.T) {
	e := newEnv(t)
	cfg := testConfig()
	cfg.SequenceAllocatorMode = AllocatorOff
	s := e.store(t, cfg)
	a := command("Order", "o", 1)
	a.SequenceNumber = 5
	b := command("Order", "o", 2)
	b.SequenceNumber = 5
	c := domainEvent("Order", "o", 3)
	c.SequenceNumber = 5
	none := command("Order", "o", 4)
	rs, err := s.Append(ctxT(t), a, b, c, none)
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].Err != nil || rs[0].Event.Envelope.SequenceNumber != 5 || rs[2].Err != nil {
		t.Fatalf("%s / %s", describe(rs[0]), describe(rs[2]))
	}
	var se *SlotError
	// b waits for a (same slot in flight), then finds it taken
	if !errors.As(rs[1].Err, &se) {
		t.Errorf("duplicate sequence: %s", describe(rs[1]))
	}
	var ve *envelope.ValidationError
	if !errors.As(rs[3].Err, &ve) {
		t.Errorf("missing sequence: %s", describe(rs[3]))
	}
	if snap := snapshot(t, e.pool); len(snap.sequences) != 1 || !strings.HasSuffix(snap.sequences[0], "|5") {
		t.Errorf("sequences %v", snap.sequences)
	}
}

// Aggregate ids that differ only after normalisation are one aggregate;
// every other difference keeps them apart; no id reaches outside segments/.
func TestAggregateIdentity(t *testing.T) {
	e := newEnv(t)
	s := e.store(t, testConfig())
	ids := []string{
		"caf\u00e9", "cafe\u0301", // NFC / NFD twins: one aggregate
		"Order-1", "order-1", // case: two
		"  spaced\t", "spaced", // trimmed: one
		"a/b", "a%2Fb", "..", "../../etc/passwd", "%", "a:b/c",
	}
	for _, id := range ids {
		mustAppend(t, s, command("Order", id, id))
	}
	want := map[string]int{"caf\u00e9": 2, "Order-1": 1, "order-1": 1, "spaced": 2, "a/b": 1, "a%2Fb": 1, "..": 1, "../../etc/passwd": 1, "%": 1, "a:b/c": 1}
	total := 0
	for id, n := range want {
		evs := mustStream(t, s, "Order", id)
		if len(evs) != n {
			t.Errorf("aggregate %q has %d events, want %d", id, len(evs), n)
		}
		for i, ev := range evs {
			if ev.Envelope.SequenceNumber != int64(i+1) || ev.Envelope.AggregateID != id {
				t.Errorf("aggregate %q event %d: seq %d id %q", id, i, ev.Envelope.SequenceNumber, ev.Envelope.AggregateID)
			}
		}
		total += n
	}
	if total != len(ids) {
		t.Fatalf("accounted %d of %d events", total, len(ids))
	}
	objs, err := e.bucket.List(ctxT(t), "", "", 10000)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if !strings.HasPrefix(o.Key, SegmentPrefix) && !strings.HasPrefix(o.Key, "_sluice/selftest/") {
			t.Errorf("object outside segments/: %q", o.Key)
		}
		if strings.HasPrefix(o.Key, SegmentPrefix) {
			if _, _, err := ParseSegmentKey(o.Key); err != nil {
				t.Error(err)
			}
		}
	}
}

// Oversized or malformed envelopes are rejected with an error naming the
// rule; nothing is written for them.
func TestRejectsInvalidEnvelopes(t *testing.T) {
	e := newEnv(t)
	cfg := testConfig()
	cfg.MaxEnvelopeBytes = 4096
	cfg.MaxMetadataBytes = 256
	cfg.MaxDataDepth = 4
	s := e.store(t, cfg)
	big := command("Order", "o", strings.Repeat("x", 5000))
	deep := command("Order", "o", 0)
	deep.Data = []byte(`{"a":{"b":{"c":{"d":{}}}}}`)
	meta := command("Order", "o", 1)
	meta.Metadata.SetString("free", strings.Repeat("m", 300))
	badType := command("Order", "o", 1)
	badType.EventType = "not valid"
	badID := command("Order", "o", 1)
	badID.AggregateID = "bad\x00id"
	badJSON := command("Order", "o", 1)
	badJSON.Data = []byte(`{"a":`)
	withPos := command("Order", "o", 1)
	withPos.Position = 3
	domExpect := domainEvent("Order", "o", 1)
	domExpect.ExpectedSeq = expect(0)
	cases := []struct {
		name  string
		env   envelope.Envelope
		field string
		code  envelope.ErrorCode
	}{
		{"oversized", big, "", envelope.CodeLimitExceeded},
		{"too deep", deep, "data", envelope.CodeLimitExceeded},
		{"metadata too large", meta, "metadata", envelope.CodeLimitExceeded},
		{"event_type", badType, "event_type", envelope.CodeInvalid},
		{"control character in id", badID, "aggregate_id", envelope.CodeInvalid},
		{"malformed data", badJSON, "data", envelope.CodeMalformed},
		{"position set", withPos, "position", envelope.CodeInvalid},
		{"expected_seq on a domain event", domExpect, "expected_seq", envelope.CodeInvalid},
	}
	envs := make([]envelope.Envelope, len(cases))
	for i, c := range cases {
		envs[i] = c.env
	}
	rs, err := s.Append(ctxT(t), envs...)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		var ve *envelope.ValidationError
		if !errors.As(rs[i].Err, &ve) || ve.Field != c.field || ve.Code != c.code || ve.Limit == "" {
			t.Errorf("%s: got %v (%+v), want field %q code %s naming the limit", c.name, rs[i].Err, ve, c.field, c.code)
		}
	}
	if head, _ := s.Head(ctxT(t)); head != 0 {
		t.Errorf("head %d after only invalid appends", head)
	}
	if e.bucket.creates.Load() != 0 {
		t.Errorf("%d segments written for invalid envelopes", e.bucket.creates.Load())
	}
}

// One group of 500 envelopes costs one segment PUT and a constant number of
// Postgres round trips.
func TestGroupOf500IsOnePutAndConstantRoundTrips(t *testing.T) {
	e := newEnv(t)
	s := e.store(t, testConfig())
	envs := make([]envelope.Envelope, 500)
	for i := range envs {
		envs[i] = command("Order", fmt.Sprintf("o-%d", i%37), i)
	}
	q0, p0 := e.tracer.N(), e.bucket.creates.Load()
	rs := mustAppend(t, s, envs...)
	queries, puts := e.tracer.N()-q0, e.bucket.creates.Load()-p0
	t.Logf("500 appends: %d segment PUTs, %d Postgres round trips", puts, queries)
	if puts != 1 {
		t.Errorf("%d PUTs, want 1", puts)
	}
	if queries > 2 {
		t.Errorf("%d Postgres round trips for one group, want 2 (reservation: 1, commit: 1)", queries)
	}
	keys := map[string]bool{}
	for _, r := range rs {
		keys[r.Event.SegmentKey] = true
	}
	if len(keys) != 1 || !keys[SegmentKey(1, 500)] {
		t.Errorf("segment keys %v", keys)
	}
	// reading the whole log back: one ranged GET per segment
	g0 := e.bucket.ranges.Load()
	evs := mustStream(t, s, "Order", "o-0")
	if len(evs) != 14 || e.bucket.ranges.Load()-g0 != 1 {
		t.Errorf("stream of %d events took %d ranged GETs", len(evs), e.bucket.ranges.Load()-g0)
	}
}

func TestSegmentsListing(t *testing.T) {
	e := newEnv(t)
	s := e.store(t, testConfig())
	for g := range 3 {
		envs := make([]envelope.Envelope, 4)
		for i := range envs {
			envs[i] = command("Order", "o", g*10+i)
		}
		mustAppend(t, s, envs...)
	}
	cases := []struct {
		after int64
		want  []string
	}{
		{0, []string{SegmentKey(1, 4), SegmentKey(5, 8), SegmentKey(9, 12)}},
		{4, []string{SegmentKey(5, 8), SegmentKey(9, 12)}},
		{6, []string{SegmentKey(5, 8), SegmentKey(9, 12)}}, // straddling
		{12, nil},
	}
	for _, c := range cases {
		segs, err := s.Segments(ctxT(t), c.after, 100)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, sg := range segs {
			got = append(got, sg.Key)
		}
		if strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Errorf("Segments(%d) = %v, want %v", c.after, got, c.want)
		}
	}
	segs, _ := s.Segments(ctxT(t), 0, 2)
	if len(segs) != 2 {
		t.Errorf("limit 2 returned %d", len(segs))
	}
	lines, err := s.ReadSegment(ctxT(t), SegmentKey(5, 8))
	if err != nil || len(lines) != 4 {
		t.Fatalf("ReadSegment: %d lines, %v", len(lines), err)
	}
	body, _, _ := e.bucket.Get(ctxT(t), SegmentKey(5, 8))
	var joined []byte
	for _, l := range lines {
		joined = append(append(joined, l.Raw...), '\n')
	}
	if !bytes.Equal(joined, body) {
		t.Error("ReadSegment lines do not reproduce the object byte for byte")
	}
	idx, err := s.Index(ctxT(t), IndexQuery{FromPosition: 3, ToPosition: 6})
	if err != nil || len(idx) != 4 || idx[0].Position != 3 || idx[0].State != stateCommitted {
		t.Errorf("Index: %+v %v", idx, err)
	}
	positions := []int{}
	for _, x := range idx {
		positions = append(positions, int(x.Position))
	}
	if !sort.IntsAreSorted(positions) {
		t.Error("index rows not in position order")
	}
}

// TestSlotRules covers each slot rule of decide through Append (the write
// refuses the assumed slot command, and the rule is named on the facts
// read): an abandoned command's slot, a causation_id that is no UUID, and
// a slot without a command, next to one that is allowed.
func TestSlotRules(t *testing.T) {
	e := newEnv(t)
	s := e.store(t, testConfig())
	cmds := mustAppend(t, s, command("Instance", "db:cls:rules", 1), command("Instance", "db:cls:rules", 2))
	abandoned := cmds[0].Event.Envelope
	if _, err := e.pool.Exec(ctxT(t), `UPDATE sluice.appends SET state = 'abandoned' WHERE event_id = $1`, abandoned.EventID); err != nil {
		t.Fatal(err)
	}
	into := func(seq int64, cause string) envelope.Envelope {
		d := domainEvent("Instance", "db:cls:rules", map[string]any{"seq": seq, "cause": cause})
		d.SequenceNumber = seq
		if cause != "" {
			d.Metadata.SetString(envelope.MetaCausationID, cause)
		}
		return d
	}
	cases := []struct {
		name, reason, existing string
		env                    envelope.Envelope
	}{
		{"abandoned command", "command was abandoned", abandoned.EventID, into(1, "")},
		{"causation not a uuid", "causation_id not-a-uuid is not the slot's command", cmds[1].Event.Envelope.EventID, into(2, "not-a-uuid")},
		{"no command", "holds no command", "", into(5, "")},
		{"allowed", "", "", into(2, cmds[1].Event.Envelope.EventID)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rs, err := s.Append(ctxT(t), c.env)
			if err != nil {
				t.Fatal(err)
			}
			if c.reason == "" {
				if rs[0].Err != nil {
					t.Fatalf("refused: %s", describe(rs[0]))
				}
				return
			}
			var se *SlotError
			if !errors.As(rs[0].Err, &se) || !strings.Contains(se.Error(), c.reason) || se.ExistingEventID != c.existing {
				t.Fatalf("%s, want a slot error %q naming %q", describe(rs[0]), c.reason, c.existing)
			}
		})
	}
}
