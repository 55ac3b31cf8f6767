package eventstore

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/sluicehq/sluice/shared/envelope"
)

// legacyDecodeLine is how stored lines were decoded before lineDecoder: one
// encoding/json.Unmarshal per line. The line decoder must agree with it.
func legacyDecodeLine(raw []byte) (envelope.Envelope, error) {
	var e envelope.Envelope
	err := json.Unmarshal(raw, &e)
	return e, err
}

// lineSeeds are stored lines and near misses: every field, escapes,
// null data and metadata, nested data, a duplicate and a differently
// cased name, invalid UTF-8, truncation, a wrong type.
var lineSeeds = []string{
	`{"event_id":"0b7e5a58-6b1a-4d7e-9d43-3f5d2c1a9e01","event_type":"OrderPlaced","kind":"domain","aggregate_type":"Order","aggregate_id":"o-1/\u00fc","sequence_number":7,"position":4242,"expected_seq":6,"occurred_at":"2026-11-21T10:00:00.123Z","actor":"a\"b","data":{"total":10.50,"items":[{"sku":"a","n":1}],"s":"<&>"},"metadata":{"principal":"team-a","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","free":[1,true,null],"n":12345678901234567890.5},"schema_version":3}`,
	`{"event_id":"e","event_type":"T","kind":"command","aggregate_type":"A","aggregate_id":"x","sequence_number":1,"position":1,"data":{}}`,
	`{"event_id":"e","event_type":"T","kind":"command","aggregate_type":"A","aggregate_id":"x","sequence_number":1,"position":1,"data":null,"metadata":null,"occurred_at":null}`,
	` { "event_id" : "e" , "kind":"domain","aggregate_type":"A","aggregate_id":"x","sequence_number":1,"position":2,"data": [ 1 , 2 ] , "metadata" : { "k" : "v" } } `,
	`{"event_id":"e","EVENT_ID":"f","kind":"domain","aggregate_type":"A","aggregate_id":"x","sequence_number":1,"position":1,"position":3}`,
	"{\"event_id\":\"e\xff\",\"kind\":\"domain\",\"aggregate_type\":\"A\",\"aggregate_id\":\"x\",\"sequence_number\":1,\"position\":1,\"data\":{\"s\":\"\xfe\"}}",
	`{"event_id":"e\ud800","kind":"domain","aggregate_type":"A","aggregate_id":"x","sequence_number":1,"position":1}`,
	`{"event_id":"e","kind":"domain","aggregate_type":"A","aggregate_id":"x","sequence_number":1,"position":"1"}`,
	`{"event_id":"e","kind":"domain","aggregate_type":"A","aggregate_id":"x","sequence_number":1,"position":1.0}`,
	`{"event_id":"e","kind":"domain","aggregate_type":"A","aggregate_id":"x","sequence_number":1,"position":1,"occurred_at":"yesterday"}`,
	`{"event_id":"e","kind":"domain","aggregate_type":"A","aggregate_id":"x","sequence_number":1,"position":1,"data":{"a":`,
	`{"event_id":"e","unknown":{"deep":[{"x":1}]},"kind":"domain","aggregate_type":"A","aggregate_id":"x","sequence_number":1,"position":1}`,
	`[]`, `null`, `{}`, `{"data":{}} {}`,
	// The fast path's edges (decodeStored): each form it takes, and each it
	// leaves to the general path.
	`{"event_id":"e","event_type":"T","kind":"domain","aggregate_type":"A","aggregate_id":"x","sequence_number":-0,"position":9223372036854775807,"expected_seq":0,"schema_version":2,"data":"s","metadata":{"command_id":"c","k":{"a":[1,{"b":null}]},"\u006b2":"\u00e9"}}`,
	`{"event_id":"e","kind":"domain","aggregate_type":"A","aggregate_id":"x","sequence_number":1,"position":9223372036854775808}`,
	`{"event_id":"e","kind":"domain","aggregate_type":"A","aggregate_id":"x","sequence_number":1,"position":1,"schema_version":1e0}`,
	`{"event_id":"e","kind":"domain","aggregate_type":"A","aggregate_id":"x","sequence_number":1,"position":1,"kind":"command"}`,
	`{"event_id":"e","kind":"domain","aggregate_type":"A","aggregate_id":"x","sequence_number":1,"position":1,"metadata":{"a":1,"a":2}}`,
	`{"event_id":"e","kind":"domain","aggregate_type":"A","aggregate_id":"x","sequence_number":1,"position":1,"metadata":{"a":null}}`,
	`{"event_id":"e","kind":"domain","aggregate_type":"A","aggregate_id":"x","sequence_number":1,"position":1,"metadata":{"a":1},"metadata":{"b":2}}`,
	`{"\u0065vent_id":"e","kind":"\u0064omain","aggregate_type":"A","aggregate_id":"x","sequence_number":1,"position":1}`,
	`{"event_id":"e","kind":"domain","aggregate_type":"A","aggregate_id":"x\ud83d\ude80","actor":"\udc00","sequence_number":1,"position":1}`,
	"{\"event_id\":\"e\",\"kind\":\"domain\",\"aggregate_type\":\"A\",\"aggregate_id\":\"x\",\"sequence_number\":1,\"position\":1,\"metadata\":{\"k\xff\":1}}",
	`{"event_id":"e","kind":"domain","aggregate_type":"A","aggregate_id":"x","sequence_number":1,"position":1,"expected_seq":null,"actor":null}`,
	`{"event_id":"e","kind":"Domain","aggregate_type":"A","aggregate_id":"x","sequence_number":1,"position":1,"occurred_at":"2026-02-29T10:00:00.123Z"}`,
	`{"event_id":"e","kind":"domain","aggregate_type":"A","aggregate_id":"x","sequence_number":1,"position":1,"occurred_at":"2024-02-29T23:59:60.999Z"}`,
	`{"event_id":"e","kind":"domain","aggregate_type":"A","aggregate_id":"x","sequence_number":1,"position":1,"occurred_at":"0000-12-31T24:00:00.000Z"}`,
	`{"event_id":"e","kind":"domain","aggregate_type":"A","aggregate_id":"x","sequence_number":1,"position":1,"occurred_at":"2026-11-21T10:00:00.123+01:00"}`,
}

// FuzzLineDecoder checks the line decoder against encoding/json on any
// input: it refuses every line json.Unmarshal refuses; of the others it
// refuses exactly those without the identity fields and decodes the rest
// to the same envelope, data and metadata byte for byte and slices of the
// line itself.
func FuzzLineDecoder(f *testing.F) {
	for _, s := range lineSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		want, werr := legacyDecodeLine(raw)
		got, err := newLineDecoder().decode(raw)
		switch {
		case werr != nil:
			if err == nil {
				t.Fatalf("%q: decoded %+v, encoding/json refused it: %v", raw, got, werr)
			}
			return
		case lineIdentity(want) != nil:
			if err == nil {
				t.Fatalf("%q: decoded %+v without its identity fields", raw, got)
			}
			return
		case err != nil:
			t.Fatalf("%q: %v, encoding/json decoded %+v", raw, err, want)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n got %+v\nwant %+v", raw, got, want)
		}
		for k, v := range got.Metadata {
			if !within(v, raw) {
				t.Errorf("%q: metadata %s is a copy, want a slice of the line", raw, k)
			}
		}
		if got.Data != nil && !within(got.Data, raw) {
			t.Errorf("%q: data is a copy, want a slice of the line", raw)
		}
	})
}

// within reports whether v is a capacity-limited slice of raw's array.
func within(v, raw []byte) bool {
	if len(v) == 0 || cap(v) != len(v) {
		return false
	}
	for i := range raw {
		if &raw[i] == &v[0] {
			return i+len(v) <= len(raw) && bytes.Equal(raw[i:i+len(v)], v)
		}
	}
	return false
}

// BenchmarkDecodeLine counts the allocations of decoding one stored line
// (the first seed: every field, metadata, a nested data object) with
// encoding/json as before and with the line decoder of one segment read.
//
// Run: go test -run '^$' -bench BenchmarkDecodeLine -benchmem ./eventstore/
func BenchmarkDecodeLine(b *testing.B) {
	raw := []byte(lineSeeds[0])
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := legacyDecodeLine(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("line-decoder", func(b *testing.B) {
		b.ReportAllocs()
		d := newLineDecoder()
		for b.Loop() {
			if _, err := d.decode(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
}
