package envelope

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

// TestMetadataStringsAsJSON: SetString writes exactly json.Marshal's bytes
// and String reads exactly what json.Unmarshal decodes, for every byte
// value alone and amid plain text, and for escaped and malformed values —
// the metadata the store hashes and the canonical form compares must not
// depend on which path wrote or read it.
func TestMetadataStringsAsJSON(t *testing.T) {
	values := []string{"", "abc", "0192f1a0-7c3e-7000-8000-000000000001", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"a<b", "a>b", "a&b", `a"b`, `a\b`, "é", "\u2028", "\x7f", "\xff", "tab\there"}
	for c := range 256 {
		values = append(values, string(rune(c)), "x"+string([]byte{byte(c)})+"y")
	}
	for _, v := range values {
		var m Metadata
		m.SetString("k", v)
		want, _ := json.Marshal(v)
		if !bytes.Equal(m["k"], want) {
			t.Fatalf("SetString(%q) wrote %s, json.Marshal writes %s", v, m["k"], want)
		}
		got, ok := m.String("k")
		var dec string
		_ = json.Unmarshal(want, &dec)
		if !ok || got != dec {
			t.Fatalf("String of %s = %q, %v; json.Unmarshal decodes %q", want, got, ok, dec)
		}
	}
	raws := []string{`"plain"`, `"a\u0062c"`, `"a\nb"`, `""`, `"`, `x"`, `"unterminated`, `12`, `null`, `{"a":1}`, `"a"b"`, `"\u003c"`, "\"\xff\""}
	for _, r := range raws {
		m := Metadata{"k": json.RawMessage(r)}
		got, ok := m.String("k")
		var want string
		err := json.Unmarshal([]byte(r), &want)
		if ok != (err == nil) || got != want {
			t.Errorf("String of %s = %q, %v; json.Unmarshal: %q, %v", r, got, ok, want, err)
		}
	}
}

// TestEncodedBound: EncodedBound is never below the length of the
// envelope's encoding, with every field at its worst for escaping and the
// numbers at their widest; Validate therefore may skip the encoding under
// it (and still refuses an envelope over the limit: TestValidateLimit…).
func TestEncodedBound(t *testing.T) {
	seq := int64(math.MaxInt64)
	worst := strings.Repeat("\x00", 40)
	cases := []struct {
		name string
		e    Envelope
	}{
		{"small", Envelope{EventID: "0192f1a0-7c3e-7000-8000-000000000001", EventType: "A", Kind: KindCommand, AggregateType: "T", AggregateID: "x", Data: json.RawMessage(`{}`), SchemaVersion: 1}},
		{"empty", Envelope{}},
		{"escapes everywhere", Envelope{EventID: worst, EventType: worst, Kind: Kind(worst), AggregateType: worst, AggregateID: worst, Actor: worst,
			SequenceNumber: seq, Position: seq, ExpectedSeq: &seq, OccurredAt: NewTimestamp(time.Now()), SchemaVersion: math.MaxInt,
			Data:     json.RawMessage(`{"` + strings.Repeat(`\u0000`, 10) + `":"<>&"}`),
			Metadata: Metadata{"": json.RawMessage(`""`), worst: json.RawMessage(`"` + strings.Repeat(`\u0000`, 5) + `"`), "a": json.RawMessage(`1`), "b": json.RawMessage(`[1, 2 , 3]`)}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := Marshal(c.e)
			if err != nil {
				t.Fatal(err)
			}
			if bound := EncodedBound(c.e); bound < len(b) {
				t.Fatalf("EncodedBound %d < %d bytes encoded", bound, len(b))
			}
		})
	}
}

// TestValidateMetadataLimitExact: an envelope built in Go whose metadata
// (scalar values, the kind Validate may size without encoding) encodes to
// exactly the limit passes, one byte more is refused — the shortcut never
// decides at the boundary.
func TestValidateMetadataLimitExact(t *testing.T) {
	e, err := Parse([]byte(minimalValid), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	const limit = 512
	for _, extra := range []int{0, 1} {
		e.Metadata = Metadata{"n": json.RawMessage(`12`), "b": json.RawMessage(`true`)}
		b, _ := EncodeJSON(e.Metadata)
		// {"b":true,"n":12,"s":"…"}: 7 bytes for ,"s":"" around the value
		e.Metadata["s"] = json.RawMessage(`"` + strings.Repeat("m", limit-len(b)-7+extra) + `"`)
		if b, _ := EncodeJSON(e.Metadata); len(b) != limit+extra {
			t.Fatalf("built %d bytes of metadata, want %d", len(b), limit+extra)
		}
		err := Validate(e, Limits{MaxMetadataBytes: limit})
		if (err == nil) != (extra == 0) || (err != nil && (fieldOf(err) != "metadata" || codeOf(err) != CodeLimitExceeded)) {
			t.Fatalf("metadata of %d bytes, limit %d: %v", limit+extra, limit, err)
		}
	}
}

// TestValidateBuiltData: ValidateBuiltData leaves data's walk to the
// caller that built it from checked JSON, and checks every other rule as
// Validate does.
func TestValidateBuiltData(t *testing.T) {
	e, err := Parse([]byte(minimalValid), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	deep := e
	deep.Data = json.RawMessage(`{"a":{"b":{}}}`)
	if err := ValidateBuiltData(deep, Limits{MaxDataDepth: 2}); err != nil {
		t.Fatalf("data the caller checked is walked again: %v", err)
	}
	if err := Validate(deep, Limits{MaxDataDepth: 2}); fieldOf(err) != "data" {
		t.Fatalf("Validate of data over the depth: %v", err)
	}
	for _, c := range []struct {
		name, field string
		edit        func(*Envelope)
		limits      Limits
	}{
		{"event_id", "event_id", func(e *Envelope) { e.EventID = "x" }, Limits{}},
		{"metadata depth", "metadata", func(e *Envelope) { e.Metadata = Metadata{"m": json.RawMessage(`{"a":{"b":{}}}`)} }, Limits{MaxDataDepth: 2}},
		{"envelope size", "", func(e *Envelope) { e.Data = json.RawMessage(`{"s":"` + strings.Repeat("x", 600) + `"}`) }, Limits{MaxEnvelopeBytes: 512}},
	} {
		t.Run(c.name, func(t *testing.T) {
			bad := e
			c.edit(&bad)
			err := ValidateBuiltData(bad, c.limits)
			if err == nil || fieldOf(err) != c.field {
				t.Fatalf("ValidateBuiltData = %v, want an error naming %q", err, c.field)
			}
		})
	}
}
