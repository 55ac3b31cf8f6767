package relay

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/eventstore/objstore/filestore"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/recordformat"
)

func TestRouter(t *testing.T) {
	r := NewRouter("c", "e", map[string]TopicRoute{"Invoice": {Commands: "inv.c"}, "Audit": {Events: "audit.e"}})
	withTopic := command("a", 1)
	withTopic.Metadata.SetString(envelope.MetaKafkaTopic, "explicit")
	domain := func(typ string) envelope.Envelope {
		e := command("a", 1)
		e.Kind, e.AggregateType = envelope.KindDomain, typ
		return e
	}
	cmd := func(typ string) envelope.Envelope {
		e := command("a", 1)
		e.AggregateType = typ
		return e
	}
	cases := []struct {
		name string
		env  envelope.Envelope
		want string
	}{
		{"metadata wins", withTopic, "explicit"},
		{"command default", cmd("Order"), "c"},
		{"domain default", domain("Order"), "e"},
		{"command override", cmd("Invoice"), "inv.c"},
		{"domain of a command override keeps default", domain("Invoice"), "e"},
		{"domain override", domain("Audit"), "audit.e"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := r.Topic(c.env); got != c.want {
				t.Errorf("topic %q, want %q", got, c.want)
			}
		})
	}
	if got, want := len(r.Topics()), 4; got != want {
		t.Errorf("bootstrap topics %v, want %d", r.Topics(), want)
	}
}

func TestRecordHeaders(t *testing.T) {
	r := NewRouter("c", "e", nil)
	e := command("agg 1", 1)
	e.SequenceNumber, e.Position = 7, 42
	e.Metadata.SetString(envelope.MetaOrderingKey, "ok")
	rec := r.Record(eventstore.Event{Envelope: e, Raw: []byte(`{"x":1}`)}, "")
	got := map[string]string{}
	for _, h := range rec.Headers {
		got[h.Key] = string(h.Value)
	}
	want := map[string]string{"event_id": e.EventID, "event_type": "DO_SOMETHING", "kind": "command", "aggregate_type": "Order",
		"aggregate_id": "agg 1", "sequence_number": "7", "position": "42", "content-type": "application/json"}
	if !reflect.DeepEqual(got, want) || string(rec.Key) != "ok" || string(rec.Value) != `{"x":1}` || rec.Topic != "c" {
		t.Errorf("record %s key %q value %q headers %v", rec.Topic, rec.Key, rec.Value, got)
	}
}

// A router WithFormat(CloudEvents) builds the binary-mode CloudEvents
// record of the same event: the data as value, the same key and topic,
// ce_ headers; the router it was made from still builds envelopes.
func TestRecordCloudEventsFormat(t *testing.T) {
	r := NewRouter("c", "e", nil)
	ce := r.WithFormat(recordformat.CloudEvents)
	e := command("agg 1", 1)
	e.SequenceNumber, e.Position = 7, 42
	line, err := envelope.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	ev := eventstore.Event{Envelope: e, Raw: line}
	rec := ce.Record(ev, "")
	got, err := recordformat.Decode(rec, envelope.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Topic != "c" || string(rec.Value) != string(e.Data) || string(rec.Key) != string(envelope.KafkaKey(e)) ||
		recordformat.Detect(rec.Headers) != recordformat.CloudEvents || got.EventID != e.EventID || got.Position != 42 {
		t.Errorf("record %s key %q value %s headers %v", rec.Topic, rec.Key, rec.Value, rec.Headers)
	}
	if r.Format() != recordformat.Envelope || recordformat.Detect(r.Record(ev, "x").Headers) != recordformat.Envelope {
		t.Error("WithFormat changed the router it was made from")
	}
}

func TestIDSetBounded(t *testing.T) {
	s := newIDSet(3)
	for _, id := range []string{"a", "b", "a", "c", "d"} {
		s.add(id)
	}
	if s.len() != 3 || s.has("a") || !s.has("d") || !reflect.DeepEqual(s.recent(2), []string{"c", "d"}) {
		t.Errorf("set len %d has(a) %v recent %v", s.len(), s.has("a"), s.recent(2))
	}
	big := newIDSet(10)
	for i := range 5000 {
		big.add(string(rune('a'+i%26)) + time.Duration(i).String())
	}
	if big.len() != 10 || len(big.recent(100)) != 10 {
		t.Errorf("big set len %d recent %d", big.len(), len(big.recent(100)))
	}
}

func TestAdvance(t *testing.T) {
	at := time.Unix(100, 0)
	cases := []struct {
		name      string
		done      []int64
		abandoned []int64
		wantPos   int64
		wantGaps  []Gap
	}{
		{"nothing", nil, nil, 10, nil},
		{"contiguous", []int64{11, 12, 13}, nil, 13, nil},
		{"hole stops it", []int64{11, 13}, nil, 11, nil},
		{"abandoned passed into pending", []int64{11, 14}, []int64{12, 13}, 14, []Gap{{12, 13, at}}},
		{"abandoned not yet passed", []int64{14}, []int64{12}, 10, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ls := newLeaderState(1, Checkpoint{Position: 10}, "", 10)
			for _, p := range c.done {
				ls.markDone(p)
			}
			for _, p := range c.abandoned {
				ls.addAbandoned(p, at)
			}
			ls.advance()
			if ls.cp.Position != c.wantPos || !reflect.DeepEqual(ls.cp.PendingGaps, c.wantGaps) {
				t.Errorf("position %d gaps %+v, want %d %+v", ls.cp.Position, ls.cp.PendingGaps, c.wantPos, c.wantGaps)
			}
		})
	}
}

func TestSubtract(t *testing.T) {
	g := Gap{First: 10, Last: 15}
	cases := []struct {
		drop []int64
		want []Gap
	}{
		{nil, []Gap{{10, 15, time.Time{}}}},
		{[]int64{10, 11, 12, 13, 14, 15}, nil},
		{[]int64{12}, []Gap{{10, 11, time.Time{}}, {13, 15, time.Time{}}}},
		{[]int64{10, 15}, []Gap{{11, 14, time.Time{}}}},
	}
	for _, c := range cases {
		if got := subtract(g, c.drop); !reflect.DeepEqual(got, c.want) {
			t.Errorf("subtract %v: %+v, want %+v", c.drop, got, c.want)
		}
	}
}

// TestCheckpointConditionalWrite: of two writers holding the same version,
// only the first wins; creating twice fails.
func TestCheckpointConditionalWrite(t *testing.T) {
	b, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cps := NewCheckpointStore(b, "checkpoints/x.json")
	tag, err := cps.Save(ctx, Checkpoint{Position: 1, RelayEpoch: 1}, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cps.Save(ctx, Checkpoint{Position: 1, RelayEpoch: 2}, ""); !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatalf("second create: %v, want ErrPreconditionFailed", err)
	}
	if _, err := cps.Save(ctx, Checkpoint{Position: 5, RelayEpoch: 2}, tag); err != nil {
		t.Fatal(err)
	}
	if _, err := cps.Save(ctx, Checkpoint{Position: 6, RelayEpoch: 1}, tag); !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatalf("stale write: %v, want ErrPreconditionFailed", err)
	}
	cp, _, found, err := cps.Load(ctx)
	if err != nil || !found || cp.Position != 5 || cp.RelayEpoch != 2 {
		t.Fatalf("final %+v found %v err %v", cp, found, err)
	}
}
