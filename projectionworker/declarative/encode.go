package declarative

import (
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

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
		return appendString(b, t), true
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
			b = appendString(b, k)
			b = append(b, ':')
			var ok bool
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

const hexDigits = "0123456789abcdef"

// appendString is encoding/json's string encoding without HTML escaping:
// quote, backslash and control characters escaped (\b \f \n \r \t, else
// \u00XX), invalid UTF-8 as \ufffd, U+2028 and U+2029 escaped.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
