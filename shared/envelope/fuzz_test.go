package envelope

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// FuzzAggregateID checks the identity rules of docs/architecture.md#aggregate-identity on arbitrary pairs of
// strings: normalisation is idempotent, path encoding uses only a safe
// alphabet and round-trips, and ids that differ after normalisation never
// share an encoded key (nor a Kafka key or an Elasticsearch _id).
func FuzzAggregateID(f *testing.F) {
	seeds := [][2]string{
		{"Order-1", "order-1"},
		{"caf\u00e9", "cafe\u0301"},
		{" \u0301a", "\u0301a"},
		{"a/b", "a%2Fb"},
		{"%2F", "/"},
		{"..", "."},
		{"\u00a0x\u00a0", "x"},
		{"shop:orders:a:b", "shop:orders:a/b"},
		{"🚀", "\u212b"},
		{"a\x00b", "\xff"},
		{"\t\n", ""},
		{"\u0344", "\u0308\u0301"},
		{"\u1100\u1161\u11a8", "\uac01"},
		{"e\u0301\u0301", "\u00e9\u0301"},
		{strings.Repeat("x", 513), strings.Repeat("x", 512)},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		na, errA := NormalizeAggregateID(a)
		nb, errB := NormalizeAggregateID(b)
		for _, c := range []struct {
			in, n string
			err   error
		}{{a, na, errA}, {b, nb, errB}} {
			if c.err != nil {
				if fieldOf(c.err) != "aggregate_id" {
					t.Fatalf("NormalizeAggregateID(%+q): untyped error %v", c.in, c.err)
				}
				continue
			}
			again, err := NormalizeAggregateID(c.n)
			if err != nil || again != c.n {
				t.Fatalf("not idempotent: %+q → %+q → %+q (%v)", c.in, c.n, again, err)
			}
			if c.n == "" || len(c.n) > MaxAggregateIDBytes {
				t.Fatalf("normalised id %+q out of bounds", c.n)
			}
			enc := EncodePathSegment(c.n)
			for i := 0; i < len(enc); i++ {
				if ch := enc[i]; !keptInPath(ch) && ch != '%' {
					t.Fatalf("EncodePathSegment(%+q) = %q contains %q", c.n, enc, ch)
				}
			}
			dec, err := DecodePathSegment(enc)
			if err != nil || dec != c.n {
				t.Fatalf("DecodePathSegment(EncodePathSegment(%+q)) = %+q, %v", c.n, dec, err)
			}
		}
		if errA == nil && errB == nil && na != nb {
			if EncodePathSegment(na) == EncodePathSegment(nb) {
				t.Fatalf("%+q and %+q encode to the same path segment", na, nb)
			}
			ka := KafkaKey(Envelope{AggregateType: "T", AggregateID: na})
			kb := KafkaKey(Envelope{AggregateType: "T", AggregateID: nb})
			if bytes.Equal(ka, kb) {
				t.Fatalf("%+q and %+q share a Kafka key", na, nb)
			}
			if ESDocumentID(na) == ESDocumentID(nb) {
				t.Fatalf("%+q and %+q share an ES _id", na, nb)
			}
		}
		// Arbitrary strings never make DecodePathSegment panic, and whatever
		// it accepts re-encodes to the same string (encoding is a bijection).
		if dec, err := DecodePathSegment(a); err == nil && EncodePathSegment(dec) != a {
			t.Fatalf("DecodePathSegment accepted non-canonical %q", a)
		}
	})
}

// FuzzParseEnvelope checks that Parse never panics and that an accepted
// envelope has a deterministic canonical hash that survives Marshal+Parse.
func FuzzParseEnvelope(f *testing.F) {
	f.Add([]byte(minimalValid))
	f.Add([]byte(`{"event_id":"0B4F2A3C-9D1E-4C8A-B7E2-5F6A7B8C9D0E","event_type":"CREATE_INSTANCE","kind":"command",` +
		`"aggregate_type":"Instance","aggregate_id":" shop:orders:cafe\u0301/1 ","sequence_number":7,"position":9,` +
		`"expected_seq":0,"occurred_at":"2026-11-21T11:00:00.123456+01:00","actor":"u",` +
		`"data":{"b":[1,2,{"c":null}],"a":12345678901234567890123,"s":"<\u2028>"},` +
		`"metadata":{"command_id":"cmd-1","traceparent":"00-x","x":{"n":1e400}},"schema_version":3}`))
	f.Add([]byte(`{"event_id":"0b4f2a3c-9d1e-4c8a-b7e2-5f6a7b8c9d0e","data":{"a":{"a":{"a":[[[]]]}}}}`))
	f.Add([]byte(`{"a":1,"a":2}`))
	f.Add([]byte(`[{}]`))
	f.Add([]byte(`{} {}`))
	f.Add([]byte(`{"data":{"\u0061":1,"a":2}}`))
	f.Add([]byte("{\"aggregate_id\":\"\xff\"}"))
	f.Add([]byte(``))
	f.Add([]byte(` { "data" : { "a" : [ 1 , "x" ] } , "position":7 ,"actor":null, "schema_version" :1e0 }`))
	f.Add([]byte("{\"data\":{}\n,\"metadata\":\t{\"k\":\"\\u00e9\"}}"))
	// Invalid text: lone surrogate escapes and invalid UTF-8 (issue 26.2).
	for _, bad := range []string{`\ud800`, `\udbff`, `\udfff`, `\ud800\u0041`, `\udc00\ud800`, `\\\ud800`, "\xed\xa0\x80", "\xc0\xaf"} {
		f.Add([]byte(strings.Replace(minimalValid, "Order-1", "Order-"+bad, 1)))
		f.Add([]byte(`{"data":{"a":"` + bad + `","k` + bad + `":[1]},"metadata":{"n":"` + bad + `"}}`))
	}
	f.Add([]byte(strings.Replace(minimalValid, "Order-1", `\ufffd\ud83d\ude80`, 1)))
	limits := Limits{MaxEnvelopeBytes: 64 << 10, MaxDataDepth: 16, MaxMetadataBytes: 4 << 10}
	f.Fuzz(func(t *testing.T, b []byte) {
		// The walk's top-level fields are exactly json.Unmarshal's (Parse
		// relies on it instead of a second pass).
		walked := map[string]json.RawMessage{}
		if ScanObject(b, ObjectRule{Offset: 1, MaxDepth: 1 << 20, OnValue: func(k string, v []byte) { walked[k] = v }}) == nil {
			var want map[string]json.RawMessage
			if err := json.Unmarshal(b, &want); err != nil {
				t.Fatalf("walk accepted what json.Unmarshal rejects (%v): %q", err, b)
			}
			if len(want) != len(walked) {
				t.Fatalf("walk found %d fields, json.Unmarshal %d: %q", len(walked), len(want), b)
			}
			for k, v := range want {
				if !bytes.Equal(walked[k], v) {
					t.Fatalf("field %q: walk %q, json.Unmarshal %q", k, walked[k], v)
				}
			}
		}
		e, err := Parse(b, limits)
		_, _, textOK := ScanJSONText(b)
		if err != nil {
			if fieldOf(err) == "<nil>" || codeOf(err) == "" {
				t.Fatalf("Parse error is not a *ValidationError: %v", err)
			}
			if codeOf(err) == CodeInvalidText && textOK {
				t.Fatalf("invalid_text error for text ScanJSONText accepts: %v", err)
			}
			return
		}
		if !textOK {
			t.Fatalf("Parse accepted invalid text (lone surrogate escape or invalid UTF-8): %q", b)
		}
		h1, err := CanonicalHash(e)
		if err != nil {
			t.Fatalf("CanonicalHash of a parsed envelope: %v", err)
		}
		h2, _ := CanonicalHash(e)
		if h1 != h2 {
			t.Fatal("CanonicalHash not deterministic")
		}
		if err := Validate(e, limits); err != nil {
			t.Fatalf("parsed envelope fails Validate: %v", err)
		}
		out, err := Marshal(e)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		// Parse skips the encoded-size check below this bound.
		if len(out) > maxEncodedLen(len(b)) {
			t.Fatalf("encoding of %d bytes exceeds maxEncodedLen(%d) = %d", len(out), len(b), maxEncodedLen(len(b)))
		}
		e2, err := Parse(out, limits)
		if err != nil {
			t.Fatalf("re-Parse of %s: %v", out, err)
		}
		h3, err := CanonicalHash(e2)
		if err != nil || h3 != h1 {
			t.Fatalf("hash changed after Marshal+Parse (%v):\n%s", err, out)
		}
		out2, _ := Marshal(e2)
		if !bytes.Equal(out, out2) {
			t.Fatalf("Marshal not stable:\n%s\n%s", out, out2)
		}
	})
}

// FuzzScanJSONText compares ScanJSONText with the strict jsontext decoder
// (encoding/json/v2's, which rejects invalid UTF-8 and lone surrogate
// escapes): on any input the lenient decoder reads as JSON, the strict one
// accepts it exactly when ScanJSONText does, and CheckJSONText's error is
// typed whatever the input.
func FuzzScanJSONText(f *testing.F) {
	for _, s := range []string{`"\ud800"`, `"\udbff\udfff"`, `{"a":"\ud83d\ude80","\udc00":1}`, `["\\ud800","\u0041"]`,
		"\"\xed\xa0\x80\"", "\"\xff\"", `"\ufffd"`, `{"a":[{"b":"\ud800x"}]}`, `"\ud800\n"`, `"\u12"`, `"\`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _, ok := ScanJSONText(b)
		err := CheckJSONText(b, "x")
		if ok != (err == nil) {
			t.Fatalf("ScanJSONText ok=%v but CheckJSONText = %v", ok, err)
		}
		if err != nil && (codeOf(err) != CodeInvalidText || !strings.HasPrefix(fieldOf(err), "x")) {
			t.Fatalf("CheckJSONText error not typed: %v", err)
		}
		if !utf8.Valid(b) {
			if ok {
				t.Fatalf("invalid UTF-8 accepted: %q", b)
			}
			return
		}
		if jsontext.Value(b).IsValid(jsontext.AllowInvalidUTF8(true)) {
			strict := jsontext.Value(b).IsValid()
			if strict != ok {
				t.Fatalf("strict decoder %v, ScanJSONText %v on %q", strict, ok, b)
			}
		}
	})
}

// FuzzTimestampUnmarshal checks Timestamp.UnmarshalJSON against its
// contract on any input: null unsets it; otherwise the value decodes as
// json.Unmarshal decodes a string and ParseTimestamp parses that, with
// an error exactly when either fails.
func FuzzTimestampUnmarshal(f *testing.F) {
	for _, s := range []string{`"2026-11-21T10:00:00.123Z"`, `"2026-11-21T10:00:00+02:00"`, `"2026-11-21T10:00:00.123\u005a"`, `null`, `"yesterday"`, ` "2026-11-21T10:00:00Z" `, `1`, `"10000-01-01T00:00:00Z"`, "\"2026-11-21T10:00:00Z\xff\""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var got Timestamp
		err := got.UnmarshalJSON(raw)
		var want Timestamp
		var werr error
		if string(raw) != "null" {
			var s string
			if werr = json.Unmarshal(raw, &s); werr == nil {
				want, werr = ParseTimestamp(s)
			}
		}
		if (err == nil) != (werr == nil) || got != want {
			t.Fatalf("UnmarshalJSON(%q) = %v, %v; want %v, %v", raw, got, err, want, werr)
		}
	})
}
