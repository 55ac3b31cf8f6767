package eventstore

import (
	"errors"
	"strconv"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/sluicehq/sluice/shared/envelope"
)

func batchOf(aggID string, n int) []envelope.Envelope {
	out := make([]envelope.Envelope, n)
	for i := range out {
		out[i] = domainEvent("Device", aggID, map[string]any{"i": i})
	}
	return out
}

// batchErr returns a checker of an AppendBatch outcome: the batch's error
// (nil: stored), failing t unless every result agrees.
func batchErr(t *testing.T) func(rs []Result, err error) error {
	return func(rs []Result, err error) error { t.Helper(); return checkBatch(t, rs, err) }
}

func checkBatch(t *testing.T, rs []Result, err error) error {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	var first error
	for _, r := range rs {
		if r.Err != nil && first == nil {
			first = r.Err
		}
	}
	for i, r := range rs {
		if (r.Err == nil) != (first == nil) {
			t.Fatalf("result %d: %s, but another result is %v: a batch is all or nothing", i, describe(r), first)
		}
	}
	return first
}

// An atomic batch is stored whole, at consecutive sequences, or not at all
// — also when an envelope in its middle fails — and a retry of it replays.
func TestAppendBatchAllOrNothing(t *testing.T) {
	e := newEnv(t)
	s := e.store(t, testConfig())
	ctx := ctxT(t)
	first := batchOf("d-1", 3)
	if err := batchErr(t)(s.AppendBatch(ctx, Expectation{Kind: ExpectNoStream}, first...)); err != nil {
		t.Fatal(err)
	}
	reused := mustAppend(t, s, domainEvent("Device", "d-other", 1))[0].Event.Envelope
	reused.Data = []byte(`{"changed":true}`) // same event_id, other content
	reused.SequenceNumber, reused.Position = 0, 0
	stored := map[string]bool{reused.EventID: true}
	for _, env := range first {
		stored[env.EventID] = true
	}

	cases := []struct {
		name   string
		expect Expectation
		envs   func() []envelope.Envelope
		check  func(error) bool
	}{
		{"conflicting expectation", Expectation{Kind: ExpectSequence, Seq: 2}, func() []envelope.Envelope { return batchOf("d-1", 2) },
			func(err error) bool { var c *BatchConflictError; return errors.As(err, &c) && c.ActualSeq == 3 }},
		{"no_stream on a stream", Expectation{Kind: ExpectNoStream}, func() []envelope.Envelope { return batchOf("d-1", 2) },
			func(err error) bool { var c *BatchConflictError; return errors.As(err, &c) && c.ActualSeq == 3 }},
		{"exists on no stream", Expectation{Kind: ExpectExists}, func() []envelope.Envelope { return batchOf("d-none", 2) },
			func(err error) bool { var c *BatchConflictError; return errors.As(err, &c) && c.ActualSeq == 0 }},
		{"reused event_id in the middle", Expectation{}, func() []envelope.Envelope {
			b := batchOf("d-other", 3)
			b[1] = reused
			return b
		}, func(err error) bool { var m *IdempotencyMismatchError; return errors.As(err, &m) }},
		{"stored and new mixed", Expectation{}, func() []envelope.Envelope {
			return append([]envelope.Envelope{first[0]}, batchOf("d-1", 1)...)
		}, func(err error) bool { var p *PartialBatchError; return errors.As(err, &p) }},
		{"invalid envelope in the middle", Expectation{}, func() []envelope.Envelope {
			b := batchOf("d-1", 3)
			b[1].EventType = "not valid"
			return b
		}, func(err error) bool { var v *envelope.ValidationError; return errors.As(err, &v) }},
		{"two aggregates", Expectation{}, func() []envelope.Envelope { return append(batchOf("d-1", 1), batchOf("d-2", 1)...) },
			func(err error) bool { var v *envelope.ValidationError; return errors.As(err, &v) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := snapshot(t, e.pool)
			envs := tc.envs()
			err := batchErr(t)(s.AppendBatch(ctx, tc.expect, envs...))
			if err == nil || !tc.check(err) {
				t.Fatalf("err = %v", err)
			}
			after := snapshot(t, e.pool)
			if len(after.appends) != len(before.appends) || after.head != before.head {
				t.Fatalf("a failed batch wrote: %d rows → %d, head %d → %d", len(before.appends), len(after.appends), before.head, after.head)
			}
			for _, env := range envs {
				if !stored[env.EventID] && rowState(t, e.pool, env.EventID) != "none" {
					t.Fatalf("event %s of a failed batch has a row", env.EventID)
				}
			}
		})
	}

	// A retry of the stored batch replays it, whatever its expectation.
	rs, err := s.AppendBatch(ctx, Expectation{Kind: ExpectNoStream}, first...)
	if err := checkBatch(t, rs, err); err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		if !r.Duplicate || r.Event.Envelope.SequenceNumber != int64(i+1) {
			t.Fatalf("retry result %d: %s, want the stored seq %d as a duplicate", i, describe(r), i+1)
		}
	}
	evs, err := s.Stream(ctx, "Device", "d-1", 1, 0, "")
	if err != nil || len(evs) != 3 {
		t.Fatalf("stream: %d events, %v", len(evs), err)
	}
}

// 50 writers race batches onto one aggregate, each expecting the last
// sequence it knows (from its last conflict): per expected sequence exactly
// one wins, and the stream is gap-free.
func TestAppendBatchConcurrentExpectations(t *testing.T) {
	e := newEnv(t)
	s := e.store(t, testConfig())
	ctx := ctxT(t)
	const writers, rounds, size = 50, 2, 3
	var mu sync.Mutex
	winners := map[int64]int{}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				var cur int64 // a writer learns the head from its conflicts
				for {
					b := batchOf("race", size)
					for i := range b {
						b[i].EventID = uuid.NewString()
						b[i].Data = []byte(`{"w":` + strconv.Itoa(w) + `}`)
					}
					rs, err := s.AppendBatch(ctx, Expectation{Kind: ExpectSequence, Seq: cur}, b...)
					if err != nil {
						t.Error(err)
						return
					}
					var c *BatchConflictError
					if errors.As(rs[0].Err, &c) {
						if c.ActualSeq == cur {
							t.Errorf("conflict at %d with actual %d", cur, c.ActualSeq)
						}
						cur = c.ActualSeq
						continue
					}
					if rs[0].Err != nil {
						t.Error(rs[0].Err)
						return
					}
					for i, r := range rs {
						if r.Err != nil || r.Event.Envelope.SequenceNumber != cur+int64(i)+1 {
							t.Errorf("winner at %d: result %d %s", cur, i, describe(r))
						}
					}
					mu.Lock()
					winners[cur]++
					mu.Unlock()
					break
				}
			}
		}()
	}
	wg.Wait()
	if len(winners) != writers*rounds {
		t.Fatalf("%d winning expectations, want %d", len(winners), writers*rounds)
	}
	for seq, n := range winners {
		if n != 1 || seq%size != 0 {
			t.Fatalf("expected_seq %d won %d times", seq, n)
		}
	}
	evs, err := s.Stream(ctx, "Device", "race", 1, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	for i, ev := range evs {
		if ev.Envelope.SequenceNumber != int64(i+1) {
			t.Fatalf("event %d has sequence %d: a gap", i, ev.Envelope.SequenceNumber)
		}
	}
	if len(evs) != writers*rounds*size {
		t.Fatalf("%d events, want %d", len(evs), writers*rounds*size)
	}
}
