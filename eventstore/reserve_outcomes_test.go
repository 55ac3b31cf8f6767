package eventstore

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/sluicehq/sluice/shared/envelope"
)

// outcomeStep is one Append of TestReservationOutcomes; prep runs before it.
type outcomeStep struct {
	prep string
	envs []envelope.Envelope
	// roundTrips is the number of Postgres round trips of the step's
	// reservation: 1 when the facts the rules need are assumed and verified
	// in the write; 2 when the write saw a stale expected_seq (then the
	// next attempt assumes what it saw; 1 when that refuses everything);
	// 3 when another assumed fact is false (then the facts are read, and
	// written in one more), 4 when the unique index refused the write (a
	// ROLLBACK more); 2 when the group needs them read from the start.
	roundTrips int64
}

// namedIDs gives envelopes event_ids derived from names, so that results
// and tables can be written down; name turns ids in text back into names.
type namedIDs map[string]string // event_id → name

func (n namedIDs) id(name string) string {
	id := uuid.NewSHA1(uuid.NameSpaceOID, []byte("reserve-outcomes/"+name)).String()
	n[id] = name
	return id
}

func (n namedIDs) name(s string) string {
	for id, name := range n {
		s = strings.ReplaceAll(s, id, "<"+name+">")
	}
	return s
}

// outcomeSteps is the group sequence of TestReservationOutcomes: commands,
// optimistic concurrency (within a group, on a new aggregate, all stale),
// domain events into their commands' slots, each slot rule, retries of
// stored events, and a retry of an abandoned append.
func outcomeSteps(ids namedIDs) []outcomeStep {
	cmd := func(agg, name string) envelope.Envelope {
		e := command("Order", agg, name)
		e.EventID = ids.id(name)
		return e
	}
	withExp := func(e envelope.Envelope, n int64) envelope.Envelope { e.ExpectedSeq = expect(n); return e }
	sc1, sc2, sc3, sc4, sc5, st1 := cmd("s", "sc1"), cmd("s", "sc2"), cmd("s", "sc3"), cmd("s", "sc4"), cmd("s", "sc5"), cmd("t", "st1")
	slot := func(c envelope.Envelope, seq int64, cause, name string) envelope.Envelope {
		d := domainEvent(c.AggregateType, c.AggregateID, name)
		d.EventID, d.SequenceNumber = ids.id(name), seq
		if cause != "" {
			d.Metadata.SetString(envelope.MetaCausationID, cause)
		}
		return d
	}
	d1 := slot(sc1, 1, sc1.EventID, "d1")
	direct := domainEvent("Order", "b", "direct")
	direct.EventID = ids.id("direct")
	a1, retried, q1 := cmd("a", "a1"), cmd("r", "retried"), withExp(cmd("q", "q1"), 0)
	return []outcomeStep{
		{"", []envelope.Envelope{a1, cmd("a", "a2"), cmd("b", "b1")}, 1},
		{"", []envelope.Envelope{
			withExp(cmd("a", "fresh"), 2),
			withExp(cmd("a", "stale"), 1),
			withExp(cmd("a", "after"), 3),
			withExp(cmd("new", "first"), 0),
			withExp(cmd("ghost", "never"), 5), // new aggregate, conflict: no sequences row stays
			cmd("i-1", "plain"),
		}, 2},
		{"", []envelope.Envelope{withExp(cmd("a", "all stale"), 1)}, 1}, // nothing reserved
		{"", []envelope.Envelope{withExp(cmd("a", "right"), 4), withExp(cmd("a", "wrong"), 4)}, 1},
		{"", []envelope.Envelope{cmd("b", "b2"), direct, q1}, 1},
		// Domain events into their commands' slots.
		{"", []envelope.Envelope{sc1, sc2, sc3, sc4, st1}, 1},
		{"", []envelope.Envelope{d1, slot(sc2, 2, "", "d2"), sc5, cmd("u", "one")}, 1},
		{"", []envelope.Envelope{d1}, 4},                                              // retry of a stored domain event
		{"", []envelope.Envelope{slot(sc1, 1, "", "d1 again"), cmd("x", "taken")}, 4}, // slot 1 holds a domain event
		// Each slot rule alone, next to a valid command.
		{"", []envelope.Envelope{cmd("x", "no command"), slot(sc1, 9, "", "into 9")}, 3},
		{"", []envelope.Envelope{cmd("x", "cause"), slot(sc3, 3, sc1.EventID, "cause sc1")}, 3},
		{"", []envelope.Envelope{cmd("x", "nul"), slot(sc3, 3, "x\x00y", "cause nul")}, 2},
		{"UPDATE sluice.appends SET state = 'abandoned' WHERE aggregate_id = 's' AND sequence_number = 4 AND kind = 'command'",
			[]envelope.Envelope{cmd("x", "abandoned"), slot(sc4, 4, "", "into abandoned")}, 3},
		{"", []envelope.Envelope{slot(sc3, 3, sc3.EventID, "d3")}, 1},
		// OCC groups with slot envelopes: a stale command, an aggregate
		// named only by a slot envelope (t), and all stale.
		{"", []envelope.Envelope{withExp(cmd("s", "occ"), 5), slot(st1, 1, "", "dt1"), withExp(cmd("s", "occ stale"), 0)}, 1},
		{"", []envelope.Envelope{withExp(cmd("s", "all stale 2"), 0), slot(sc5, 5, sc5.EventID, "d5")}, 2},
		// Retries of stored events next to fresh ones, with and without
		// expected_seq (idempotency comes before optimistic concurrency).
		{"", []envelope.Envelope{cmd("a", "a3"), a1}, 4},
		{"", []envelope.Envelope{withExp(cmd("p", "fresh p"), 0), q1}, 3},
		// A retry of an abandoned append whose slot nothing followed keeps
		// its sequence and takes a fresh position.
		{"", []envelope.Envelope{retried}, 1},
		{"UPDATE sluice.appends SET state = 'abandoned' WHERE aggregate_id = 'r'", []envelope.Envelope{retried, cmd("r", "r2")}, 4},
	}
}

// describeOutcome is one result of TestReservationOutcomes in words.
func describeOutcome(ids namedIDs, e envelope.Envelope, r Result) string {
	name := ids[e.EventID]
	var ce *ConflictError
	var se *SlotError
	switch {
	case errors.As(r.Err, &ce):
		return fmt.Sprintf("%s: conflict expected %d actual %d", name, ce.ExpectedSeq, ce.ActualSeq)
	case errors.As(r.Err, &se):
		return ids.name(fmt.Sprintf("%s: slot error %s", name, se.Error()))
	case r.Err != nil:
		return ids.name(fmt.Sprintf("%s: error %v", name, r.Err))
	}
	return fmt.Sprintf("%s: seq %d pos %d dup %v %s@%d+%d", name, r.Event.Envelope.SequenceNumber, r.Event.Envelope.Position,
		r.Duplicate, r.Event.SegmentKey, r.Event.Offset, len(r.Event.Raw))
}

// TestReservationOutcomes appends a sequence of groups covering the
// reservation's rules and compares every result, the index rows, the
// sequences and the head with what the reservation gave when its rules
// were written twice (Go and the PL/pgSQL eventstore_reserve, kept equal
// by a test): the single implementation behaves the same. It also counts
// each reservation's round trips.
func TestReservationOutcomes(t *testing.T) {
	e := newEnv(t)
	s := e.store(t, testConfig())
	ids := namedIDs{}
	var got []string
	for i, st := range outcomeSteps(ids) {
		if st.prep != "" {
			if _, err := e.pool.Exec(ctxT(t), st.prep); err != nil {
				t.Fatal(err)
			}
		}
		q0 := e.tracer.N()
		rs, err := s.Append(ctxT(t), st.envs...)
		if err != nil {
			t.Fatal(err)
		}
		stored := false
		for j, r := range rs {
			got = append(got, fmt.Sprintf("%d %s", i, describeOutcome(ids, st.envs[j], r)))
			stored = stored || r.Err == nil && !r.Duplicate
		}
		trips := e.tracer.N() - q0
		if stored {
			trips-- // the commit
		}
		if trips != st.roundTrips {
			t.Errorf("step %d: %d round trips for the reservation, want %d", i, trips, st.roundTrips)
		}
	}
	snap := snapshot(t, e.pool)
	for _, a := range snap.appends {
		got = append(got, "appends "+ids.name(a))
	}
	for _, sq := range snap.sequences {
		got = append(got, "sequences "+sq)
	}
	got = append(got, fmt.Sprintf("head %d", snap.head))
	if os.Getenv("SLUICE_PRINT_OUTCOMES") != "" {
		for _, g := range got {
			fmt.Printf("\t\t%q,\n", g)
		}
	}
	want := wantOutcomes
	for i := range max(len(got), len(want)) {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			t.Errorf("line %d:\n got %q\nwant %q", i, g, w)
		}
	}
}

// wantOutcomes was recorded from the reservation with the rules written
// twice (fast and general path, equal by TestFastReservationMatchesGeneralPath),
// before they were made one.
var wantOutcomes = []string{
	"0 a1: seq 1 pos 1 dup false segments/00000000000000000001-00000000000000000003.jsonl@0+251",
	"0 a2: seq 2 pos 2 dup false segments/00000000000000000001-00000000000000000003.jsonl@252+251",
	"0 b1: seq 1 pos 3 dup false segments/00000000000000000001-00000000000000000003.jsonl@504+251",
	"1 fresh: seq 3 pos 4 dup false segments/00000000000000000004-00000000000000000007.jsonl@0+271",
	"1 stale: conflict expected 1 actual 3",
	"1 after: seq 4 pos 5 dup false segments/00000000000000000004-00000000000000000007.jsonl@272+271",
	"1 first: seq 1 pos 6 dup false segments/00000000000000000004-00000000000000000007.jsonl@544+273",
	"1 never: conflict expected 5 actual 0",
	"1 plain: seq 1 pos 7 dup false segments/00000000000000000004-00000000000000000007.jsonl@818+256",
	"2 all stale: conflict expected 1 actual 4",
	"3 right: seq 5 pos 8 dup false segments/00000000000000000008-00000000000000000008.jsonl@0+271",
	"3 wrong: conflict expected 4 actual 5",
	"4 b2: seq 2 pos 9 dup false segments/00000000000000000009-00000000000000000011.jsonl@0+251",
	"4 direct: seq 3 pos 10 dup false segments/00000000000000000009-00000000000000000011.jsonl@252+257",
	"4 q1: seq 1 pos 11 dup false segments/00000000000000000009-00000000000000000011.jsonl@510+269",
	"5 sc1: seq 1 pos 12 dup false segments/00000000000000000012-00000000000000000016.jsonl@0+253",
	"5 sc2: seq 2 pos 13 dup false segments/00000000000000000012-00000000000000000016.jsonl@254+253",
	"5 sc3: seq 3 pos 14 dup false segments/00000000000000000012-00000000000000000016.jsonl@508+253",
	"5 sc4: seq 4 pos 15 dup false segments/00000000000000000012-00000000000000000016.jsonl@762+253",
	"5 st1: seq 1 pos 16 dup false segments/00000000000000000012-00000000000000000016.jsonl@1016+253",
	"6 d1: seq 1 pos 17 dup false segments/00000000000000000017-00000000000000000020.jsonl@0+320",
	"6 d2: seq 2 pos 18 dup false segments/00000000000000000017-00000000000000000020.jsonl@321+253",
	"6 sc5: seq 5 pos 19 dup false segments/00000000000000000017-00000000000000000020.jsonl@575+253",
	"6 one: seq 1 pos 20 dup false segments/00000000000000000017-00000000000000000020.jsonl@829+253",
	"7 d1: seq 1 pos 17 dup true segments/00000000000000000017-00000000000000000020.jsonl@0+320",
	"8 d1 again: slot error eventstore: domain slot 1 of Order \"s\": the slot already holds another domain (held by event <d1>)",
	"8 taken: seq 1 pos 21 dup false segments/00000000000000000021-00000000000000000021.jsonl@0+255",
	"9 no command: seq 2 pos 22 dup false segments/00000000000000000022-00000000000000000022.jsonl@0+260",
	"9 into 9: slot error eventstore: domain slot 9 of Order \"s\": the slot holds no command (a domain event without a command must not set sequence_number)",
	"10 cause: seq 3 pos 23 dup false segments/00000000000000000023-00000000000000000023.jsonl@0+255",
	"10 cause sc1: slot error eventstore: domain slot 3 of Order \"s\": metadata.causation_id <sc1> is not the slot's command (held by event <sc3>)",
	"11 nul: seq 4 pos 24 dup false segments/00000000000000000024-00000000000000000024.jsonl@0+253",
	"11 cause nul: slot error eventstore: domain slot 3 of Order \"s\": metadata.causation_id x\x00y is not the slot's command (held by event <sc3>)",
	"12 abandoned: seq 5 pos 25 dup false segments/00000000000000000025-00000000000000000025.jsonl@0+259",
	"12 into abandoned: slot error eventstore: domain slot 4 of Order \"s\": the slot's command was abandoned (held by event <sc4>)",
	"13 d3: seq 3 pos 26 dup false segments/00000000000000000026-00000000000000000026.jsonl@0+320",
	"14 occ: seq 6 pos 27 dup false segments/00000000000000000027-00000000000000000028.jsonl@0+270",
	"14 dt1: seq 1 pos 28 dup false segments/00000000000000000027-00000000000000000028.jsonl@271+254",
	"14 occ stale: conflict expected 0 actual 6",
	"15 all stale 2: conflict expected 0 actual 6",
	"15 d5: seq 5 pos 29 dup false segments/00000000000000000029-00000000000000000029.jsonl@0+320",
	"16 a3: seq 6 pos 30 dup false segments/00000000000000000030-00000000000000000030.jsonl@0+252",
	"16 a1: seq 1 pos 1 dup true segments/00000000000000000001-00000000000000000003.jsonl@0+251",
	"17 fresh p: seq 1 pos 31 dup false segments/00000000000000000031-00000000000000000031.jsonl@0+274",
	"17 q1: seq 1 pos 11 dup true segments/00000000000000000009-00000000000000000011.jsonl@510+269",
	"18 retried: seq 1 pos 32 dup false segments/00000000000000000032-00000000000000000032.jsonl@0+257",
	"19 retried: seq 1 pos 33 dup false segments/00000000000000000033-00000000000000000034.jsonl@0+257",
	"19 r2: seq 2 pos 34 dup false segments/00000000000000000033-00000000000000000034.jsonl@258+252",
	"appends 1|<a1>|command|Order|a|1|committed|segments/00000000000000000001-00000000000000000003.jsonl|0|251|d06fe1cbcd1a569b9df0f3626a1fcd91415719d219db86b2fd31ad63d3ff8c5c|2026-11-21 10:00:00+00",
	"appends 2|<a2>|command|Order|a|2|committed|segments/00000000000000000001-00000000000000000003.jsonl|252|251|afda01a2589296d6f38c0c4132bce8f45cea4d8f4839979f20291c6d5e7308eb|2026-11-21 10:00:00+00",
	"appends 3|<b1>|command|Order|b|1|committed|segments/00000000000000000001-00000000000000000003.jsonl|504|251|890411a1df3749f692eab80e7b6bf257a03a91fd3613c1385134f5669a38431b|2026-11-21 10:00:00+00",
	"appends 4|<fresh>|command|Order|a|3|committed|segments/00000000000000000004-00000000000000000007.jsonl|0|271|efa925c926ee62bdefb051a727b97d516758b10d76bacd071977a2f9dd5ab71c|2026-11-21 10:00:00+00",
	"appends 5|<after>|command|Order|a|4|committed|segments/00000000000000000004-00000000000000000007.jsonl|272|271|6100da169c72601a82e60fc966877e946da793c0115cde307ac1140da56d64f0|2026-11-21 10:00:00+00",
	"appends 6|<first>|command|Order|new|1|committed|segments/00000000000000000004-00000000000000000007.jsonl|544|273|0a534c97f69a58a4ef30a56291b524c3de0168463265c8578f53b9b2cf768522|2026-11-21 10:00:00+00",
	"appends 7|<plain>|command|Order|i-1|1|committed|segments/00000000000000000004-00000000000000000007.jsonl|818|256|8756d6e240e1981ebea46724de19d0312236d52d588e19fd9227d688ce2ff522|2026-11-21 10:00:00+00",
	"appends 8|<right>|command|Order|a|5|committed|segments/00000000000000000008-00000000000000000008.jsonl|0|271|818ec061d66fb54e7709c707f8ecccb97fb1983ddf43c842e3ad3427181a6cf6|2026-11-21 10:00:00+00",
	"appends 9|<b2>|command|Order|b|2|committed|segments/00000000000000000009-00000000000000000011.jsonl|0|251|c234c925e99631310a9410152d1b1c2d1225797fceeb8adbf318d296922bc700|2026-11-21 10:00:00+00",
	"appends 10|<direct>|domain|Order|b|3|committed|segments/00000000000000000009-00000000000000000011.jsonl|252|257|932dfd6c1017b85f3f42a12ff5a397ea25dbe5a8394e49024a5074f97a3417b0|2026-11-21 10:00:00+00",
	"appends 11|<q1>|command|Order|q|1|committed|segments/00000000000000000009-00000000000000000011.jsonl|510|269|e644d749464bd98617b332ea7eec08a0dd029251da1ca97175f5a837a246de8f|2026-11-21 10:00:00+00",
	"appends 12|<sc1>|command|Order|s|1|committed|segments/00000000000000000012-00000000000000000016.jsonl|0|253|d1bd00f3b57daabb6a4c4789f661d596d0e0269a5cde8da543ec686871e6f8ee|2026-11-21 10:00:00+00",
	"appends 13|<sc2>|command|Order|s|2|committed|segments/00000000000000000012-00000000000000000016.jsonl|254|253|46ce0a128faa4792e5b28924b43babac512ecf7c075bcb858796d3c346cc47f0|2026-11-21 10:00:00+00",
	"appends 14|<sc3>|command|Order|s|3|committed|segments/00000000000000000012-00000000000000000016.jsonl|508|253|38454327ce69a110b095143d7dc673ae92f0d62e03a3f33dac3cb942366df183|2026-11-21 10:00:00+00",
	"appends 15|<sc4>|command|Order|s|4|abandoned|segments/00000000000000000012-00000000000000000016.jsonl|762|253|dd6a8ee649bd94dd9a928b68dc1c131301e80236b2ca006cb628f1313421e6d3|2026-11-21 10:00:00+00",
	"appends 16|<st1>|command|Order|t|1|committed|segments/00000000000000000012-00000000000000000016.jsonl|1016|253|d83cea36149eee16cc6660cfca54daa800d995a07d1e0b7f56dc2a2d68b2070b|2026-11-21 10:00:00+00",
	"appends 17|<d1>|domain|Order|s|1|committed|segments/00000000000000000017-00000000000000000020.jsonl|0|320|8af4bb958b92725023d51209f686189f8f16c3b071703e4ef48e1074a40728e1|2026-11-21 10:00:00+00",
	"appends 18|<d2>|domain|Order|s|2|committed|segments/00000000000000000017-00000000000000000020.jsonl|321|253|373e3b5ff0e2b5dd23158e33cb846b196e6497e6521196cae8018639fbd716bf|2026-11-21 10:00:00+00",
	"appends 19|<sc5>|command|Order|s|5|committed|segments/00000000000000000017-00000000000000000020.jsonl|575|253|027d5b7abe9faa7af68d3f797f70447ca0bcdbf1b5901c703ece3ae838c38c9f|2026-11-21 10:00:00+00",
	"appends 20|<one>|command|Order|u|1|committed|segments/00000000000000000017-00000000000000000020.jsonl|829|253|174926709f681e801216f5f73db8add4eb19b050d91d1b9924963eecc54bd88e|2026-11-21 10:00:00+00",
	"appends 21|<taken>|command|Order|x|1|committed|segments/00000000000000000021-00000000000000000021.jsonl|0|255|e74d8770906225938f55c1c8346be80c683940c4df02892330354c0df69b9d2f|2026-11-21 10:00:00+00",
	"appends 22|<no command>|command|Order|x|2|committed|segments/00000000000000000022-00000000000000000022.jsonl|0|260|5c47329142cbf1f58a19103cda8fb190d98a0ed8cd1abf31f7e0063114ee97bd|2026-11-21 10:00:00+00",
	"appends 23|<cause>|command|Order|x|3|committed|segments/00000000000000000023-00000000000000000023.jsonl|0|255|df89e344ca76cb60fd323237f7f50e7c9a951d241a3cf7d1eead3287a63a2da9|2026-11-21 10:00:00+00",
	"appends 24|<nul>|command|Order|x|4|committed|segments/00000000000000000024-00000000000000000024.jsonl|0|253|f558e6dbab61117b48226634b2d839ca5f1060872ef48bb3005ae33430a35e73|2026-11-21 10:00:00+00",
	"appends 25|<abandoned>|command|Order|x|5|committed|segments/00000000000000000025-00000000000000000025.jsonl|0|259|d3666719eb242a819a0d8ecad71d3b3b0711f4f40ee79295405c01ddb3dd88cc|2026-11-21 10:00:00+00",
	"appends 26|<d3>|domain|Order|s|3|committed|segments/00000000000000000026-00000000000000000026.jsonl|0|320|054cc1f5a04ea2f95bf29d6e6b503c0fc7f5fdc2a95995c7321353b957f17055|2026-11-21 10:00:00+00",
	"appends 27|<occ>|command|Order|s|6|committed|segments/00000000000000000027-00000000000000000028.jsonl|0|270|eddfa620ecb3adaf8ee8f9d93efc6350eb311cca19236523e66f6c9782b46177|2026-11-21 10:00:00+00",
	"appends 28|<dt1>|domain|Order|t|1|committed|segments/00000000000000000027-00000000000000000028.jsonl|271|254|84f1c19048321977badf48f6ba53530e69d808ae8a317db11e130f38109f337b|2026-11-21 10:00:00+00",
	"appends 29|<d5>|domain|Order|s|5|committed|segments/00000000000000000029-00000000000000000029.jsonl|0|320|414f5ae0dcbf685a0f6717012033557894f10f521833a4778a3a610d72d901be|2026-11-21 10:00:00+00",
	"appends 30|<a3>|command|Order|a|6|committed|segments/00000000000000000030-00000000000000000030.jsonl|0|252|e4887fde9d4a6f1acc8e19c3985391ff31c61867dee8020e6c46c7e176ff21b6|2026-11-21 10:00:00+00",
	"appends 31|<fresh p>|command|Order|p|1|committed|segments/00000000000000000031-00000000000000000031.jsonl|0|274|a6e4bd12ced9933cb0a7f4d7ab6c0fd429a17f1ec737f99cf2f22ff2e72f1682|2026-11-21 10:00:00+00",
	"appends 33|<retried>|command|Order|r|1|committed|segments/00000000000000000033-00000000000000000034.jsonl|0|257|298776614ac14dfb46cb6550dbbfa1972d2821a817836cf5e16d807c7cd2531e|2026-11-21 10:00:00+00",
	"appends 34|<r2>|command|Order|r|2|committed|segments/00000000000000000033-00000000000000000034.jsonl|258|252|ecd302a17a103f5c151e54e987516a39f79ad5d3245582f9bc528fb758adbc8f|2026-11-21 10:00:00+00",
	"sequences Order|a|6",
	"sequences Order|b|3",
	"sequences Order|i-1|1",
	"sequences Order|new|1",
	"sequences Order|p|1",
	"sequences Order|q|1",
	"sequences Order|r|2",
	"sequences Order|s|6",
	"sequences Order|t|1",
	"sequences Order|u|1",
	"sequences Order|x|5",
	"head 35",
}
