package declarative

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/shared/envelope"
)

// notedMemory is Memory with the notes of LocateRound, as the worker's
// DocState keeps them for a round.
type notedMemory struct {
	*Memory
	notes map[string]any
}

func (m *notedMemory) TakeNote(eventID string) (any, bool) {
	v, ok := m.notes[eventID]
	delete(m.notes, eventID)
	return v, ok
}

// sampleEvents reads an example's sample events.
func sampleEvents(t *testing.T, name string) []envelope.Envelope {
	t.Helper()
	f, err := os.Open("../../examples/projections/" + name + ".events.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []envelope.Envelope
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if len(trimSpace(sc.Bytes())) == 0 {
			continue
		}
		e, err := envelope.Parse(sc.Bytes(), envelope.DefaultLimits())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

// oddOrders are order events the key or the updates refuse, and a replay.
func oddOrders() []envelope.Envelope {
	ev := func(i int, data string) envelope.Envelope {
		return envelope.Envelope{EventID: fmt.Sprintf("00000000-0000-4000-9000-%012d", i), EventType: "ORDER_PLACED", Kind: envelope.KindDomain,
			AggregateType: "Order", AggregateID: fmt.Sprintf("x-%d", i), SequenceNumber: 1, Position: int64(i + 1),
			OccurredAt: envelope.NewTimestamp(time.Unix(1_700_000_000+int64(i), 0)), Data: []byte(data), SchemaVersion: 1}
	}
	replay := ev(4, `{"customer_id":"c-1","amount":2}`)
	return []envelope.Envelope{
		ev(1, `{"amount":1}`),                     // no key: null
		ev(2, `{"customer_id":"","amount":1}`),    // empty key
		ev(3, `{"customer_id":7,"amount":"one"}`), // numeric key, amount not a number
		replay, replay, // the second is applied already
		ev(5, `{"customer_id":"c-1","amount":1e300}`),
	}
}

// Apply with the note of LocateRound (the worker's path) equals Apply
// computing everything itself: the same operations, errors and documents,
// for every example and the benchmark's order events.
func TestLocatedApplyEqualsApply(t *testing.T) {
	for _, name := range []string{"order_totals", "device_status", "daily_counts"} {
		t.Run(name, func(t *testing.T) {
			specs, err := LoadFiles("../../examples/projections/" + name + ".yaml")
			if err != nil {
				t.Fatal(err)
			}
			ps, err := Compile(specs)
			if err != nil {
				t.Fatal(err)
			}
			p := ps[0]
			evs := sampleEvents(t, name)
			if name == "order_totals" {
				evs = append(append(evs, benchEvents(3000)...), oddOrders()...)
			}
			ctx := context.Background()
			plain, noted := NewMemory(), &notedMemory{Memory: NewMemory(), notes: map[string]any{}}
			handled := 0
			for i, e := range evs {
				if !p.Handles(e) {
					continue
				}
				handled++
				l, lerr := p.locateEvent(e)
				if lerr == nil {
					noted.notes[e.EventID] = l
				}
				want, werr := p.Apply(ctx, e, plain)
				got, gerr := p.Apply(ctx, e, noted)
				if fmt.Sprint(werr) != fmt.Sprint(gerr) {
					t.Fatalf("event %d: error %v, want %v", i, gerr, werr)
				}
				if lerr != nil && werr == nil {
					t.Fatalf("event %d: Locate failed (%v) but Apply did not", i, lerr)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("event %d:\n got %+v\nwant %+v", i, got, want)
				}
				if len(noted.notes) != 0 {
					t.Fatalf("event %d: the note was not taken", i)
				}
			}
			if handled == 0 {
				t.Fatal("no event handled")
			}
			if !reflect.DeepEqual(plain.Docs, noted.Docs) {
				t.Fatal("the documents differ")
			}
		})
	}
}
