package esserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
)

// orderedMap is a JSON object that keeps insertion order when marshalled.
type orderedMap struct {
	keys []string
	vs   []any
}

func newOrderedMap() *orderedMap {
	return &orderedMap{keys: make([]string, 0, 8), vs: make([]any, 0, 8)}
}

// Set adds or replaces a key.
func (m *orderedMap) Set(k string, v any) *orderedMap {
	for i, key := range m.keys {
		if key == k {
			m.vs[i] = v
			return m
		}
	}
	m.keys = append(m.keys, k)
	m.vs = append(m.vs, v)
	return m
}

// Get returns the value of a key.
func (m *orderedMap) Get(k string) (any, bool) {
	for i, key := range m.keys {
		if key == k {
			return m.vs[i], true
		}
	}
	return nil, false
}

func (m *orderedMap) MarshalJSON() ([]byte, error) { return appendJSON(nil, m) }

// marshalJSON marshals without HTML escaping.
func marshalJSON(v any) ([]byte, error) { return appendJSON(make([]byte, 0, 256), v) }

// decodeJSON parses one JSON value, keeping numbers as json.Number, and
// rejects trailing garbage.
func decodeJSON(data []byte) (any, error) { return parseJSON(data) }

// decodeOwnedObject is decodeObject for what the server keeps (an index's
// mappings, settings and aliases): the strings of the result are copies of
// their own, not slices of the request, which would otherwise stay alive
// for as long as the definition does.
func decodeOwnedObject(data []byte) (map[string]any, *esError) {
	m, err := decodeObject(data)
	if m == nil || err != nil {
		return m, err
	}
	return ownJSON(m).(map[string]any), nil
}

// ownJSON returns a deep copy of a parsed JSON value whose strings (keys,
// values and numbers) share no memory with the text it was parsed from.
func ownJSON(v any) any {
	switch t := v.(type) {
	case string:
		return strings.Clone(t)
	case json.Number:
		return json.Number(strings.Clone(string(t)))
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, e := range t {
			m[strings.Clone(k)] = ownJSON(e)
		}
		return m
	case []any:
		a := make([]any, len(t))
		for i, e := range t {
			a[i] = ownJSON(e)
		}
		return a
	}
	return v
}

// decodeObject parses a JSON object body. An empty body yields nil, nil.
func decodeObject(data []byte) (map[string]any, *esError) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil
	}
	v, err := decodeJSON(data)
	if err != nil {
		line, col := errorLocation(data, err)
		return nil, errXContent("[%d:%d] failed to parse request body: %s", line, col, jsonErrText(err))
	}
	m, ok := v.(map[string]any)
	if !ok {
		if v == nil {
			return nil, nil
		}
		return nil, errParsing("request body or source parameter is required to be a JSON object, found [%s]", jsonKind(v))
	}
	return m, nil
}

// errorLocation is the 1-based line and column of a syntax error in data,
// as the [line:col] that starts Elasticsearch's parse errors (1:1 when
// the error has no position).
func errorLocation(data []byte, err error) (line, col int) {
	var se *jsonSyntaxError
	if !errors.As(err, &se) {
		return 1, 1
	}
	pos := min(se.pos, len(data))
	before := data[:pos]
	line = 1 + bytes.Count(before, []byte{'\n'})
	col = pos - bytes.LastIndexByte(before, '\n')
	return line, col
}

func jsonErrText(err error) string {
	s := err.Error()
	return strings.TrimPrefix(s, "json: ")
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "VALUE_NULL"
	case bool:
		return "VALUE_BOOLEAN"
	case json.Number, float64, int, int64:
		return "VALUE_NUMBER"
	case string:
		return "VALUE_STRING"
	case []any:
		return "START_ARRAY"
	case map[string]any:
		return "START_OBJECT"
	}
	return "VALUE_EMBEDDED_OBJECT"
}

// toFloat converts JSON-ish numbers and numeric strings to float64.
func toFloat(v any) (float64, bool) {
	switch n := v.(type) {
	case json.Number:
		f, err := strconv.ParseFloat(string(n), 64)
		return f, err == nil
	case float64:
		return n, true
	case float32:
		return float64(n), true
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	case uint64:
		return float64(n), true
	case string:
		f, err := strconv.ParseFloat(strings.TrimSpace(n), 64)
		return f, err == nil && !math.IsNaN(f)
	case bool:
		return 0, false
	}
	return 0, false
}

// toInt converts to int64 when the value is integral.
func toInt(v any) (int64, bool) {
	switch n := v.(type) {
	case json.Number:
		if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
			return i, true
		}
		f, err := strconv.ParseFloat(string(n), 64)
		if err != nil || f != math.Trunc(f) || math.Abs(f) > 9.2e18 {
			return 0, false
		}
		return int64(f), true
	case int:
		return int64(n), true
	case int64:
		return n, true
	case float64:
		if n != math.Trunc(n) || math.Abs(n) > 9.2e18 {
			return 0, false
		}
		return int64(n), true
	case string:
		i, err := strconv.ParseInt(strings.TrimSpace(n), 10, 64)
		return i, err == nil
	}
	return 0, false
}

// asString renders scalar values the way Elasticsearch turns them into
// terms.
func asString(v any) (string, bool) {
	switch s := v.(type) {
	case string:
		return s, true
	case json.Number:
		return string(s), true
	case bool:
		return strconv.FormatBool(s), true
	case float64:
		return strconv.FormatFloat(s, 'f', -1, 64), true
	case int:
		return strconv.Itoa(s), true
	case int64:
		return strconv.FormatInt(s, 10), true
	}
	return "", false
}

// stringList accepts a string, a comma separated string or an array of
// strings.
func stringList(v any) ([]string, bool) {
	switch t := v.(type) {
	case nil:
		return nil, true
	case string:
		return splitComma(t), true
	case []any:
		out := make([]string, 0, len(t))
		for _, e := range t {
			s, ok := e.(string)
			if !ok {
				return nil, false
			}
			out = append(out, s)
		}
		return out, true
	}
	return nil, false
}

func splitComma(s string) []string {
	if s == "" {
		return nil
	}
	parts := strings.Split(s, ",")
	out := parts[:0]
	for _, p := range parts {
		p = strings.TrimSpace(p)
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

// jsonEqual compares decoded JSON values, treating numbers numerically.
func jsonEqual(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !jsonEqual(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case json.Number:
		if y, ok := b.(json.Number); ok {
			if x == y {
				return true
			}
		}
		if _, ok := b.(string); ok {
			return false
		}
		f1, ok1 := toFloat(x)
		f2, ok2 := toFloat(b)
		return ok1 && ok2 && f1 == f2
	case string:
		y, ok := b.(string)
		return ok && x == y
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case nil:
		return b == nil
	}
	return false
}
