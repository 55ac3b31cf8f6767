package declarative

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/sluicehq/sluice/shared/envelope"
)

// sameAsEncodeJSON fails unless encodeDoc(v) is EncodeJSON(v), byte for
// byte, or both fail.
func sameAsEncodeJSON(t *testing.T, v any) {
	t.Helper()
	want, werr := envelope.EncodeJSON(v)
	got, gerr := encodeDoc(v)
	if (werr != nil) != (gerr != nil) || string(got) != string(want) {
		t.Fatalf("encodeDoc(%#v) = %s, %v; EncodeJSON: %s, %v", v, got, gerr, want, werr)
	}
}

func TestEncodeDocEqualsEncodeJSON(t *testing.T) {
	cases := map[string]any{
		"null":            nil,
		"bools":           []any{true, false},
		"nil map":         map[string]any(nil),
		"nil list":        []any(nil),
		"empty":           map[string]any{"a": map[string]any{}, "b": []any{}},
		"sorted keys":     map[string]any{"b": 1.0, "a": 2.0, "B": 3.0, "é": 4.0, "": 5.0, "a.b": 6.0},
		"integers":        []any{int64(0), int64(-9007199254740993), int64(math.MaxInt64), int(-3), uint64(math.MaxUint64)},
		"floats":          []any{0.0, math.Copysign(0, -1), 1.5, -2.25, 1e20, 1e21, 123456789e13, 1e-6, 9.99e-7, 1e-7, -1e-300, 5e-324, math.MaxFloat64, 0.1 + 0.2, 100.0},
		"control chars":   "\x00\x01\x07\b\t\n\v\f\r\x1b\x1f\x7f",
		"quotes":          `a"b\c/d`,
		"html":            "<a href='x'>&amp;</a>",
		"unicode":         "héllo wörld 世界 🎉",
		"line separators": "a\u2028b\u2029c",
		"invalid utf-8":   "a\xffb\xc3(c\xed\xa0\x80d",
		"key escapes":     map[string]any{"a\"b": "x", "\n": "y", "\xff": "z"},
		"nested":          map[string]any{"sluice": map[string]any{"applied": map[string]any{"Order:o-1": int64(3)}, "key": "c-7"}, "order_ids": []any{"o-1", nil, 2.0, map[string]any{"k": []any{}}}},
		"json.Number":     map[string]any{"n": json.Number("12.50")},
		"NaN":             map[string]any{"n": math.NaN()},
		"infinity":        []any{math.Inf(1)},
		"other type":      map[string]any{"t": struct{ A int }{1}},
	}
	for name, v := range cases {
		t.Run(name, func(t *testing.T) { sameAsEncodeJSON(t, v) })
	}
}

// FuzzEncodeDoc: any JSON value, decoded as a document is, encodes as
// EncodeJSON encodes it.
func FuzzEncodeDoc(f *testing.F) {
	for _, s := range []string{`{"a":1,"b":[true,null,"x"]}`, `"\u2028\ud800\u0000"`, `[1e21,1e-7,-0.0,0.1]`, `{"z":{"y":{"x":"<>&"}}}`, "\"\xff\xfe\""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var v any
		if json.Unmarshal(b, &v) != nil {
			return
		}
		sameAsEncodeJSON(t, v)
	})
}

// FuzzEncodeDocString: any string, as a key and as a value (CEL results
// need not be valid UTF-8).
func FuzzEncodeDocString(f *testing.F) {
	for _, s := range []string{"", "a\u2028b", "\xff", "\x00\x1f\x7f", `"\`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sameAsEncodeJSON(t, map[string]any{s: s, "l": []any{s}})
	})
}
