package declarative

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/sluicehq/sluice/shared/envelope"
)

// encodeDoc encodes a document as envelope.EncodeJSON does (compact,
// object keys sorted, no HTML escaping), byte for byte: the values a
// document is made of (what JSON decodes to, what CEL results convert to)
// are written directly, without reflection; anything else (and a value
// EncodeJSON refuses, such as NaN) goes through EncodeJSON
// (TestEncodeDocEqualsEncodeJSON, FuzzEncodeDoc).
func encodeDoc(v any) ([]byte, error) {
	if b, ok := appendValue(make([]byte, 0, 512), v); ok {
		return b, nil
	}
	return envelope.EncodeJSON(v)
}

// appendValue appends v's JSON to b; false when v holds a value it does
// not encode as encoding/json would.
func appendValue(b []byte, v any) ([]byte, bool) {
	switch t := v.(type) {
	case nil:
		return append(b, "null"...), true
	case bool:
		return strconv.AppendBool(b, t), true
	case string:
		return appendString(b, t)
	case float64:
		return appendFloat(b, t)
	case int64:
		return strconv.AppendInt(b, t, 10), true
	case int:
		return strconv.AppendInt(b, int64(t), 10), true
	case uint64:
		return strconv.AppendUint(b, t, 10), true
	case map[string]any:
		if t == nil {
			return append(b, "null"...), true
		}
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			var ok bool
			if b, ok = appendString(b, k); !ok {
				return b, false
			}
			b = append(b, ':')
			if b, ok = appendValue(b, t[k]); !ok {
				return b, false
			}
		}
		return append(b, '}'), true
	case []any:
		if t == nil {
			return append(b, "null"...), true
		}
		b = append(b, '[')
		for i, e := range t {
			if i > 0 {
				b = append(b, ',')
			}
			var ok bool
			if b, ok = appendValue(b, e); !ok {
				return b, false
			}
		}
		return append(b, ']'), true
	}
	return b, false // json.Number, other types: EncodeJSON
}

// appendFloat is encoding/json's float64 encoding: the shortest
// representation, exponent form below 1e-6 and from 1e21, "e-07" as
// "e-7"; NaN and infinities are refused (EncodeJSON reports them).
func appendFloat(b []byte, f float64) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return b, false
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, true
}

// appendString appends s quoted as envelope.EncodeJSON quotes it
// (encoding/json without HTML escaping), or reports false. The quoting is
// jsontext.AppendQuote's, which writes the same bytes for valid UTF-8
// without U+2028 and U+2029 (its minimal RFC 8785 form); encoding/json
// escapes those two and writes invalid bytes as \ufffd, so a document
// holding such a rare string is encoded by EncodeJSON whole.
func appendString(b []byte, s string) ([]byte, bool) {
	if !utf8.ValidString(s) || strings.ContainsAny(s, "\u2028\u2029") {
		return b, false
	}
	q, err := jsontext.AppendQuote(b, s)
	return q, err == nil
}
