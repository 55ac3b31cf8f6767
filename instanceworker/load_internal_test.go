package instanceworker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/shared/envelope"
)

// slotStore is an aggregate's domain stream in memory, by slot; it counts
// the events its Stream returns.
type slotStore struct {
	events       map[int64]eventstore.Event
	calls, reads int
}

func (s *slotStore) Stream(_ context.Context, _, _ string, from, to int64, kind envelope.Kind) ([]eventstore.Event, error) {
	if kind != envelope.KindDomain {
		return nil, fmt.Errorf("kind %q: the worker reads domain events", kind)
	}
	s.calls++
	var out []eventstore.Event
	for k := max(from, 1); k <= to; k++ {
		if ev, ok := s.events[k]; ok {
			out = append(out, ev)
		}
	}
	s.reads += len(out)
	return out, nil
}

func (s *slotStore) Append(context.Context, ...envelope.Envelope) ([]eventstore.Result, error) {
	return nil, errors.New("not used")
}

func (s *slotStore) Command(context.Context, string, string, int64) (eventstore.Event, error) {
	return eventstore.Event{}, errors.New("not used")
}

func (s *slotStore) ByEventID(context.Context, string) (eventstore.Event, error) {
	return eventstore.Event{}, errors.New("not used")
}

// fullFold is the reference: the fold of every domain event below slot k.
func (s *slotStore) fullFold(k int64) current {
	var cur current
	for n := int64(1); n < k; n++ {
		if ev, ok := s.events[n]; ok {
			cur.fold([]eventstore.Event{ev})
		}
	}
	return cur
}

// TestLoadWhenTheDocumentIsAhead: a command delivered again after it was
// applied (its document already at or past its slot k) is decided on the
// state before k read from the last domain events below k, not from a fold
// of the whole stream (docs/instanceworker.md#processing-command-at-slot-k):
// the same state as the fold, and as many events read on an aggregate of
// 10,000 slots as on a short one of the same shape. Counted, not timed.
func TestLoadWhenTheDocumentIsAhead(t *testing.T) {
	const agg = "shop:orders:o1"
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	event := func(slot int64, evType string) eventstore.Event {
		state := fmt.Sprintf(`{"v":%d}`, slot)
		if evType == InstanceDeleted {
			state = `{}`
		}
		return eventstore.Event{Envelope: envelope.Envelope{EventType: evType, Kind: envelope.KindDomain,
			AggregateType: envelope.AggregateTypeInstance, AggregateID: agg, SequenceNumber: slot,
			Data: json.RawMessage(state), OccurredAt: envelope.NewTimestamp(t0.Add(time.Duration(slot) * time.Second))}}
	}
	// A scenario is an aggregate of n slots: the domain event of each
	// slot (none: a rejected command), the redelivered command's slot k
	// and the document's slot.
	type scenario struct {
		name  string
		small int64 // the shortest n of its shape whose read windows (1, 4, 16, … slots) are not cut at slot 1
		// fallback: a create at or after k; the stream below k is folded
		fallback bool
		build    func(n int64) (events map[int64]string, k, doc int64)
	}
	updates := func(n int64) map[int64]string {
		m := map[int64]string{1: InstanceCreated}
		for s := int64(2); s <= n; s++ {
			m[s] = InstanceUpdated
		}
		return m
	}
	for _, sc := range []scenario{
		{name: "the last update delivered again", small: 2, build: func(n int64) (map[int64]string, int64, int64) {
			return updates(n), n, n
		}},
		{name: "the document three slots further", small: 5, build: func(n int64) (map[int64]string, int64, int64) {
			return updates(n), n - 3, n
		}},
		{name: "rejected commands below k", small: 30, build: func(n int64) (map[int64]string, int64, int64) {
			m := updates(n)
			for s := n - 8; s < n; s++ {
				delete(m, s) // no domain event: rejected
			}
			return m, n, n
		}},
		{name: "an event of another type below k", small: 6, build: func(n int64) (map[int64]string, int64, int64) {
			m := updates(n)
			m[n-1] = "NOTE_ADDED"
			return m, n, n
		}},
		{name: "a delete delivered again", small: 3, build: func(n int64) (map[int64]string, int64, int64) {
			m := updates(n)
			m[n] = InstanceDeleted
			return m, n, n
		}},
		{name: "a delete last below k, an update after it", small: 6, build: func(n int64) (map[int64]string, int64, int64) {
			m := updates(n) // the update after a delete: a domain event appended directly
			m[n-1] = InstanceDeleted
			return m, n, n
		}},
		{name: "created again at k", small: 4, fallback: true, build: func(n int64) (map[int64]string, int64, int64) {
			m := updates(n)
			m[n-1], m[n] = InstanceDeleted, InstanceCreated
			return m, n, n
		}},
		{name: "the first create delivered again", small: 1, fallback: true, build: func(n int64) (map[int64]string, int64, int64) {
			return map[int64]string{n: InstanceCreated}, n, n
		}},
	} {
		t.Run(sc.name, func(t *testing.T) {
			reads := map[int64][2]int{}
			for _, n := range []int64{sc.small, 10_000} {
				types, k, docSlot := sc.build(n)
				st := &slotStore{events: map[int64]eventstore.Event{}}
				for s, typ := range types {
					st.events[s] = event(s, typ)
				}
				// The document at docSlot, as the worker wrote it.
				atDoc := st.fullFold(docSlot + 1)
				doc := readmodel.GetResult{Meta: readmodel.Meta{SequenceNumber: docSlot, CreatedAt: atDoc.createdAt, Deleted: atDoc.deleted},
					State: atDoc.state}
				w := &Worker{store: st}
				c := command{env: envelope.Envelope{EventType: UpdateInstance, Kind: envelope.KindCommand,
					AggregateType: envelope.AggregateTypeInstance, AggregateID: agg, SequenceNumber: k}}
				got, err := w.loadFrom(context.Background(), c, doc)
				if err != nil {
					t.Fatal(err)
				}
				want := st.fullFold(k)
				if got.exists != want.exists || got.deleted != want.deleted || string(got.state) != string(want.state) || got.createdAt != want.createdAt {
					t.Errorf("%d slots: state before %d = %+v, the fold of the stream says %+v", n, k, got, want)
				}
				reads[n] = [2]int{st.reads, st.calls}
			}
			t.Logf("%d slots: %d events in %d reads; 10,000 slots: %d events in %d reads",
				sc.small, reads[sc.small][0], reads[sc.small][1], reads[10_000][0], reads[10_000][1])
			if !sc.fallback && reads[10_000] != reads[sc.small] {
				t.Errorf("read %d events in %d reads on 10,000 slots, %d in %d on %d: the work grows with the aggregate",
					reads[10_000][0], reads[10_000][1], reads[sc.small][0], reads[sc.small][1], sc.small)
			}
		})
	}
}
