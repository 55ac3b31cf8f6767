package projectionworker

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/worker"
)

// newTestDocState is a round's state whose document m/s was read as
// stored (version 3).
func newTestDocState(stored json.RawMessage) *DocState {
	return &DocState{read: map[docKey]Doc{{"m", "s"}: {Source: stored, Version: 3}}, overlay: map[docKey]roundDoc{}}
}

// A decoded value kept in the round's DocState is returned only while it
// stands for the document's state: for the very bytes it was kept with,
// or as the state itself (PutValue); a Put without a value, a rolled-back
// event or other bytes forget it.
func TestDocStateDecoded(t *testing.T) {
	stored := json.RawMessage(`{"n":0}`)
	type step func(t *testing.T, s *DocState)
	body := func(n string) json.RawMessage { return json.RawMessage(`{"n":` + n + `}`) }
	get := func(t *testing.T, s *DocState) json.RawMessage {
		t.Helper()
		d, err := s.Get(context.Background(), "m", "s")
		if err != nil {
			t.Fatal(err)
		}
		return d.Source
	}
	cases := []struct {
		name   string
		steps  step
		wantOK bool
	}{
		{"kept with the write", func(t *testing.T, s *DocState) {
			s.begin()
			s.PutDecoded("m", "s", Doc{Source: body("1")}, "v")
			s.commit()
		}, true},
		{"kept for the stored bytes", func(t *testing.T, s *DocState) {
			s.begin()
			s.KeepValue("m", "s", get(t, s), "v")
			s.commit()
		}, true},
		{"kept as the state", func(t *testing.T, s *DocState) {
			s.begin()
			s.PutValue("m", "s", "v", func(any) ([]byte, error) { return body("1"), nil })
			s.commit()
		}, true},
		{"kept as the state, encoded since", func(t *testing.T, s *DocState) {
			s.PutValue("m", "s", "v", func(any) ([]byte, error) { return body("1"), nil })
			if got := string(get(t, s)); got != `{"n":1}` {
				t.Fatalf("Get: %s", got)
			}
		}, true},
		{"the same text in other bytes", func(t *testing.T, s *DocState) {
			s.KeepValue("m", "s", body("0"), "v")
		}, false},
		{"a write without a value", func(t *testing.T, s *DocState) {
			b := body("1")
			s.PutDecoded("m", "s", Doc{Source: b}, "v")
			s.Put("m", "s", Doc{Source: b})
		}, false},
		{"a later write", func(t *testing.T, s *DocState) {
			s.PutValue("m", "s", "v", func(any) ([]byte, error) { return body("1"), nil })
			s.Put("m", "s", Doc{Source: body("2")})
		}, false},
		{"the writing event rolled back", func(t *testing.T, s *DocState) {
			s.begin()
			s.PutDecoded("m", "s", Doc{Source: body("1")}, "v1")
			s.commit()
			s.begin()
			src := get(t, s)
			s.PutDecoded("m", "s", Doc{Source: body("2")}, "v2")
			s.rollback()
			if !sameBytes(get(t, s), src) {
				t.Fatal("the rollback did not restore the document")
			}
		}, false},
		{"a reading event rolled back after it kept a value", func(t *testing.T, s *DocState) {
			s.begin()
			src := get(t, s)
			s.KeepValue("m", "s", src, "v") // as if unchanged, then the event fails
			s.rollback()
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestDocState(stored)
			tc.steps(t, s)
			_, v, err := s.GetValue(context.Background(), "m", "s")
			if err != nil {
				t.Fatal(err)
			}
			if ok := v != nil; ok != tc.wantOK {
				t.Fatalf("GetValue: %v; want a value: %v", v, tc.wantOK)
			}
			if v != nil && v != "v" {
				t.Fatalf("GetValue: %v", v)
			}
		})
	}
}

// A document written with PutValue is encoded once, when its bytes are
// first needed (Get, the round's write), from its state then; a later
// write drops the encoding, and a rolled-back event leaves the state —
// value, changes made in place and bytes — as it found it.
func TestDocStateEncodedOnce(t *testing.T) {
	type doc = map[string]any
	encodes := 0
	enc := func(v any) ([]byte, error) {
		encodes++
		return json.Marshal(v)
	}
	ctx := context.Background()
	src := func(t *testing.T, s *DocState) string {
		t.Helper()
		b, err := s.source(docKey{"m", "s"})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	// event writes the value of the state (or a new one) with n = n + 1,
	// changed in place through the journal, as the declarative projection
	// does; fail makes it fail after it changed the value.
	event := func(t *testing.T, s *DocState, fail bool) {
		t.Helper()
		s.begin()
		d, v, err := s.GetValue(ctx, "m", "s")
		if err != nil {
			t.Fatal(err)
		}
		m, _ := v.(doc)
		switch {
		case m != nil:
		case d.Source != nil:
			if err := json.Unmarshal(d.Source, &m); err != nil {
				t.Fatal(err)
			}
		default:
			m = doc{"n": 0.0, "list": []any{}}
		}
		s.SetField(m, "n", m["n"].(float64)+1)
		s.SetField(m, "list", append(m["list"].([]any), m["n"]))
		s.DeleteField(m, "gone")
		if fail {
			s.SetField(m, "half", true)
			s.rollback()
			return
		}
		s.PutValue("m", "s", m, enc)
		s.commit()
	}
	cases := []struct {
		name        string
		steps       func(t *testing.T, s *DocState)
		want        string
		wantEncodes int
	}{
		{"three events, encoded at the end", func(t *testing.T, s *DocState) {
			event(t, s, false)
			event(t, s, false)
			event(t, s, false)
		}, `{"list":[1,2,3],"n":3}`, 1},
		{"a Get in between encodes once more", func(t *testing.T, s *DocState) {
			event(t, s, false)
			if d, err := s.Get(ctx, "m", "s"); err != nil || string(d.Source) != `{"list":[1],"n":1}` || d.Version != 3 {
				t.Fatalf("Get: %s %v", d.Source, err)
			}
			if d, _ := s.Get(ctx, "m", "s"); string(d.Source) != `{"list":[1],"n":1}` {
				t.Fatalf("Get again: %s", d.Source)
			}
			event(t, s, false)
		}, `{"list":[1,2],"n":2}`, 2},
		{"a failed event changed the value in place", func(t *testing.T, s *DocState) {
			event(t, s, false)
			event(t, s, false)
			event(t, s, true)
		}, `{"list":[1,2],"n":2}`, 1},
		{"a failed event after the bytes were needed", func(t *testing.T, s *DocState) {
			event(t, s, false)
			_, _ = s.Get(ctx, "m", "s")
			event(t, s, true)
			event(t, s, false)
		}, `{"list":[1,2],"n":2}`, 2},
		{"a failed event after its own write", func(t *testing.T, s *DocState) {
			event(t, s, false)
			s.begin()
			_, v, _ := s.GetValue(ctx, "m", "s")
			m := v.(doc)
			s.SetField(m, "n", 9.0)
			s.PutValue("m", "s", m, enc)
			if got := src(t, s); got != `{"list":[1],"n":9}` {
				t.Fatalf("state before the rollback: %s", got)
			}
			s.rollback() // the worker could not place the write
			event(t, s, false)
		}, `{"list":[1,2],"n":2}`, 2},
		{"a failed first event leaves the document as read", func(t *testing.T, s *DocState) {
			event(t, s, true)
			event(t, s, false)
		}, `{"list":[1],"n":1}`, 1},
		{"bytes written by a Go projection in between", func(t *testing.T, s *DocState) {
			event(t, s, false)
			s.begin()
			d, _ := s.Get(ctx, "m", "s")
			s.Put("m", "s", Doc{Source: json.RawMessage(strings.Replace(string(d.Source), `"n":1`, `"n":10`, 1))})
			s.commit()
			if _, v, _ := s.GetValue(ctx, "m", "s"); v != nil {
				t.Fatalf("a value kept over bytes written: %v", v)
			}
		}, `{"list":[1],"n":10}`, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			encodes = 0
			s := newTestDocState(nil)
			tc.steps(t, s)
			if got := src(t, s); got != tc.want {
				t.Errorf("the round's document %s, want %s", got, tc.want)
			}
			if encodes != tc.wantEncodes {
				t.Errorf("encoded %d times, want %d", encodes, tc.wantEncodes)
			}
			if _, v, _ := s.GetValue(ctx, "m", "s"); v != nil {
				var want map[string]any
				_ = json.Unmarshal([]byte(tc.want), &want)
				if !reflect.DeepEqual(v, want) {
					t.Errorf("the value kept %v, want %v (what the document decodes to)", v, want)
				}
			}
		})
	}
}

// stateOnly is a Stateful projection whose operations are the round's
// state (Op.FromState), for encodeStates.
type stateOnly struct{ Instances }

func (stateOnly) Name() string { return "state_only" }

// A round whose state of a document cannot be encoded writes nothing: in
// a round of several events each that wrote or relied on the document is
// run again alone, and alone the event fails for good.
func TestEncodeStatesFailure(t *testing.T) {
	bad := errors.New("no encoding")
	for _, tc := range []struct {
		name    string
		records int
		class   string
	}{
		{"a round of several events", 3, worker.ClassRetryable},
		{"a round of one event", 1, worker.ClassPermanent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &Worker{spec: Spec{Projection: stateOnly{}}}
			s := newTestDocState(nil)
			s.PutValue("m", "s", map[string]any{}, func(any) ([]byte, error) { return nil, bad })
			s.Put("m", "t", Doc{Source: json.RawMessage(`{}`)})
			pl := &roundPlan{out: make([]worker.BatchResult, tc.records), deps: make([][]int, tc.records), noWrite: make([]bool, tc.records),
				lines: [][]byte{nil, []byte("line\n")},
				items: []BulkItem{{Index: "i", Op: Op{Scope: "m", ID: "s", FromState: true, Compact: true}}, {Index: "i", Op: Op{Scope: "m", ID: "t", Doc: json.RawMessage(`{}`)}}}}
			pl.deps[0] = []int{0}
			if tc.records > 1 {
				pl.deps[1] = []int{1}
				pl.out[2] = worker.BatchResult{Err: worker.Permanent(errors.New("its own"))}
			}
			w.encodeStates(s, pl, tc.records)
			if len(pl.lines) != 0 {
				t.Fatalf("%d lines left to write", len(pl.lines))
			}
			for i := 0; i < min(2, tc.records); i++ {
				if err := pl.out[i].Err; err == nil || worker.Classify(err) != tc.class || !errors.Is(err, bad) {
					t.Fatalf("event %d: %v, want %s", i, err, tc.class)
				}
			}
			if tc.records > 2 && !strings.Contains(pl.out[2].Err.Error(), "its own") {
				t.Fatalf("event 3's own failure replaced: %v", pl.out[2].Err)
			}
		})
	}
}
