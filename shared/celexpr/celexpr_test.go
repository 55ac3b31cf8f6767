package celexpr

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/shared/envelope"
)

// Compile errors point into the file: the scalar's position moved by the
// position inside a one-line expression (one more column when quoted);
// a multi-line expression keeps the scalar's position.
func TestCompileErrorPositions(t *testing.T) {
	env, err := NewEnv()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		e    Expr
		want string
	}{
		{"plain", Expr{Source: "event.data.a + + 1", Pos: Pos{File: "f", Line: 3, Column: 5}}, "f:3:20: line 1 column 16: Syntax error"},
		{"quoted", Expr{Source: "event.data.a + + 1", Pos: Pos{File: "f", Line: 3, Column: 5, Quoted: true}}, "f:3:21: line 1 column 16"},
		{"multi-line", Expr{Source: "event.data.a +\n  + 1", Pos: Pos{File: "f", Line: 3, Column: 5}}, "f:3:5: line 2 column 3"},
		{"undeclared", Expr{Source: "doc.a", Pos: Pos{File: "f", Line: 1, Column: 1}}, "undeclared reference to 'doc'"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Compile(env, tc.e, 0)
			var ce *CompileError
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want a *CompileError containing %q", err, tc.want)
			}
		})
	}
}

// The event variable and the conversion back: numbers of data are
// doubles, the envelope's integers ints, and a map built by an expression
// comes back as JSON values.
func TestEventVarsAndToNative(t *testing.T) {
	env, err := NewEnv()
	if err != nil {
		t.Fatal(err)
	}
	prg, err := Compile(env, Expr{Source: `{"n": event.data.n * 2.0, "v": event.schema_version + 1, "t": event.event_type.lowerAscii()}`}, 0)
	if err != nil {
		t.Fatal(err)
	}
	vars, err := EventVars(envelope.Envelope{EventType: "OrderPlaced", SchemaVersion: 2, Data: []byte(`{"n":3}`)})
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := prg.Eval(map[string]any{"event": vars})
	if err != nil {
		t.Fatal(err)
	}
	v, err := ToNative(out)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := EncodeJSON(v)
	if string(b) != `{"n":6,"t":"orderplaced","v":3}` {
		t.Fatalf("got %s", b)
	}
}

// The cost limit holds whether it is checked while evaluating or proven
// before: an expression that reads fields and computes is proven under
// the limit; one that loops over input of unknown size is not, and is
// stopped at the limit when evaluated; each evaluates to the same value
// either way.
func TestCostLimitProvenOrChecked(t *testing.T) {
	env, err := NewEnv()
	if err != nil {
		t.Fatal(err)
	}
	long := make([]any, 5000)
	for i := range long {
		long[i] = float64(i)
	}
	event := map[string]any{"data": map[string]any{"total": 12.5, "l": long, "s": "a,b,c"}}
	for _, tc := range []struct {
		name, src string
		limit     uint64
		proven    bool
		want      string // the value, or the error
	}{
		{"field reads and arithmetic", `has(event.data.currency) ? event.data.currency : string(event.data.total * 2.0)`, 100, true, "25"},
		{"a string function over input of unknown size", `event.data.s.split(",")[1]`, 100, false, "b"},
		{"a loop over input of unknown size", `event.data.l.all(x, x >= 0.0)`, 1000, false, "actual cost limit exceeded"},
		{"the same loop under a limit it keeps", `event.data.l.all(x, x >= 0.0)`, 1 << 40, false, "true"},
		{"a proven expression over a tiny limit", `event.data.total + 1.0`, 1, false, "actual cost limit exceeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ast, iss := env.Compile(tc.src)
			if iss.Err() != nil {
				t.Fatal(iss.Err())
			}
			if got := costBounded(env, ast, tc.limit); got != tc.proven {
				t.Fatalf("proven under %d: %v, want %v", tc.limit, got, tc.proven)
			}
			prg, err := Compile(env, Expr{Source: tc.src}, tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			out, _, err := prg.Eval(map[string]any{"event": event})
			got := fmt.Sprint(err)
			if err == nil {
				got = fmt.Sprint(out.Value())
			}
			if !strings.Contains(got, tc.want) {
				t.Fatalf("got %s, want %q", got, tc.want)
			}
		})
	}
}
