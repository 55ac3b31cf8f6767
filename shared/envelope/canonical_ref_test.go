package envelope

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// referenceCanonicalJSON is the canonical form computed the slow, obvious
// way: decode the marshalled envelope (canonicalInput) with encoding/json
// (UseNumber) into Go values and write them back with sorted keys. CanonicalJSON works on the
// bytes instead; the two must agree on every envelope, since stored hashes
// compare across versions.
func referenceCanonicalJSON(e Envelope) ([]byte, error) {
	enc, err := canonicalInput(e)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(enc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	referenceWrite(&buf, v)
	return buf.Bytes(), nil
}

func referenceWrite(buf *bytes.Buffer, v any) {
	switch t := v.(type) {
	case nil:
		buf.WriteString("null")
	case bool:
		fmt.Fprint(buf, t)
	case json.Number:
		buf.WriteString(string(t))
	case string:
		referenceString(buf, t)
	case []any:
		buf.WriteByte('[')
		for i, x := range t {
			if i > 0 {
				buf.WriteByte(',')
			}
			referenceWrite(buf, x)
		}
		buf.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		buf.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			referenceString(buf, k)
			buf.WriteByte(':')
			referenceWrite(buf, t[k])
		}
		buf.WriteByte('}')
	}
}

// referenceString escapes '"', '\\' and control characters, with the short
// forms where JSON has them, and writes U+FFFD's escape for a byte that is
// not UTF-8.
func referenceString(buf *bytes.Buffer, s string) {
	buf.WriteByte('"')
	for _, r := range s {
		switch {
		case r == utf8.RuneError:
			// encoding/json never leaves invalid UTF-8 in a decoded string
			// (it substitutes U+FFFD), so this is a real U+FFFD.
			buf.WriteRune(r)
		case r == '"' || r == '\\':
			buf.WriteByte('\\')
			buf.WriteRune(r)
		case r < 0x20:
			if esc, ok := map[rune]string{'\n': `\n`, '\r': `\r`, '\t': `\t`, '\b': `\b`, '\f': `\f`}[r]; ok {
				buf.WriteString(esc)
			} else {
				fmt.Fprintf(buf, `\u%04x`, r)
			}
		default:
			buf.WriteRune(r)
		}
	}
	buf.WriteByte('"')
}

// canonicalDataCases are data values whose canonical form takes each branch
// of the byte canonicaliser.
var canonicalDataCases = []string{
	`{}`,
	`{"b":1,"a":2}`,
	`{"a":{"z":[3,{"y":true,"x":null}],"b":"c"},"A":[],"é":1,"e":2}`,
	`{"dup":1,"x":0,"dup":2}`,
	`{"dup":{"k":1},"dup":[1,2]}`,
	`{"n":1.0,"m":1e3,"o":-0,"p":12345678901234567890123,"q":1E-7}`,
	`{"s":"plain","t":"esc\"aped\\","u":"\u00e9\u0041\/","v":"ctl\n\t\u0001"}`,
	`{"\u0062":1,"a\"b":2,"a":3}`,
	`{"x":"\ud83d\ude00","y":"\ud800","z":"\u2028\u2029"}`,
	"{\"bad\":\"\xff\xfe\",\"ok\":\"\u00e9\",\"k\xff\":1}",
	"{\"raw\":\"caf\u00e9 \u65e5\u672c \U0001F600\"}",
	` { "ws" : [ 1 , 2 ] , "a" : { } } `,
	`{"deep":[[[[[[[[[[{"a":[[[]]]}]]]]]]]]]]}`,
	`{"": "", "\u0000": 0}`,
}

func canonicalEnvelope(data string) Envelope {
	return Envelope{
		EventID: "0b4f2a3c-9d1e-4c8a-b7e2-5f6a7b8c9d0e", EventType: "INSTANCE_UPDATED", Kind: KindDomain,
		AggregateType: "Instance", AggregateID: "shop:orders:o-1", SequenceNumber: 3, Position: 9,
		Data: json.RawMessage(data),
		Metadata: Metadata{"command_id": json.RawMessage(`"c-1"`), "z": json.RawMessage(`{"y":"\u2028<&>","x":[1.50]}`),
			"kafka_topic": json.RawMessage(`"t"`)},
	}
}

// TestCanonicalJSONMatchesReference: the byte canonicaliser agrees with the
// decode-and-rewrite form on each case.
func TestCanonicalJSONMatchesReference(t *testing.T) {
	for _, data := range canonicalDataCases {
		t.Run(data, func(t *testing.T) {
			e := canonicalEnvelope(data)
			want, err := referenceCanonicalJSON(e)
			if err != nil {
				t.Fatalf("reference: %v", err)
			}
			got, err := CanonicalJSON(e)
			if err != nil {
				t.Fatalf("CanonicalJSON: %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("CanonicalJSON\n%s\nreference\n%s", got, want)
			}
		})
	}
}

// TestCanonicalJSONDepth: nesting beyond encoding/json's limit is an error,
// as it was when the form was computed by decoding.
func TestCanonicalJSONDepth(t *testing.T) {
	for _, tc := range []struct {
		depth int
		ok    bool
	}{{maxCanonicalDepth - 1, true}, {maxCanonicalDepth + 1, false}} {
		data := `{"a":` + strings.Repeat("[", tc.depth-1) + strings.Repeat("]", tc.depth-1) + `}`
		_, err := CanonicalJSON(canonicalEnvelope(data))
		_, rerr := referenceCanonicalJSON(canonicalEnvelope(data))
		if (err == nil) != tc.ok || (rerr == nil) != tc.ok {
			t.Errorf("depth %d: CanonicalJSON error %v, reference error %v, want ok=%v", tc.depth, err, rerr, tc.ok)
		}
	}
}

// FuzzCanonicalJSON: for any data that Marshal accepts, the byte
// canonicaliser and the decode-and-rewrite form agree.
func FuzzCanonicalJSON(f *testing.F) {
	for _, c := range canonicalDataCases {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, data string) {
		e := canonicalEnvelope(data)
		want, rerr := referenceCanonicalJSON(e)
		got, err := CanonicalJSON(e)
		if (err == nil) != (rerr == nil) {
			t.Fatalf("CanonicalJSON error %v, reference error %v", err, rerr)
		}
		if err == nil && !bytes.Equal(got, want) {
			t.Fatalf("CanonicalJSON\n%s\nreference\n%s", got, want)
		}
	})
}
