package esserver

import (
	"encoding/json"
	"math"
	"sort"
	"strconv"

	"github.com/go-json-experiment/json/jsontext"
)

// appendJSON appends the JSON encoding of v. It handles the value types
// the server produces without reflection and falls back to encoding/json
// for anything else.
func appendJSON(b []byte, v any) ([]byte, error) {
	switch t := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case string:
		return appendString(b, t), nil
	case bool:
		return strconv.AppendBool(b, t), nil
	case int:
		return strconv.AppendInt(b, int64(t), 10), nil
	case int64:
		return strconv.AppendInt(b, t, 10), nil
	case int32:
		return strconv.AppendInt(b, int64(t), 10), nil
	case uint64:
		return strconv.AppendUint(b, t, 10), nil
	case float64:
		return appendFloat(b, t), nil
	case json.Number:
		if t == "" {
			return append(b, '0'), nil
		}
		return append(b, t...), nil
	case rawJSON:
		return append(b, t...), nil
	case rawSource:
		return append(b, t...), nil
	case *orderedMap:
		b = append(b, '{')
		for i, k := range t.keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
			b = append(b, ':')
			var err error
			if b, err = appendJSON(b, t.vs[i]); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
			b = append(b, ':')
			var err error
			if b, err = appendJSON(b, t[k]); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	case []any:
		b = append(b, '[')
		for i, e := range t {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendJSON(b, e); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	case []string:
		b = append(b, '[')
		for i, e := range t {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, e)
		}
		return append(b, ']'), nil
	}
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, data...), nil
}

func appendFloat(b []byte, f float64) []byte {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return appendString(b, strconv.FormatFloat(f, 'g', -1, 64))
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'f' && f == math.Trunc(f) {
		b = append(b, ".0"...)
	}
	return b
}

// appendString appends s as a JSON string: jsontext's minimal form (RFC
// 8785), no HTML escaping; invalid UTF-8 becomes U+FFFD (AppendQuote
// replaces it and reports it, which a response need not refuse).
func appendString(b []byte, s string) []byte {
	b, _ = jsontext.AppendQuote(b, s)
	return b
}
