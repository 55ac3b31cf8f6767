// Package celexpr is the one CEL (google/cel-go) environment of sluice's
// declared expressions: the declarative projections
// (projectionworker/declarative) and the upcasters of the schema registry
// (schema, docs/schemas.md#upcasting-on-read) compile and evaluate their
// expressions here, so that an expression means the same in both.
//
// The environment binds event (the envelope as JSON: event_id, event_type,
// kind, aggregate_type, aggregate_id, sequence_number, position,
// occurred_at, schema_version, data, metadata) and whatever variables the
// caller adds; CEL's standard functions and the strings extension are
// available. JSON numbers are doubles, as json.Unmarshal reads them.
//
// Guarantee kept: an expression is compiled once, when its file is loaded
// (a compile error names the file, the YAML line and column and the
// position inside the expression), and evaluated under a cost limit, with
// no I/O and no unbounded loops: checked while evaluating, or proven
// before by CEL's static cost estimate (an expression that cannot reach
// the limit whatever the input goes without the runtime tracker).
package celexpr

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/ext"

	"github.com/sluicehq/sluice/shared/envelope"
)

// DefaultCostLimit bounds one evaluation of one expression (CEL cost
// units: roughly one per operation, plus the size of strings and lists
// touched).
const DefaultCostLimit = 10000

// NewEnv is the expression environment: the variable event, CEL's
// standard functions, the strings extension, and opts (more variables).
func NewEnv(opts ...cel.EnvOption) (*cel.Env, error) {
	base := []cel.EnvOption{
		cel.Variable("event", cel.MapType(cel.StringType, cel.DynType)),
		ext.Strings(),
	}
	return cel.NewEnv(append(base, opts...)...)
}

// Pos is a position in a YAML file (1-based). Quoted tells that the
// scalar was quoted (the expression then starts one column later).
type Pos struct {
	File         string
	Line, Column int
	Quoted       bool
}

func (p Pos) String() string { return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Column) }

// Expr is an expression and where it was written.
type Expr struct {
	Source string
	Pos    Pos
}

// CompileError is an expression that does not compile: Pos is where the
// fault is in the file (the scalar's position, moved by the position
// inside the expression for a one-line plain or quoted scalar), Line and
// Column the position inside the expression, Msg CEL's message.
type CompileError struct {
	Pos          Pos
	Line, Column int
	Msg          string
}

func (e *CompileError) Error() string {
	return fmt.Sprintf("%s: line %d column %d: %s", e.Pos, e.Line, e.Column, e.Msg)
}

// Compile compiles e in env into a program evaluated under costLimit
// (0: DefaultCostLimit). The error is a *CompileError.
func Compile(env *cel.Env, e Expr, costLimit uint64) (cel.Program, error) {
	if costLimit == 0 {
		costLimit = DefaultCostLimit
	}
	ast, iss := env.Compile(e.Source)
	if iss != nil && iss.Err() != nil {
		errs := iss.Errors()
		ce := &CompileError{Pos: e.Pos, Line: 1, Column: 1, Msg: iss.Err().Error()}
		if len(errs) > 0 {
			ce.Line, ce.Column = errs[0].Location.Line(), errs[0].Location.Column()+1
			ce.Msg = errs[0].Message
			if ce.Line == 1 && !strings.Contains(e.Source, "\n") {
				ce.Pos.Column += ce.Column - 1
				if ce.Pos.Quoted {
					ce.Pos.Column++
				}
			}
		}
		return nil, ce
	}
	// The limit is enforced when evaluating, unless CEL's static estimate
	// proves the expression never reaches it (field reads, arithmetic,
	// conditionals: no loop over input of unknown size): then the
	// evaluation cannot exceed it, and goes without a cost tracker, which
	// is most of the price of evaluating such an expression.
	var opts []cel.ProgramOption
	if !costBounded(env, ast, costLimit) {
		opts = append(opts, cel.CostLimit(costLimit))
	}
	prg, err := env.Program(ast, opts...)
	if err != nil {
		return nil, &CompileError{Pos: e.Pos, Line: 1, Column: 1, Msg: err.Error()}
	}
	return prg, nil
}

// costBounded reports whether CEL's static cost estimate of ast, with
// nothing known of the inputs' sizes (unknown strings, lists and maps may
// be of any size), is at most limit: the runtime cost, which the estimate
// bounds, cannot exceed it either.
func costBounded(env *cel.Env, ast *cel.Ast, limit uint64) bool {
	est, err := env.EstimateCost(ast, unknownSizes{})
	return err == nil && est.Max <= limit
}

// unknownSizes is a cost estimator that knows nothing: every input's size
// is unbounded, every function costs what CEL charges by default.
type unknownSizes struct{}

func (unknownSizes) EstimateSize(checker.AstNode) *checker.SizeEstimate { return nil }
func (unknownSizes) EstimateCallCost(string, string, *checker.AstNode, []checker.AstNode) *checker.CallEstimate {
	return nil
}

// EventVars is the event as the expressions see it (the variable event).
func EventVars(e envelope.Envelope) (map[string]any, error) {
	return EventVarsDecoding(e, unmarshalObject)
}

// unmarshalObject is json.Unmarshal into a map (EventVars' decoder).
func unmarshalObject(b []byte, m *map[string]any) error { return json.Unmarshal(b, m) }

// EventVarsDecoding is EventVars with the event's data decoded by decode,
// which must give exactly the values and errors json.Unmarshal gives into
// *m (a direct decoder for a hot path: the declarative projections'
// decodeDoc, checked against json.Unmarshal by its tests and fuzzing).
func EventVarsDecoding(e envelope.Envelope, decode func(b []byte, m *map[string]any) error) (map[string]any, error) {
	m := map[string]any{
		"event_id": e.EventID, "event_type": e.EventType, "kind": string(e.Kind),
		"aggregate_type": e.AggregateType, "aggregate_id": e.AggregateID,
		"sequence_number": e.SequenceNumber, "position": e.Position,
		"occurred_at": e.OccurredAt.String(), "schema_version": int64(e.SchemaVersion),
	}
	data := map[string]any{}
	if len(e.Data) > 0 {
		if err := decode(e.Data, &data); err != nil {
			return nil, fmt.Errorf("data: %w", err)
		}
	}
	m["data"] = data
	md := map[string]any{}
	for k, raw := range e.Metadata {
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("metadata.%s: %w", k, err)
		}
		md[k] = v
	}
	m["metadata"] = md
	return m, nil
}

// EncodeJSON encodes v compactly, without HTML escaping (json.Marshal
// sorts map keys): envelope.EncodeJSON, as a RawMessage.
func EncodeJSON(v any) (json.RawMessage, error) { return envelope.EncodeJSON(v) }

// ToNative converts a CEL value into JSON-able Go values: null, bool,
// string, double, int, uint, maps with string keys and lists; timestamps
// and durations become their strings; bytes are refused.
func ToNative(v ref.Val) (any, error) {
	switch v.Type() {
	case types.NullType:
		return nil, nil
	case types.BoolType, types.StringType, types.DoubleType, types.IntType, types.UintType:
		return v.Value(), nil
	case types.BytesType:
		return nil, errors.New("bytes cannot be stored in a document")
	case types.TimestampType, types.DurationType:
		s := v.ConvertToType(types.StringType)
		if types.IsError(s) {
			return nil, fmt.Errorf("%v", s)
		}
		return s.Value(), nil
	}
	if types.IsError(v) {
		return nil, fmt.Errorf("%v", v)
	}
	if m, ok := v.(traits.Mapper); ok {
		out := map[string]any{}
		it := m.Iterator()
		for it.HasNext() == types.True {
			k := it.Next()
			ks, ok := k.Value().(string)
			if !ok {
				return nil, fmt.Errorf("a document key must be a string, got %v", k.Type())
			}
			nv, err := ToNative(m.Get(k))
			if err != nil {
				return nil, err
			}
			out[ks] = nv
		}
		return out, nil
	}
	if l, ok := v.(traits.Lister); ok {
		var out []any
		it := l.Iterator()
		for it.HasNext() == types.True {
			nv, err := ToNative(it.Next())
			if err != nil {
				return nil, err
			}
			out = append(out, nv)
		}
		if out == nil {
			out = []any{}
		}
		return out, nil
	}
	return v.Value(), nil
}
