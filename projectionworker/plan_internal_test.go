package projectionworker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"testing"

	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/worker"
)

// scripted projects each event into the operations listed for its id.
type scripted struct {
	Instances
	ops map[string][]Op
}

func (scripted) Name() string                                { return "scripted" }
func (scripted) Handles(envelope.Envelope) bool              { return true }
func (p scripted) Project(e envelope.Envelope) ([]Op, error) { return p.ops[e.EventID], nil }

// scriptedState is scripted as a Stateful projection: an operation
// FromState records the event's id as the document's state.
type scriptedState struct{ scripted }

func (p scriptedState) ProjectState(_ context.Context, e envelope.Envelope, st *DocState) ([]Op, error) {
	ops := p.ops[e.EventID]
	for _, op := range ops {
		if op.FromState {
			st.PutValue(op.Scope, op.ID, e.EventID, func(v any) ([]byte, error) { return fmt.Appendf(nil, `{"last":%q}`, v), nil })
		}
	}
	return ops, nil
}

// scriptedUp is scripted reading every event upcast: its id gains a "+".
type scriptedUp struct{ scripted }

func (scriptedUp) Upcast(_ context.Context, e envelope.Envelope) (envelope.Envelope, error) {
	e.EventID += "+"
	return e, nil
}

// plan builds a round's lines in record order from buffers it reuses from
// record to record (the items, their lines, the deps' array): each
// record's lines and deps are its own whatever the records before it
// wrote, an invalid scope fails only its event (also once another scope
// is ensured), and an upcasting projection reads the upcast envelopes.
func TestPlanReusesBuffers(t *testing.T) {
	doc := func(s string) json.RawMessage { return json.RawMessage(s) }
	line := func(id, src string) string {
		return `{"index":{"_index":"ix_s","_id":"` + id + `"}}` + "\n" + src + "\n"
	}
	cases := []struct {
		name      string
		p         Projection
		events    []string
		wantLines []string
		wantDeps  [][]int
		wantFail  []bool // Permanent
	}{
		{"stateless: record order, a record without writes",
			scripted{ops: map[string][]Op{
				"a": {{Scope: "s", ID: "1", Doc: doc(`{"a": 1}`)}, {Scope: "s", ID: "2", Doc: doc(`{"a":2}`), Compact: true}},
				"c": {{Scope: "s", ID: "3", Doc: doc(`{"c":3}`)}},
			}},
			[]string{"a", "b", "c"},
			[]string{line("1", `{"a":1}`), line("2", `{"a":2}`), line("3", `{"c":3}`)},
			[][]int{{0, 1}, nil, {2}}, []bool{false, false, false}},
		{"stateless: an invalid scope fails its event alone",
			scripted{ops: map[string][]Op{
				"a": {{Scope: "s", ID: "1", Doc: doc(`{}`)}},
				"b": {{Scope: "s", ID: "2", Doc: doc(`{}`)}, {Scope: "Not A Scope", ID: "3", Doc: doc(`{}`)}},
				"c": {{Scope: "s", ID: "4", Doc: doc(`{}`)}},
			}},
			[]string{"a", "b", "c"},
			[]string{line("1", `{}`), line("4", `{}`)},
			[][]int{{0}, nil, {1}}, []bool{false, true, false}},
		{"stateful: the round's state, one write per document",
			scriptedState{scripted{ops: map[string][]Op{
				"a": {{Scope: "s", ID: "x", Doc: doc(`{"x":1}`)}, {Scope: "s", ID: "y", FromState: true, Compact: true}},
				"b": {{Scope: "s", ID: "y", FromState: true, Compact: true}},
				"c": {{Scope: "s", ID: "z", FromState: true, Compact: true}, {Scope: "s", ID: "x", Doc: doc(`{"x":3}`)}},
			}}},
			[]string{"a", "b", "c"},
			[]string{line("x", `{"x":3}`), line("y", `{"last":"b"}`), line("z", `{"last":"c"}`)},
			[][]int{{0, 1}, {1}, {2, 0}}, []bool{false, false, false}},
		{"upcast: the projection reads the upcast envelopes",
			scriptedUp{scripted{ops: map[string][]Op{
				"a+": {{Scope: "s", ID: "1", Doc: doc(`{}`)}},
				"b":  {{Scope: "s", ID: "2", Doc: doc(`{}`)}},
			}}},
			[]string{"a", "b"},
			[]string{line("1", `{}`)},
			[][]int{{0}, nil}, []bool{false, false}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := &Worker{spec: Spec{Projection: tc.p, Version: 1}, log: slog.Default(), ensured: map[string]string{"s": "ix_s"}}
			recs := make([]*worker.Record, len(tc.events))
			for i, id := range tc.events {
				recs[i] = &worker.Record{Envelope: envelope.Envelope{EventID: id}}
			}
			pl := w.plan(context.Background(), recs)
			var lines []string
			for _, l := range pl.lines {
				lines = append(lines, string(l))
			}
			if !reflect.DeepEqual(lines, tc.wantLines) {
				t.Errorf("lines\n%q\nwant\n%q", lines, tc.wantLines)
			}
			if !reflect.DeepEqual(pl.deps, tc.wantDeps) {
				t.Errorf("deps %v, want %v", pl.deps, tc.wantDeps)
			}
			for i, d := range pl.deps {
				if cap(d) != len(d) {
					t.Errorf("record %d: deps %v have room for %d more: an append would reach another record's", i, d, cap(d)-len(d))
				}
				if failed := pl.out[i].Err != nil && worker.Classify(pl.out[i].Err) == worker.ClassPermanent; failed != tc.wantFail[i] {
					t.Errorf("record %d: %v, want failed (Permanent) %v", i, pl.out[i].Err, tc.wantFail[i])
				}
			}
		})
	}
}
