package eventstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/failure"
)

const shortTimeout = 300 * time.Millisecond

// crashOnce returns hooks that stop the first group at point.
func crashOnce(point string) *crashAt {
	var fired atomic.Bool
	h := func(context.Context, string) error {
		if fired.CompareAndSwap(false, true) {
			return errors.New("process killed")
		}
		return nil
	}
	if point == "afterReserve" {
		return &crashAt{afterReserve: h}
	}
	return &crashAt{afterPut: h}
}

func crashBatch() []envelope.Envelope {
	return []envelope.Envelope{command("Order", "a", 1), command("Order", "a", 2), command("Order", "b", 3)}
}

// appendCrashing appends envs through a store that crashes at point and
// returns the positions the crashed group reserved.
func appendCrashing(t *testing.T, e *env, point string, envs []envelope.Envelope) *Store {
	t.Helper()
	cfg := testConfig()
	cfg.AppendTimeout = shortTimeout
	s := e.store(t, named(cfg, "crashing"), crashOnce(point).option())
	rs, err := s.Append(ctxT(t), envs...)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		var ce *crashError
		if !errors.As(r.Err, &ce) {
			t.Fatalf("append through a crashing group: %s", describe(r))
		}
	}
	for _, ev := range envs {
		if st := rowState(t, e.pool, ev.EventID); st != stateReserved {
			t.Fatalf("after the crash the row is %s, want reserved", st)
		}
	}
	return s
}

// checkOnce verifies every envelope is stored exactly once, committed, and
// readable: at the position its crashed reservation had (1..n) when its
// segment was written (fresh false), else at a fresh position after the
// crashed block's, in the order of envs (an abandoned append is never
// committed at its old position, which the relay may have passed).
func checkOnce(t *testing.T, e *env, s *Store, envs []envelope.Envelope, fresh bool) {
	t.Helper()
	prev := int64(len(envs))
	for i, ev := range envs {
		got, err := s.ByEventID(ctxT(t), ev.EventID)
		if err != nil {
			t.Fatalf("event %d lost: %v", i, err)
		}
		switch p := got.Envelope.Position; {
		case !fresh && p != int64(i+1):
			t.Errorf("event %d at position %d, want its reserved position %d", i, p, i+1)
		case fresh && p <= prev:
			t.Errorf("event %d at position %d, want a fresh one after %d", i, p, prev)
		case fresh:
			prev = p
		}
		if st := rowState(t, e.pool, ev.EventID); st != stateCommitted {
			t.Errorf("event %d row %s", i, st)
		}
	}
	want := map[string]bool{}
	for _, ev := range envs {
		want[ev.EventID] = true
	}
	seen := map[string]int{}
	for _, agg := range []string{"a", "b"} {
		for _, ev := range mustStream(t, s, "Order", agg) {
			if want[ev.Envelope.EventID] {
				seen[ev.Envelope.EventID]++
			}
		}
	}
	for id := range want {
		if seen[id] != 1 {
			t.Errorf("event %s appears %d times in its stream, want once", id, seen[id])
		}
	}
}

func TestCrashRecovery(t *testing.T) {
	points := []struct {
		name, point   string
		segmentExists bool
	}{
		{"between reservation and PUT", "afterReserve", false},
		{"between PUT and commit", "afterPut", true},
	}
	for _, p := range points {
		t.Run(p.name, func(t *testing.T) {
			t.Run("repair then retry", func(t *testing.T) {
				e := newEnv(t)
				envs := crashBatch()
				appendCrashing(t, e, p.point, envs)
				cfg := testConfig()
				cfg.AppendTimeout = shortTimeout
				s := e.store(t, cfg)
				// The first repair runs with the default timeout: however
				// long a loaded machine took since the crash, the rows are
				// still in flight for it (shortTimeout alone raced the load).
				patient := e.store(t, testConfig())
				rep, err := patient.Repair(ctxT(t), 0)
				if err != nil {
					t.Fatal(err)
				}
				if p.segmentExists {
					if rep.Committed != 3 || rep.InFlight != 0 {
						t.Fatalf("repair at once: %+v, want 3 committed", rep)
					}
				} else {
					if rep.InFlight != 3 || rep.Abandoned != 0 {
						t.Fatalf("repair before the timeout: %+v, want 3 in flight", rep)
					}
					time.Sleep(shortTimeout + 50*time.Millisecond)
					if rep, err = s.Repair(ctxT(t), 0); err != nil || rep.Abandoned != 3 {
						t.Fatalf("repair after the timeout: %+v %v, want 3 abandoned", rep, err)
					}
					if st := rowState(t, e.pool, envs[0].EventID); st != stateAbandoned {
						t.Fatalf("row %s, want abandoned", st)
					}
					// an abandoned slot counts as used: a new command goes after it
					if r := mustAppend(t, s, command("Order", "a", 9))[0]; r.Event.Envelope.SequenceNumber != 3 {
						t.Errorf("new command after abandoned slots got seq %d, want 3", r.Event.Envelope.SequenceNumber)
					}
				}
				// the producer retries: stored once; at the reserved slots
				// when the segment was written, else at fresh positions,
				// and "a" takes new slots after the command appended
				// meanwhile (its old ones were followed by slot 3)
				rs := mustAppend(t, s, envs...)
				wantSeq := []int64{1, 2, 1}
				if !p.segmentExists {
					wantSeq = []int64{4, 5, 1}
				}
				for i, r := range rs {
					if r.Event.Envelope.SequenceNumber != wantSeq[i] {
						t.Errorf("retry %d: %s, want seq %d", i, describe(r), wantSeq[i])
					}
				}
				checkOnce(t, e, s, envs, !p.segmentExists)
				if rep, _ := s.Repair(ctxT(t), 0); rep != (RepairReport{}) {
					t.Errorf("second repair found work: %+v", rep)
				}
			})
			t.Run("later append by another writer", func(t *testing.T) {
				e := newEnv(t)
				envs := crashBatch()
				appendCrashing(t, e, p.point, envs)
				cfg := testConfig()
				cfg.AppendTimeout = shortTimeout
				s := e.store(t, named(cfg, "other"))
				rs := mustAppend(t, s, envs...) // waits for the silent writer, then settles its rows
				// The mechanism, not the clock: the rows were met while
				// the crashed writer's reservation was young, and requeued
				// to wait for it (settled only once stale).
				if w := s.stats.waited.Load(); !p.segmentExists && w == 0 {
					t.Errorf("another writer's fresh reservation was not waited for (no item requeued for a live writer)")
				}
				checkSeqs(t, rs, 1, 2, 1) // nothing followed the abandoned slots: kept
				checkOnce(t, e, s, envs, !p.segmentExists)
			})
			t.Run("retry by the same writer", func(t *testing.T) {
				e := newEnv(t)
				envs := crashBatch()
				s := appendCrashing(t, e, p.point, envs)
				waited := s.stats.waited.Load()
				rs := mustAppend(t, s, envs...) // its own dead group: settled at once
				// Settled at once means no item was requeued to wait for
				// a live writer: the writer knows its own group is over.
				if w := s.stats.waited.Load() - waited; w != 0 {
					t.Errorf("the writer requeued %d items to wait for its own dead reservation", w)
				}
				checkSeqs(t, rs, 1, 2, 1)
				checkOnce(t, e, s, envs, !p.segmentExists)
			})
		})
	}
}

// checkSeqs checks the sequence numbers of results.
func checkSeqs(t *testing.T, rs []Result, want ...int64) {
	t.Helper()
	for i, r := range rs {
		if r.Err != nil || r.Event.Envelope.SequenceNumber != want[i] {
			t.Errorf("result %d: %s, want seq %d", i, describe(r), want[i])
		}
	}
}

// A writer stalled between reservation and PUT for longer than the append
// timeout finds its rows abandoned by a repair (as the relay's would be,
// which then passes their positions). Its commit leaves them abandoned and
// appends the envelopes again at fresh positions, keeping their slots: it
// acknowledges nothing at a position the relay may have passed for good.
func TestLateWriterAppendsAbandonedRowsAgain(t *testing.T) {
	e := newEnv(t)
	cfg := testConfig()
	cfg.AppendTimeout = shortTimeout
	release := make(chan struct{})
	stalled := make(chan struct{})
	var once sync.Once
	hooks := &crashAt{afterReserve: func(ctx context.Context, key string) error {
		once.Do(func() {
			close(stalled)
			<-release
		})
		return nil
	}}
	late := e.store(t, cfg, hooks.option())
	envs := crashBatch()
	done := make(chan []Result)
	go func() {
		rs, err := late.Append(context.Background(), envs...)
		if err != nil {
			t.Error(err)
		}
		done <- rs
	}()
	<-stalled
	time.Sleep(shortTimeout + 50*time.Millisecond)
	repairer := e.store(t, cfg)
	rep, err := repairer.Repair(ctxT(t), 0)
	if err != nil || rep.Abandoned != 3 {
		t.Fatalf("repair: %+v %v, want 3 abandoned", rep, err)
	}
	close(release)
	rs := <-done
	checkSeqs(t, rs, 1, 2, 1)
	for i, r := range rs {
		if r.Event.Envelope.Position <= 3 {
			t.Errorf("late writer acknowledged event %d at its abandoned position %d", i, r.Event.Envelope.Position)
		}
	}
	checkOnce(t, e, repairer, envs, true)
	if rep, err := repairer.Repair(ctxT(t), 0); err != nil || rep != (RepairReport{}) {
		t.Errorf("repair after the late writer: %+v %v", rep, err)
	}
}

// A failed segment PUT settles its reservation by what is known of it
// (issue 26): definitely not written → the rows are abandoned at once and
// the relay can pass them, so the appends behind them are publishable
// without waiting for the append timeout; outcome unknown → the rows stay
// reserved for the relay's rule 3; written after all → acknowledged. The
// object store is down for reads too (as when MinIO is killed), so the
// writer cannot look the segment up.
func TestFailedSegmentWrites(t *testing.T) {
	notWritten := fmt.Errorf("connection refused: %w: %w", objstore.ErrNotWritten, objstore.ErrUnavailable)
	cases := []struct {
		name         string
		createErr    error
		writeThrough bool
		getErr       error
		wantState    string // of the failed append's rows
	}{
		{"not written, store down", notWritten, false, objstore.ErrUnavailable, stateAbandoned},
		{"outcome unknown, store down", objstore.ErrUnavailable, false, objstore.ErrUnavailable, stateReserved},
		{"outcome unknown, object absent", objstore.ErrUnavailable, false, nil, stateReserved},
		{"written although the client saw an error", objstore.ErrUnavailable, true, nil, stateCommitted},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			s := e.store(t, testConfig())
			e.bucket.fail(c.createErr, c.writeThrough, c.getErr)
			envs := crashBatch()
			rs, err := s.Append(ctxT(t), envs...)
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range envs {
				if st := rowState(t, e.pool, ev.EventID); st != c.wantState {
					t.Errorf("row of the failed write is %s, want %s", st, c.wantState)
				}
			}
			e.bucket.fail(nil, false, nil)
			if c.wantState == stateCommitted {
				checkOnce(t, e, s, envs, false)
				return
			}
			var ue *UnavailableError
			if !errors.As(rs[0].Err, &ue) || ue.HTTPStatus() != 503 || ue.NotWritten != (c.wantState == stateAbandoned) ||
				!errors.Is(rs[0].Err, objstore.ErrUnavailable) || !failure.IsOutage(context.Background(), rs[0].Err) {
				t.Fatalf("got %s, want *UnavailableError (503, an outage, NotWritten %v)", describe(rs[0]), c.wantState == stateAbandoned)
			}
			// The next append: committed; below it nothing is in flight
			// when the failed write was settled at once (the relay's view:
			// the checkpoint may pass every position up to the head now).
			next := mustAppend(t, s, command("Order", "next", 1))[0]
			head, err := s.Head(ctxT(t))
			if err != nil || head != next.Event.Envelope.Position {
				t.Fatalf("head %d %v, want %d", head, err, next.Event.Envelope.Position)
			}
			rows, err := s.Index(ctxT(t), IndexQuery{FromPosition: 1, ToPosition: head, UncommittedOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			inFlight := 0
			for _, r := range rows {
				if r.State == stateReserved {
					inFlight++
				}
			}
			if want := map[string]int{stateAbandoned: 0, stateReserved: 3}[c.wantState]; inFlight != want {
				t.Errorf("%d reserved positions below the head hold the relay, want %d", inFlight, want)
			}
			if c.wantState == stateAbandoned {
				if got := testutil.ToFloat64(s.m.settled); got != 3 {
					t.Errorf("released positions metric %v, want 3", got)
				}
				// the producer's retry is stored at fresh positions
				mustAppend(t, s, envs...)
				checkOnce(t, e, s, envs, true)
			}
		})
	}
}

// Reindex rebuilds the tables from the segments alone: on a wiped schema
// and on a live one the result equals the index the appends built.
func TestReindexReproducesTables(t *testing.T) {
	e := newEnv(t)
	s := e.store(t, testConfig())
	for g := range 4 {
		var envs []envelope.Envelope
		for i := range 25 {
			envs = append(envs, command("Instance", "db:c:"+string(rune('a'+i%5)), g*100+i))
		}
		rs := mustAppend(t, s, envs...)
		var doms []envelope.Envelope
		for _, r := range rs[:5] {
			d := domainEvent("Instance", r.Event.Envelope.AggregateID, map[string]any{"s": g})
			d.SequenceNumber = r.Event.Envelope.SequenceNumber
			d.OccurredAt = envelope.Timestamp{}
			doms = append(doms, d)
		}
		mustAppend(t, s, doms...)
	}
	mustAppend(t, s, domainEvent("Other", "x/y z", map[string]any{"deep": map[string]any{"a": []any{1, "2", nil}}}))
	before := snapshot(t, e.pool)

	for _, wipe := range []bool{false, true} {
		if wipe {
			for _, q := range []string{`TRUNCATE sluice.appends, sluice.sequences`, `UPDATE sluice.log_head SET next_position = 1`} {
				if _, err := e.pool.Exec(ctxT(t), q); err != nil {
					t.Fatal(err)
				}
			}
		}
		rep, err := s.Reindex(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if rep.Events != int64(len(before.appends)) || rep.Duplicates != 0 || rep.NextPosition != before.head {
			t.Errorf("wipe=%v: report %+v, want %d events, head %d", wipe, rep, len(before.appends), before.head)
		}
		after := snapshot(t, e.pool)
		if len(after.appends) != len(before.appends) || len(after.sequences) != len(before.sequences) || after.head != before.head {
			t.Fatalf("wipe=%v: %d/%d appends, %d/%d sequences, head %d/%d", wipe,
				len(after.appends), len(before.appends), len(after.sequences), len(before.sequences), after.head, before.head)
		}
		for i := range before.appends {
			if after.appends[i] != before.appends[i] {
				t.Fatalf("wipe=%v: appends row %d\n got  %s\n want %s", wipe, i, after.appends[i], before.appends[i])
			}
		}
		for i := range before.sequences {
			if after.sequences[i] != before.sequences[i] {
				t.Fatalf("wipe=%v: sequences row %d: %s, want %s", wipe, i, after.sequences[i], before.sequences[i])
			}
		}
	}
	// the rebuilt index serves appends and idempotency as before
	r := mustAppend(t, s, command("Instance", "db:c:a", "next"))[0]
	if r.Event.Envelope.Position != before.head {
		t.Errorf("first append after reindex at %d, want %d", r.Event.Envelope.Position, before.head)
	}
}

// Reindex commits reserved rows whose segment exists, drops reservations
// that never reached a segment, and never lowers sequences or log_head.
func TestReindexAfterCrashes(t *testing.T) {
	e := newEnv(t)
	put := crashBatch()
	appendCrashing(t, e, "afterPut", put)
	lost := []envelope.Envelope{command("Order", "a", "never written")}
	appendCrashing(t, e, "afterReserve", lost)
	s := e.store(t, testConfig())
	rep, err := s.Reindex(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Events != 3 || rep.NextPosition != 5 {
		t.Errorf("report %+v, want 3 events and next position 5", rep)
	}
	checkOnce(t, e, s, put, false)
	if st := rowState(t, e.pool, lost[0].EventID); st != "none" {
		t.Errorf("never-written reservation is %s after reindex", st)
	}
	if r := mustAppend(t, s, command("Order", "a", "next"))[0]; r.Event.Envelope.SequenceNumber != 4 || r.Event.Envelope.Position != 5 {
		t.Errorf("after reindex: %s, want seq 4 (slot 3 was handed out) at position 5", describe(r))
	}
}
