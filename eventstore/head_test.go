package eventstore

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// LastSequence, PositionAt and HeadWithClock answer from the index what
// the API and the relay used to query themselves.
func TestHeadPositionLastSequence(t *testing.T) {
	e := newEnv(t)
	s := e.store(t, testConfig())
	ctx := ctxT(t)
	if n, err := s.LastSequence(ctx, "Thing", "a"); err != nil || n != 0 {
		t.Fatalf("LastSequence of a new aggregate = %d, %v; want 0", n, err)
	}
	h0, err := s.HeadWithClock(ctx)
	if err != nil || h0.Position != 0 {
		t.Fatalf("HeadWithClock of an empty store = %+v, %v", h0, err)
	}
	mustAppend(t, s, command("Thing", "a", 1))
	mustAppend(t, s, command("Thing", "b", 1))
	r := mustAppend(t, s, command("Thing", "a", 2))[0]
	if n, err := s.LastSequence(ctx, "Thing", "a"); err != nil || n != 2 {
		t.Fatalf("LastSequence(a) = %d, %v; want 2", n, err)
	}
	h, err := s.HeadWithClock(ctx)
	if err != nil || h.Position != r.Event.Envelope.Position || !h.Now.After(h0.Now) {
		t.Fatalf("HeadWithClock = %+v, %v; want position %d and a clock after %v", h, err, r.Event.Envelope.Position, h0.Now)
	}
	for _, c := range []struct {
		name string
		at   time.Time
		want int64
	}{
		{"before everything: from the start", h0.Now.Add(-time.Hour), 0},
		{"after everything: the last reserved position", h.Now.Add(time.Hour), r.Event.Envelope.Position},
	} {
		if p, err := s.PositionAt(ctx, c.at); err != nil || p != c.want {
			t.Errorf("%s: PositionAt = %d, %v; want %d", c.name, p, err, c.want)
		}
	}
}

// The row states declared in Go are the ones the schema allows.
func TestRowStatesMatchSchema(t *testing.T) {
	e := newEnv(t)
	var def string
	err := e.pool.QueryRow(ctxT(t), `SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c
		WHERE c.conrelid = 'sluice.appends'::regclass AND c.contype = 'c' AND pg_get_constraintdef(c.oid) LIKE '%state = ANY%'`).Scan(&def)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for part := range strings.SplitSeq(def, "'") {
		if part != "" && !strings.ContainsAny(part, "() ,:") {
			got = append(got, part)
		}
	}
	slices.Sort(got)
	want := []string{StateAbandoned, StateCommitted, StateReserved}
	if !slices.Equal(got, want) {
		t.Fatalf("schema allows states %v (%s); Go declares %v", got, def, want)
	}
}
