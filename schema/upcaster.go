package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	"github.com/google/cel-go/cel"
	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/shared/celexpr"
	"github.com/sluicehq/sluice/shared/envelope"
)

// MaxUpcasterBytes bounds an upcaster file.
const MaxUpcasterBytes = 64 << 10

// Upcaster brings the data of one version of an event type to the next
// (docs/schemas.md#upcasting-on-read). It is declared in YAML:
//
//	event_type: OrderPlaced
//	from: 2                    # upcasts v2 data to v3
//	set:                       # field (dotted path) → CEL over event (the v2 envelope)
//	  amount: event.data.total
//	  currency: 'has(event.data.currency) ? event.data.currency : "EUR"'
//	unset: [total]             # fields removed
//	cost_limit: 10000          # optional, CEL cost units per expression
//	examples:                  # at least one; sluice schema check upcasts each
//	  - data: {order_id: o-1, total: 12.5}
//	    want: {order_id: o-1, amount: 12.5, currency: EUR}   # optional
//
// The result is the input data with the unset fields removed and the set
// fields set, every expression evaluated on the input (the order of the
// lists does not matter). Fields neither set nor unset are carried over
// byte for byte (numbers keep their digits); values computed by CEL are
// JSON values (numbers are doubles, as in declarative projections).
// Expressions use shared/celexpr's environment, the one of declarative
// projections. An Upcaster is compiled once and used by any number of
// goroutines.
type Upcaster struct {
	EventType string
	From      int
	// Source names where it was read (a file name), for messages.
	Source   string
	Examples []Example

	sets   []setField
	unsets [][]string
	spec   []byte
}

// Example is one input of an upcaster (data of version From) and,
// optionally, the output it must give.
type Example struct {
	Pos  celexpr.Pos
	Data json.RawMessage
	// Want is the expected output (nil: only validated against the next
	// version's schema).
	Want json.RawMessage
}

type setField struct {
	path []string
	expr celexpr.Expr
	prg  cel.Program
}

// To is the version the upcaster produces.
func (u *Upcaster) To() int { return u.From + 1 }

// Name names the upcaster in messages: "OrderPlaced v2→v3 (upcast-v2.yaml)".
func (u *Upcaster) Name() string {
	n := fmt.Sprintf("%s v%d→v%d", u.EventType, u.From, u.From+1)
	if u.Source != "" {
		n += " (" + u.Source + ")"
	}
	return n
}

// Spec is the YAML it was parsed from.
func (u *Upcaster) Spec() []byte { return u.spec }

// UpcasterError is an upcaster file that does not parse or compile, at a
// position in the file.
type UpcasterError struct {
	Pos celexpr.Pos
	Msg string
}

func (e *UpcasterError) Error() string { return e.Pos.String() + ": " + e.Msg }

func upErrAt(file string, n *yaml.Node, format string, args ...any) error {
	return &UpcasterError{Pos: posOf(file, n), Msg: fmt.Sprintf(format, args...)}
}

func posOf(file string, n *yaml.Node) celexpr.Pos {
	return celexpr.Pos{File: file, Line: n.Line, Column: n.Column, Quoted: n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0}
}

// ParseUpcaster reads and compiles one upcaster file; file names it in
// errors (*UpcasterError, with the YAML line and column, and the position
// inside a CEL expression).
func ParseUpcaster(file string, raw []byte) (*Upcaster, error) {
	if len(raw) > MaxUpcasterBytes {
		return nil, &UpcasterError{Pos: celexpr.Pos{File: file, Line: 1, Column: 1}, Msg: fmt.Sprintf("an upcaster file of %d bytes exceeds %d bytes", len(raw), MaxUpcasterBytes)}
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &UpcasterError{Pos: celexpr.Pos{File: file, Line: 1, Column: 1}, Msg: "the file is empty"}
		}
		return nil, &UpcasterError{Pos: celexpr.Pos{File: file, Line: 1, Column: 1}, Msg: err.Error()}
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return nil, &UpcasterError{Pos: celexpr.Pos{File: file, Line: more.Line, Column: more.Column}, Msg: "a file holds one upcaster (one YAML document)"}
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, upErrAt(file, root, "an upcaster is a mapping: event_type, from, set, unset, examples")
	}
	u := &Upcaster{Source: file, spec: raw}
	costLimit := uint64(celexpr.DefaultCostLimit)
	var setNode, unsetNode, examplesNode *yaml.Node
	seen := map[string]bool{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if seen[k.Value] {
			return nil, upErrAt(file, k, "key %q is given twice", k.Value)
		}
		seen[k.Value] = true
		switch k.Value {
		case "event_type":
			if v.Kind != yaml.ScalarNode {
				return nil, upErrAt(file, v, "event_type must be a string")
			}
			if err := envelope.ValidateEventType(v.Value); err != nil {
				return nil, upErrAt(file, v, "%v", err)
			}
			u.EventType = v.Value
		case "from":
			if err := v.Decode(&u.From); err != nil || u.From < 1 {
				return nil, upErrAt(file, v, "from must be the version upcast (an integer >= 1); the result is version from+1")
			}
		case "set":
			if v.Kind != yaml.MappingNode {
				return nil, upErrAt(file, v, "set must be a mapping of field (a dotted path) to a CEL expression")
			}
			setNode = v
		case "unset":
			if v.Kind != yaml.SequenceNode {
				return nil, upErrAt(file, v, "unset must be a list of fields (dotted paths)")
			}
			unsetNode = v
		case "cost_limit":
			if err := v.Decode(&costLimit); err != nil || costLimit == 0 {
				return nil, upErrAt(file, v, "cost_limit must be an integer >= 1")
			}
		case "examples":
			if v.Kind != yaml.SequenceNode {
				return nil, upErrAt(file, v, "examples must be a list of {data: …, want: …}")
			}
			examplesNode = v
		default:
			return nil, upErrAt(file, k, "unknown key %q (an upcaster has event_type, from, set, unset, cost_limit, examples)", k.Value)
		}
	}
	switch {
	case u.EventType == "":
		return nil, upErrAt(file, root, "event_type is required")
	case u.From == 0:
		return nil, upErrAt(file, root, "from is required (the version this upcaster reads; it produces from+1)")
	case examplesNode == nil || len(examplesNode.Content) == 0:
		return nil, upErrAt(file, root, "examples is required: at least one input of v%d, which sluice schema check upcasts and validates against v%d", u.From, u.From+1)
	}
	env, err := celexpr.NewEnv()
	if err != nil {
		return nil, fmt.Errorf("schema: upcaster environment: %w", err)
	}
	paths := map[string]*yaml.Node{}
	if setNode != nil {
		for i := 0; i+1 < len(setNode.Content); i += 2 {
			k, v := setNode.Content[i], setNode.Content[i+1]
			path, err := fieldPath(file, k, paths)
			if err != nil {
				return nil, err
			}
			if v.Kind != yaml.ScalarNode || strings.TrimSpace(v.Value) == "" {
				return nil, upErrAt(file, v, "set %s: the value must be a CEL expression (a string)", k.Value)
			}
			e := celexpr.Expr{Source: v.Value, Pos: posOf(file, v)}
			prg, err := celexpr.Compile(env, e, costLimit)
			if err != nil {
				var ce *celexpr.CompileError
				if errors.As(err, &ce) {
					return nil, &UpcasterError{Pos: ce.Pos, Msg: fmt.Sprintf("set %s: expression %q, line %d column %d: %s", k.Value, e.Source, ce.Line, ce.Column, ce.Msg)}
				}
				return nil, upErrAt(file, v, "set %s: %v", k.Value, err)
			}
			u.sets = append(u.sets, setField{path: path, expr: e, prg: prg})
		}
	}
	if unsetNode != nil {
		for _, n := range unsetNode.Content {
			path, err := fieldPath(file, n, paths)
			if err != nil {
				return nil, err
			}
			u.unsets = append(u.unsets, path)
		}
	}
	for _, n := range examplesNode.Content {
		ex, err := parseExample(file, n)
		if err != nil {
			return nil, err
		}
		u.Examples = append(u.Examples, ex)
	}
	return u, nil
}

// fieldPath reads a dotted field path; a path given twice, or inside
// another one (a and a.b), is refused: the result would depend on order.
func fieldPath(file string, n *yaml.Node, seen map[string]*yaml.Node) ([]string, error) {
	if n.Kind != yaml.ScalarNode {
		return nil, upErrAt(file, n, "a field is a dotted path (a string)")
	}
	f := n.Value
	if f == "" || strings.HasPrefix(f, ".") || strings.HasSuffix(f, ".") || strings.Contains(f, "..") {
		return nil, upErrAt(file, n, "field %q must be a dotted path of non-empty names", f)
	}
	for other, on := range seen {
		if other == f || strings.HasPrefix(other, f+".") || strings.HasPrefix(f, other+".") {
			return nil, upErrAt(file, n, "field %q overlaps %q (line %d): each field is set or unset once", f, other, on.Line)
		}
	}
	seen[f] = n
	return strings.Split(f, "."), nil
}

func parseExample(file string, n *yaml.Node) (Example, error) {
	ex := Example{Pos: posOf(file, n)}
	if n.Kind != yaml.MappingNode {
		return ex, upErrAt(file, n, "an example is a mapping {data: {…}, want: {…}}")
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		var dst *json.RawMessage
		switch k.Value {
		case "data":
			dst = &ex.Data
		case "want":
			dst = &ex.Want
		default:
			return ex, upErrAt(file, k, "unknown key %q in an example (data, want)", k.Value)
		}
		var val any
		if err := v.Decode(&val); err != nil {
			return ex, upErrAt(file, v, "%s: %v", k.Value, err)
		}
		if _, ok := val.(map[string]any); !ok {
			return ex, upErrAt(file, v, "%s must be an object (the event's data)", k.Value)
		}
		b, err := celexpr.EncodeJSON(val)
		if err != nil {
			return ex, upErrAt(file, v, "%s: %v", k.Value, err)
		}
		*dst = b
	}
	if ex.Data == nil {
		return ex, upErrAt(file, n, "an example needs data: (an input of the from version)")
	}
	return ex, nil
}

// ApplyError is an upcaster that failed on one input: the field whose
// expression (or assignment) failed, where it is written, and why.
type ApplyError struct {
	Field string
	Expr  celexpr.Expr
	// Assign: the expression gave a value, but the field cannot be set
	// (a value that is no object is in the way).
	Assign bool
	Err    error
}

func (e *ApplyError) Error() string {
	if e.Assign {
		return fmt.Sprintf("set %s (%s): %v", e.Field, e.Expr.Pos, e.Err)
	}
	return fmt.Sprintf("set %s at %s: expression %q failed: %v", e.Field, e.Expr.Pos, e.Expr.Source, e.Err)
}

func (e *ApplyError) Unwrap() error { return e.Err }

// Apply returns e's data upcast from version From to From+1. e is the
// envelope as the expressions see it (its data of version From). The error
// is an *ApplyError, or names the data when it is not a JSON object.
func (u *Upcaster) Apply(e envelope.Envelope) (json.RawMessage, error) {
	vars, data, err := decodeEvent(e)
	if err != nil {
		return nil, err
	}
	if err := u.applyTo(vars, data); err != nil {
		return nil, err
	}
	return celexpr.EncodeJSON(data)
}

// decodeEvent is e as an upcaster works on it: the expressions' event
// variable, and its data decoded once with the numbers as written
// (json.Number), which a chain of upcasters changes in place.
func decodeEvent(e envelope.Envelope) (map[string]any, map[string]any, error) {
	data := map[string]any{}
	if len(e.Data) > 0 {
		dec := json.NewDecoder(bytes.NewReader(e.Data))
		dec.UseNumber()
		if err := dec.Decode(&data); err != nil {
			return nil, nil, fmt.Errorf("data: %w", err)
		}
		if data == nil {
			data = map[string]any{}
		}
	}
	e.Data = nil
	vars, err := celexpr.EventVars(e)
	if err != nil {
		return nil, nil, err
	}
	return vars, data, nil
}

// applyTo upcasts data in place. vars is the event variable; its data is
// set to data as the expressions see it (numbers as doubles, as
// celexpr.EventVars decodes them), so every expression reads the input.
// Fields neither set nor unset keep their values, numbers as written.
func (u *Upcaster) applyTo(vars, data map[string]any) error {
	vars["data"] = celView(data)
	vars["schema_version"] = int64(u.From)
	act := map[string]any{"event": vars}
	vals := make([]any, len(u.sets))
	for i, s := range u.sets {
		out, _, err := s.prg.Eval(act)
		if err != nil {
			return &ApplyError{Field: strings.Join(s.path, "."), Expr: s.expr, Err: err}
		}
		if vals[i], err = celexpr.ToNative(out); err != nil {
			return &ApplyError{Field: strings.Join(s.path, "."), Expr: s.expr, Err: err}
		}
	}
	for _, p := range u.unsets {
		unsetPath(data, p)
	}
	for i, s := range u.sets {
		if err := setPath(data, s.path, vals[i]); err != nil {
			return &ApplyError{Field: strings.Join(s.path, "."), Expr: s.expr, Assign: true, Err: err}
		}
	}
	return nil
}

// celView is v as the expressions read JSON: every number a double.
// Maps and lists are copied (data keeps its own numbers).
func celView(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			out[k] = celView(x)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = celView(x)
		}
		return out
	case json.Number:
		f, err := t.Float64()
		if err != nil {
			return t.String()
		}
		return f
	case int64:
		return float64(t)
	case uint64:
		return float64(t)
	}
	return v
}

func unsetPath(m map[string]any, path []string) {
	for _, f := range path[:len(path)-1] {
		next, ok := m[f].(map[string]any)
		if !ok {
			return
		}
		m = next
	}
	delete(m, path[len(path)-1])
}

func setPath(m map[string]any, path []string, v any) error {
	for i, f := range path[:len(path)-1] {
		next, ok := m[f].(map[string]any)
		if !ok {
			if m[f] != nil {
				return fmt.Errorf("%q is not an object", strings.Join(path[:i+1], "."))
			}
			next = map[string]any{}
			m[f] = next
		}
		m = next
	}
	m[path[len(path)-1]] = v
	return nil
}

// CheckExamples upcasts each example and reports what is wrong: an input
// that is not valid data of version From (from), an output that is not
// valid data of From+1 (to), an output that differs from want. No reasons:
// the upcaster keeps its promise on its examples.
func (u *Upcaster) CheckExamples(from, to *Compiled) []string {
	var reasons []string
	for i, ex := range u.Examples {
		at := fmt.Sprintf("example %d (%s)", i+1, ex.Pos)
		if from != nil {
			if err := from.Validate(ex.Data); err != nil {
				reasons = append(reasons, fmt.Sprintf("%s: its data is not valid v%d data: %s", at, u.From, dataReason(err)))
				continue
			}
		}
		out, err := u.Apply(envelope.Envelope{EventType: u.EventType, Kind: envelope.KindDomain, SchemaVersion: u.From, Data: ex.Data})
		if err != nil {
			reasons = append(reasons, fmt.Sprintf("%s: the upcaster fails: %v", at, err))
			continue
		}
		if err := to.Validate(out); err != nil {
			reasons = append(reasons, fmt.Sprintf("%s: the upcast data %s is not valid v%d data: %s", at, out, u.From+1, dataReason(err)))
			continue
		}
		if ex.Want != nil && !sameJSON(out, ex.Want) {
			reasons = append(reasons, fmt.Sprintf("%s: upcast to %s, want %s", at, out, ex.Want))
		}
	}
	return reasons
}

// dataReason is a *DataError without its type and version (the caller
// names them).
func dataReason(err error) string {
	var de *DataError
	if !errors.As(err, &de) {
		return err.Error()
	}
	p := de.Pointer
	if p == "" {
		p = "(the data object)"
	}
	return fmt.Sprintf("at %s: %s (keyword %s)", p, de.Message, de.Keyword)
}

func sameJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}
