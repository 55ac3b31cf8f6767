package projectionworker

import (
	"context"
	"encoding/json"
	"testing"
)

// A decoded value kept in the round's DocState is returned only for the
// very bytes it was kept for while they are the document's state, once;
// a Put without a value, a rolled-back event or other bytes forget it.
func TestDocStateDecoded(t *testing.T) {
	stored := json.RawMessage(`{"n":0}`)
	type step func(t *testing.T, s *DocState) json.RawMessage // returns the bytes to take
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
		{"kept with the write", func(t *testing.T, s *DocState) json.RawMessage {
			s.begin()
			b := body("1")
			s.PutDecoded("m", "s", Doc{Source: b}, "v")
			s.commit()
			return get(t, s)
		}, true},
		{"kept for the stored bytes", func(t *testing.T, s *DocState) json.RawMessage {
			s.begin()
			s.KeepDecoded("m", "s", get(t, s), "v")
			s.commit()
			return get(t, s)
		}, true},
		{"taken once", func(t *testing.T, s *DocState) json.RawMessage {
			s.PutDecoded("m", "s", Doc{Source: body("1")}, "v")
			src := get(t, s)
			if _, ok := s.TakeDecoded("m", "s", src); !ok {
				t.Fatal("not kept")
			}
			return src
		}, false},
		{"the same text in other bytes", func(t *testing.T, s *DocState) json.RawMessage {
			s.PutDecoded("m", "s", Doc{Source: body("1")}, "v")
			return body("1")
		}, false},
		{"not kept for bytes that are not the document's", func(t *testing.T, s *DocState) json.RawMessage {
			b := body("1")
			s.KeepDecoded("m", "s", b, "v")
			return b
		}, false},
		{"a write without a value", func(t *testing.T, s *DocState) json.RawMessage {
			b := body("1")
			s.PutDecoded("m", "s", Doc{Source: b}, "v")
			s.Put("m", "s", Doc{Source: b})
			return b
		}, false},
		{"a later write", func(t *testing.T, s *DocState) json.RawMessage {
			b := body("1")
			s.PutDecoded("m", "s", Doc{Source: b}, "v")
			s.Put("m", "s", Doc{Source: body("2")})
			return b
		}, false},
		{"the writing event rolled back", func(t *testing.T, s *DocState) json.RawMessage {
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
			return src
		}, false},
		{"a reading event rolled back after it kept a value", func(t *testing.T, s *DocState) json.RawMessage {
			s.begin()
			s.PutDecoded("m", "s", Doc{Source: body("1")}, "v1")
			s.commit()
			s.begin()
			src := get(t, s)
			v, _ := s.TakeDecoded("m", "s", src)
			s.KeepDecoded("m", "s", src, v) // as if unchanged, then the event fails
			s.rollback()
			return src
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &DocState{read: map[docKey]Doc{{"m", "s"}: {Source: stored, Version: 3}}, overlay: map[docKey]json.RawMessage{}}
			src := tc.steps(t, s)
			v, ok := s.TakeDecoded("m", "s", src)
			if ok != tc.wantOK {
				t.Fatalf("TakeDecoded: %v, %v; want ok %v", v, ok, tc.wantOK)
			}
			if ok && v != "v" {
				t.Fatalf("TakeDecoded: %v", v)
			}
		})
	}
}
