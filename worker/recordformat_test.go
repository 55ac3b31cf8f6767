package worker

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/recordformat"
)

// thingEvent is a stored domain event of aggregate thing/agg and its line.
func thingEvent(t *testing.T, agg string, seq, pos int64) (envelope.Envelope, []byte) {
	t.Helper()
	e := envelope.Envelope{EventID: uuid.NewString(), EventType: "com.example.thing.happened", Kind: envelope.KindDomain,
		AggregateType: "thing", AggregateID: agg, SequenceNumber: seq, Position: pos,
		OccurredAt: envelope.NewTimestamp(time.Unix(1_700_000_000, 0)), Data: json.RawMessage(`{"n":` + jsonInt(pos) + `}`),
		Metadata: envelope.Metadata{"correlation_id": json.RawMessage(`"c-1"`), "free": json.RawMessage(`[1,{"x":null}]`)}, SchemaVersion: 2}
	raw, err := envelope.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return e, raw
}

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }

// One partition holding envelope records and CloudEvents records of one
// aggregate, interleaved as during a rolling switch of the record format,
// and two invalid CloudEvents records: the handler gets every valid event
// exactly once, as the envelope that was encoded; each invalid record is
// dead-lettered with a reason naming the attribute, and the partition goes
// on past it.
func TestBothRecordFormatsInOnePartition(t *testing.T) {
	brokers, topic, produce := oneTopic(t, "formats-")
	type sent struct {
		e      envelope.Envelope
		format recordformat.Format
	}
	var want []sent
	var recs []*kgo.Record
	formats := []recordformat.Format{recordformat.Envelope, recordformat.Envelope, recordformat.CloudEvents,
		recordformat.Envelope, recordformat.CloudEvents, recordformat.CloudEvents}
	for i, f := range formats {
		e, line := thingEvent(t, "t-1", int64(i+1), int64(100+i))
		want = append(want, sent{e, f})
		recs = append(recs, recordformat.Encode(f, e, line))
	}
	bad := func(mutate func(r *kgo.Record)) *kgo.Record {
		e, line := thingEvent(t, "t-2", 1, 999)
		r := recordformat.Encode(recordformat.CloudEvents, e, line)
		mutate(r)
		return r
	}
	noType := bad(func(r *kgo.Record) {
		r.Headers = slices.DeleteFunc(r.Headers, func(h kgo.RecordHeader) bool { return h.Key == "ce_type" })
	})
	notJSON := bad(func(r *kgo.Record) { r.Value = []byte("not json") })
	// The invalid records stand between valid ones.
	recs = slices.Insert(recs, 3, noType)
	recs = slices.Insert(recs, 5, notJSON)
	produce(recs...)

	var mu sync.Mutex
	seen := map[string][]envelope.Envelope{}
	h := HandlerFunc(func(_ context.Context, r *Record) (claim.Outcome, error) {
		mu.Lock()
		defer mu.Unlock()
		seen[r.Envelope.EventID] = append(seen[r.Envelope.EventID], r.Envelope)
		return claim.Applied(), nil
	})
	c, _ := startConsumer(t, brokers, topic, Config{Policy: claim.WaitForPredecessor}, Deps{Registry: realRegistry(t, "w1", 10*time.Second), Handler: h})
	testenv.WaitFor(t, 30*time.Second, "the whole partition committed", func() bool { return committedOffset(c, topic) == int64(len(recs)) })

	mu.Lock()
	defer mu.Unlock()
	if len(seen) != len(want) {
		t.Fatalf("handler saw %d events, want %d", len(seen), len(want))
	}
	for _, s := range want {
		got := seen[s.e.EventID]
		if len(got) != 1 {
			t.Fatalf("%s event %s handled %d times", s.format, s.e.EventID, len(got))
		}
		if !reflect.DeepEqual(got[0], s.e) {
			t.Fatalf("%s event decoded as\n%+v\nwant\n%+v", s.format, got[0], s.e)
		}
	}
	dl := readTopic(t, brokers, topic+".dlq")
	if len(dl) != 2 {
		t.Fatalf("%d dead letters, want 2", len(dl))
	}
	for i, attr := range []string{"ce_type", "data"} {
		var d DLQRecord
		if err := json.Unmarshal(dl[i].Value, &d); err != nil {
			t.Fatal(err)
		}
		if d.ErrorClass != ClassParse || !strings.Contains(d.Error, "cloudevents record: "+attr+":") {
			t.Errorf("dead letter %d: class %s error %q, want a parse error naming %s", i, d.ErrorClass, d.Error, attr)
		}
		if d.OriginalHeaders["ce_specversion"] != "1.0" || d.OriginalHeaders["ce_position"] != "999" {
			t.Errorf("dead letter %d keeps the original's headers: %v", i, d.OriginalHeaders)
		}
	}
}

// A CloudEvents record too large to embed: its pointer-form dead letter
// names the original by the event_id and position its ce_ headers carry.
func TestPointerDeadLetterOfCloudEventsRecord(t *testing.T) {
	e, line := thingEvent(t, "t-3", 4, 4242)
	r := recordformat.Encode(recordformat.CloudEvents, e, line)
	r.Value = []byte("not json")
	d := deadLetter{topic: "t.dlq", handler: "h", rec: r, errText: "parse: x", class: ClassParse, attempts: 1}
	out, err := d.pointer(truncSize)
	if err != nil {
		t.Fatal(err)
	}
	var got DLQRecord
	if err := json.Unmarshal(out.Value, &got); err != nil {
		t.Fatal(err)
	}
	if got.OriginalEventID != e.EventID || got.OriginalPosition != 4242 {
		t.Fatalf("pointer names event %q position %d, want %s 4242", got.OriginalEventID, got.OriginalPosition, e.EventID)
	}
}
