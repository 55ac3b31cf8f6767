package declarative

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/shared/envelope"
)

const base = `name: p
version: 1
event_types: [E]
key: event.aggregate_id
updates:
  - increment: n
`

func TestCompileErrorsNamePositions(t *testing.T) {
	cases := []struct {
		name, yaml, want string
	}{
		{"undeclared variable in a plain scalar", "name: p\nversion: 1\nevent_types: [E]\nkey: evnt.aggregate_id\nupdates:\n  - increment: n\n",
			"f.yaml:4:6: projection p: key: expression \"evnt.aggregate_id\", line 1 column 1: undeclared reference to 'evnt'"},
		{"syntax error inside a quoted scalar", "name: p\nversion: 1\nevent_types: [E]\nkey: event.aggregate_id\nupdates:\n  - set: x\n    value: '1 + + '\n",
			"f.yaml:7:17: projection p: updates[0].value: expression \"1 + + \", line 1 column 5: Syntax error"},
		{"error in a when", base + "    when: event.event_type == 3 +\n", "f.yaml:7:34: projection p: updates[0].when: expression \"event.event_type == 3 +\", line 1 column 24"},
		{"unknown key", base + "colour: red\n", "f.yaml:7:1: unknown key \"colour\""},
		{"two operations", "name: p\nversion: 1\nevent_types: [E]\nkey: k\nupdates:\n  - set: a\n    unset: b\n", "f.yaml:7:5: an update has one operation"},
		{"reserved field", "name: p\nversion: 1\nevent_types: [E]\nkey: k\nupdates:\n  - set: sluice.applied\n    value: 1\n", "f.yaml:6:10: field \"sluice.applied\" is kept by sluice"},
		{"bad name", strings.Replace(base, "name: p", "name: P!", 1), "name \"P!\" must match"},
		{"missing version", strings.Replace(base, "version: 1\n", "", 1), "version is required"},
		{"bad upcast", base + "upcast: newest\n", `f.yaml:7:9: upcast must be "latest" (events upcast to their type's latest schema version) or "stored" (the default), got "newest"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			specs, err := Parse("f.yaml", []byte(tc.yaml))
			if err == nil {
				_, err = Compile(specs)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func compileOneYAML(t testing.TB, y string) *Projection {
	t.Helper()
	specs, err := Parse("t.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	ps, err := Compile(specs)
	if err != nil {
		t.Fatal(err)
	}
	return ps[0]
}

func ev(aggID string, seq int64, data string) envelope.Envelope {
	return envelope.Envelope{EventID: "00000000-0000-4000-8000-0000000000" + string(rune('a'+seq)), EventType: "E", Kind: envelope.KindDomain,
		AggregateType: "T", AggregateID: aggID, SequenceNumber: seq, Position: seq, Data: []byte(data),
		OccurredAt: envelope.NewTimestamp(mustTime(t0))}
}

// A runtime failure names the projection, the expression, its position
// and the event (the dead-letter reason), and writes nothing.
func TestRuntimeErrorNamesExpressionAndEvent(t *testing.T) {
	p := compileOneYAML(t, base+"    by: event.data.amount\n")
	m := NewMemory()
	e := ev("a", 1, `{"other":1}`)
	_, err := p.Apply(context.Background(), e, m)
	var ee *EvalError
	if !errors.As(err, &ee) || ee.What != "updates[0].by" || ee.Expr.Source != "event.data.amount" || ee.EventID != e.EventID ||
		!strings.Contains(err.Error(), "t.yaml:7:9") {
		t.Fatalf("error %v", err)
	}
	if len(m.Docs) != 0 {
		t.Fatal("a failed event wrote a document")
	}
	// Type errors of the update itself too.
	p = compileOneYAML(t, strings.Replace(base, "increment: n", "set: n\n    value: '\"x\"'\n  - increment: n", 1))
	if _, err := p.Apply(context.Background(), ev("a", 1, `{}`), m); !errors.As(err, &ee) || !strings.Contains(err.Error(), "not a number") {
		t.Fatalf("error %v", err)
	}
}

// A replayed event (a retry after Elasticsearch answered but before the
// registry recorded it) changes nothing: the document knows the last
// sequence it applied per aggregate.
func TestReplayIsNotCountedTwice(t *testing.T) {
	p := compileOneYAML(t, strings.Replace(base, "key: event.aggregate_id", `key: '"all"'`, 1))
	m := NewMemory()
	ctx := context.Background()
	for _, e := range []envelope.Envelope{ev("a", 1, `{}`), ev("b", 1, `{}`), ev("a", 2, `{}`), ev("a", 2, `{}`), ev("a", 1, `{}`)} {
		if _, err := p.Apply(ctx, e, m); err != nil {
			t.Fatal(err)
		}
	}
	d := m.Docs[[2]string{"default", "all"}]
	if !strings.Contains(string(d.Source), `"n":3`) || d.Version != 3 {
		t.Fatalf("document %s version %d, want n 3 at version 3", d.Source, d.Version)
	}
}

// The cost limit stops an expensive expression (the sandbox).
func TestCostLimit(t *testing.T) {
	y := strings.Replace(base, "  - increment: n\n", "  - set: n\n    value: '[1,2,3,4,5,6,7,8,9,10].map(x, [1,2,3,4,5,6,7,8,9,10].map(y, [1,2,3,4,5,6,7,8,9,10].map(z, x*y*z)))'\n", 1) + "cost_limit: 100\n"
	p := compileOneYAML(t, y)
	_, err := p.Apply(context.Background(), ev("a", 1, `{}`), NewMemory())
	if err == nil || !strings.Contains(err.Error(), "cost limit") {
		t.Fatalf("error %v, want the cost limit", err)
	}
}

const t0 = "2026-11-21T10:00:00Z"

func mustTime(s string) time.Time {
	v, err := envelope.ParseTimestamp(s)
	if err != nil {
		panic(err)
	}
	return v.Time()
}

// A projection with upcast: latest reads events through its upcaster;
// without one it refuses every event (a wiring error, named), and a
// projection without upcast: latest never asks.
func TestUpcastSetting(t *testing.T) {
	ev := envelope.Envelope{EventID: "00000000-0000-4000-8000-000000000001", EventType: "E", Kind: envelope.KindDomain,
		AggregateType: "A", AggregateID: "a-1", SequenceNumber: 1, SchemaVersion: 1, Data: []byte(`{"n":1}`)}
	const p = "name: p\nversion: 1\nevent_types: [E]\nkey: event.aggregate_id\nupdates:\n  - set: v\n    value: event.schema_version\n"
	cases := []struct {
		name, yaml string
		upcaster   bool
		want       string // the document, or the error
	}{
		{"stored: the upcaster is not asked", p, true, `"v":1`},
		{"stored, said so", p + "upcast: stored\n", true, `"v":1`},
		{"latest without the registry", p + "upcast: latest\n", false, "projection p declares upcast: latest but runs without the schema registry"},
		{"latest", p + "upcast: latest\n", true, `"v":7`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			specs, err := Parse("t.yaml", []byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			ps, err := Compile(specs)
			if err != nil {
				t.Fatal(err)
			}
			if tc.upcaster {
				ps[0].UseUpcaster(bumpTo7{})
			}
			ops, err := ps[0].Project(ev)
			got := ""
			if err != nil {
				got = err.Error()
			} else if len(ops) == 1 {
				got = string(ops[0].Doc)
			}
			if !strings.Contains(got, tc.want) {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}

// bumpTo7 is an Upcaster that says every event is at version 7: it shows
// which envelope the projection's expressions see.
type bumpTo7 struct{}

func (bumpTo7) Latest(_ context.Context, e envelope.Envelope) (envelope.Envelope, error) {
	e.SchemaVersion = 7
	return e, nil
}
