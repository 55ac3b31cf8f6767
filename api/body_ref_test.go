package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/shared/envelope"
)

// refScanObject is the API's body scanner as it was before it used
// envelope.ScanObject (an encoding/json token scan), kept as the reference
// FuzzScanObjectAgainstReference compares the scanner with: same accepted
// bodies, members and order; same status, code, field and limit of every
// refusal. It checks that b is one well-formed JSON object in valid UTF-8,
// with no duplicate key at any level and no nesting beyond the rule, and
// returns its top-level members and their names in document order.
func refScanObject(b []byte, rule depthRule, field string) (map[string]json.RawMessage, []string, *Error) {
	malformed := func(format string, args ...any) *Error {
		return newError(http.StatusBadRequest, CodeMalformedJSON, field, format, args...)
	}
	notObject := func() *Error {
		return newError(http.StatusUnprocessableEntity, CodeValidationFailed, field, "must be a JSON object")
	}
	// Invalid UTF-8 and lone surrogate escapes are refused before
	// decoding: encoding/json would replace them by U+FFFD, turning two
	// different inputs into one id, key or value (issue 26.2).
	if err := envelope.CheckJSONText(b, field); err != nil {
		return nil, nil, validationAs(err, "")
	}
	type frame struct {
		obj     bool
		wantKey bool
		keys    map[string]struct{}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var stack []frame
	var order []string
	cur := field
	started := false
	valueDone := func() {
		if n := len(stack); n > 0 && stack[n-1].obj {
			stack[n-1].wantKey = true
		}
	}
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			if !started {
				return nil, nil, malformed("the body is empty; want a JSON object")
			}
			if len(stack) > 0 {
				return nil, nil, malformed("unexpected end of JSON input")
			}
			break
		}
		if err != nil {
			return nil, nil, malformed("not valid JSON: %v", err)
		}
		if started && len(stack) == 0 {
			return nil, nil, malformed("trailing data after the JSON object")
		}
		n := len(stack)
		if n > 0 && stack[n-1].obj && stack[n-1].wantKey {
			key, ok := tok.(string)
			if !ok { // the closing '}'
				stack = stack[:n-1]
				valueDone()
				continue
			}
			f := &stack[n-1]
			if _, dup := f.keys[key]; dup {
				return nil, nil, malformed("duplicate key %q", key)
			}
			if f.keys == nil {
				f.keys = make(map[string]struct{})
			}
			f.keys[key] = struct{}{}
			f.wantKey = false
			if n == 1 {
				order = append(order, key)
				if rule.offset > 0 {
					cur = key
				}
			}
			continue
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				if n == 0 && t != '{' {
					return nil, nil, notObject()
				}
				started = true
				stack = append(stack, frame{obj: t == '{', wantKey: t == '{'})
				if d := len(stack) - rule.offset; d > rule.maxData {
					e := newError(http.StatusRequestEntityTooLarge, CodeLimitExceeded, cur,
						"nesting depth exceeds the limit of %d levels (the data object is level 1; the limit is EVENT_STORE_MAX_DATA_DEPTH minus the level the command wraps around data)", rule.maxData)
					e.Limit = fmt.Sprintf("depth %d", rule.maxData)
					return nil, nil, e
				}
			default: // ']'; '}' is handled with the keys
				stack = stack[:n-1]
				valueDone()
			}
		default:
			if n == 0 {
				return nil, nil, notObject()
			}
			valueDone()
		}
	}
	members := map[string]json.RawMessage{}
	if err := json.Unmarshal(b, &members); err != nil { // cannot fail after the scan
		return nil, nil, malformed("not valid JSON: %v", err)
	}
	return members, order, nil
}

// FuzzScanObjectAgainstReference: the API's body scanner, now the shared
// envelope.ScanObject, accepts exactly the bodies the API's former scanner
// accepted, with the same members in the same order, and refuses the
// others with the same status, code, field, limit and message. Only the
// tokenizer's own words after "not valid JSON: " may differ (encoding/json
// and jsontext describe a syntax error differently), and a body cut inside a
// string, which encoding/json called "not valid JSON: unexpected EOF", is
// now "unexpected end of JSON input" like a body cut between tokens.
func FuzzScanObjectAgainstReference(f *testing.F) {
	for _, s := range []string{
		``, ` `, `{}`, `[]`, `"x"`, `1`, `null`, `x`, `{`, `{"a"`, `{"a":`, `{"a":"b`, `{"a":1,}`, `{"a":1}x`, `{"a":1} {}`,
		`{"a":1}{"b":2}`, `{"a":1,"a":2}`, `{"a":{"b":1,"b":2}}`, `{"a":[{"b":1,"\u0062":2}]}`, `{"data":{"a":[1,{"b":[]}]}}`,
		`{"d\u0061ta":{},"x" : [ 1 , 2 ] , "y":null}`, "{\"a\":\"\xff\"}", `{"a":"\ud800"}`, `{"a":1e400,"b":-0.5E+3}`,
		`{"events":[{"data":{"a":{"b":{}}}}]}`, `{"a":{"b":{"c":{"d":{}}}}}`, `{"a":[[[[[]]]]]}`, "\ufeff{}", `{"a":tru}`,
	} {
		for op := uint8(0); op < 3; op++ {
			f.Add([]byte(s), op, uint8(3))
		}
	}
	rules := []depthRule{{offset: 0}, {offset: 1}, {offset: 3}}
	fields := []string{"data", "", ""}
	f.Fuzz(func(t *testing.T, b []byte, op, maxData uint8) {
		rule, field := rules[int(op)%len(rules)], fields[int(op)%len(rules)]
		rule.maxData = int(maxData % 8)
		gotM, gotO, gotE := scanObject(b, rule, field)
		wantM, wantO, wantE := refScanObject(b, rule, field)
		if (gotE == nil) != (wantE == nil) {
			t.Fatalf("%q %+v: scanObject error %v, reference error %v", b, rule, gotE, wantE)
		}
		if gotE == nil {
			if !reflect.DeepEqual(gotO, wantO) || len(gotM) != len(wantM) {
				t.Fatalf("%q: members %q, reference %q", b, gotO, wantO)
			}
			for k, v := range wantM {
				if !bytes.Equal(gotM[k], v) {
					t.Fatalf("%q: member %q = %q, reference %q", b, k, gotM[k], v)
				}
			}
			return
		}
		if gotE.Status != wantE.Status || gotE.Code != wantE.Code || gotE.Field != wantE.Field || gotE.Limit != wantE.Limit {
			t.Fatalf("%q %+v: got %d %s field %q limit %q (%s), reference %d %s field %q limit %q (%s)", b, rule,
				gotE.Status, gotE.Code, gotE.Field, gotE.Limit, gotE.Message, wantE.Status, wantE.Code, wantE.Field, wantE.Limit, wantE.Message)
		}
		syntax := func(m string) bool {
			return strings.HasPrefix(m, "not valid JSON: ") || m == "unexpected end of JSON input"
		}
		if gotE.Message != wantE.Message && !(syntax(gotE.Message) && syntax(wantE.Message)) {
			t.Fatalf("%q %+v: message %q, reference %q", b, rule, gotE.Message, wantE.Message)
		}
	})
}
