package eventstore

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/shared/envelope"
)

func TestSegmentKeyRoundTrip(t *testing.T) {
	for _, c := range []struct{ first, last int64 }{{1, 1}, {1, 500}, {99999, 100000}, {1 << 40, 1<<40 + 7}} {
		k := SegmentKey(c.first, c.last)
		f, l, err := ParseSegmentKey(k)
		if err != nil || f != c.first || l != c.last {
			t.Errorf("ParseSegmentKey(%q) = %d, %d, %v", k, f, l, err)
		}
	}
	for _, bad := range []string{
		"", "segments/", "segments/1-2.jsonl", "segments/00000000000000000002-00000000000000000001.jsonl",
		"segments/00000000000000000000-00000000000000000001.jsonl", "segments/0000000000000000000a-00000000000000000001.jsonl",
		"segments/00000000000000000001-00000000000000000001.json", "checkpoints/00000000000000000001-00000000000000000001.jsonl",
		"segments/00000000000000000001_00000000000000000001.jsonl", "segments/+0000000000000000001-00000000000000000001.jsonl",
	} {
		if _, _, err := ParseSegmentKey(bad); err == nil {
			t.Errorf("ParseSegmentKey(%q) accepted", bad)
		}
	}
}

// The committer splices sequence_number and position into a line encoded
// in the caller's goroutine; the result must be exactly envelope.Marshal,
// and exactly what encoding/json's reflection encoder wrote (older
// versions' lines), and the hash encoded with it envelope.CanonicalHash.
func TestLineTemplateMatchesMarshal(t *testing.T) {
	tricky := `x,"sequence_number":7777777777777777771,"position":7777777777777777772,y`
	cases := []struct {
		name string
		mod  func(*envelope.Envelope)
	}{
		{"plain", func(*envelope.Envelope) {}},
		{"tricky aggregate id", func(e *envelope.Envelope) { e.AggregateID = tricky }},
		{"tricky data and metadata", func(e *envelope.Envelope) {
			e.Data = json.RawMessage(`{"k":"` + `,\"sequence_number\":1,` + `"}`)
			e.Metadata.SetString("free", tricky)
		}},
		{"expected_seq and actor", func(e *envelope.Envelope) { e.ExpectedSeq = expect(0); e.Actor = "ann" }},
		{"escapes and transport keys", func(e *envelope.Envelope) {
			e.Actor = "a\u2028<&>\"\\\x01é"
			e.Data = json.RawMessage(" { \"b\" : [ 1 , 2.50 ] , \"a\" : \"\u2029\" } ")
			e.Metadata.SetString(envelope.MetaTraceparent, "00-x")
			e.Metadata["z"] = json.RawMessage(`{ "n" : 12345678901234567890123 }`)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := command("Order", "o-1", map[string]any{"a": 1})
			c.mod(&e)
			p, err := envelope.Prepare(e, envelope.DefaultLimits(), nil)
			if err != nil {
				t.Fatal(err)
			}
			tmpl, hash, err := newLineTemplateHash(p)
			if err != nil {
				t.Fatal(err)
			}
			if want, err := envelope.CanonicalHash(p); err != nil || hash != want {
				t.Fatalf("hash %x, CanonicalHash %x (%v)", hash, want, err)
			}
			got := tmpl.appendLine(nil, 42, 123456789)
			p.SequenceNumber, p.Position = 42, 123456789
			want, _ := envelope.Marshal(p)
			if !bytes.Equal(got, want) {
				t.Fatalf("spliced line\n%s\nwant\n%s", got, want)
			}
			if old, _ := envelope.EncodeJSON(p); !bytes.Equal(got, old) {
				t.Fatalf("spliced line\n%s\nreflection encoder\n%s", got, old)
			}
		})
	}
}

func TestSpansCoalesceAdjacentRanges(t *testing.T) {
	rows := []indexRow{
		{key: "b", offset: 0, length: 10}, {key: "a", offset: 11, length: 10}, {key: "a", offset: 0, length: 10},
		{key: "a", offset: 100000, length: 5}, {key: "b", offset: 11, length: 3},
	}
	sp := spans(rows)
	if len(sp) != 3 {
		t.Fatalf("%d spans, want 3: %+v", len(sp), sp)
	}
	if sp[0].key != "a" || sp[0].start != 0 || sp[0].end != 21 || len(sp[0].members) != 2 {
		t.Errorf("first span %+v", sp[0])
	}
}

// Data that holds the sentinel marker makes the line's layout ambiguous:
// newLineTemplate refuses it (as it always did) rather than splice in the
// wrong place.
func TestLineTemplateRefusesMarkerInData(t *testing.T) {
	for _, tc := range []struct {
		data    string
		refused bool
	}{
		{`{"a":1` + string(sentinelMarker) + `"b":2}`, true},
		{`{"a":1` + string(sentinelMarker[:len(sentinelMarker)-1]) + `}`, false},
	} {
		t.Run(tc.data, func(t *testing.T) {
			e := command("Order", "o-1", map[string]any{"a": 1})
			e.Data = json.RawMessage(tc.data)
			p, err := envelope.Prepare(e, envelope.DefaultLimits(), nil)
			if err != nil {
				t.Fatal(err)
			}
			_, err = newLineTemplate(p)
			if refused := err != nil && strings.Contains(err.Error(), "unexpected field layout"); refused != tc.refused || err != nil && !refused {
				t.Fatalf("error %v, want refused %v", err, tc.refused)
			}
		})
	}
}
