package dlq_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/dlq"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/kafka"
	"github.com/sluicehq/sluice/shared/recordformat"
	"github.com/sluicehq/sluice/worker"
)

// A CloudEvents record a handler failed on for good is dead-lettered with
// its ce_ headers and the runtime's reason headers; the letter names the
// event_id its (source, id) derive; redrive re-produces it byte for byte,
// and the worker, whose handler now succeeds, decodes and finishes it: the
// registry row is done, the handler ran on the same envelope twice (the
// failure and the success), never more.
func TestRedriveOfCloudEventsRecord(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	e := envelope.Envelope{EventID: envelope.CloudEventID("/shop", "order-9-placed"), EventType: "com.example.order.placed",
		Kind: envelope.KindDomain, AggregateType: "Order", AggregateID: "order-9", SequenceNumber: 1, Position: 77,
		OccurredAt: envelope.NewTimestamp(time.Unix(1_800_000_000, 0)), Data: json.RawMessage(`{"total":9}`),
		Metadata: envelope.Metadata{"ce_id": json.RawMessage(`"order-9-placed"`), "ce_source": json.RawMessage(`"/shop"`)}, SchemaVersion: 1}
	line, err := envelope.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	orig := recordformat.Encode(recordformat.CloudEvents, e, line)
	orig.Topic = f.orig
	f.produce(t, orig)

	var failing atomic.Bool
	failing.Store(true)
	var mu sync.Mutex
	var handled []envelope.Envelope
	c, err := worker.New(worker.Config{
		Kafka: kafka.Config{Brokers: f.k.Brokers}, Topic: f.orig, Group: f.orig + "-g", DLQTopic: f.topic, HandlerName: handler,
		Policy: claim.SkipStale,
	}, worker.Deps{Registry: f.reg, Logger: slog.New(slog.DiscardHandler),
		Handler: worker.HandlerFunc(func(_ context.Context, r *worker.Record) (claim.Outcome, error) {
			mu.Lock()
			handled = append(handled, r.Envelope)
			mu.Unlock()
			if failing.Load() {
				return claim.Outcome{}, worker.Permanent(errors.New("order service refuses it"))
			}
			return claim.Applied(), nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	testenv.RunInBackground(t, "worker", c.Run)
	testenv.WaitFor(t, 30*time.Second, "the dead letter", func() bool { return len(testenv.ReadTopic(t, f.k.Brokers, f.topic)) == 1 })
	testenv.WaitFor(t, 30*time.Second, "the dead registry row", func() bool {
		rows, err := f.reg.Get(ctx, e.EventID)
		return err == nil && len(rows) == 1 && rows[0].Status == claim.StatusDead
	})

	q := f.queue(t)
	sh, err := q.Show(ctx, dlq.Ref{Partition: -1, Offset: 0})
	if err != nil || sh.OriginalErr != nil {
		t.Fatalf("show: %+v %v", sh, err)
	}
	l := sh.Letter
	if l.EventID() != e.EventID || l.Record.ErrorClass != worker.ClassPermanent || l.Record.Handler != handler {
		t.Fatalf("letter: event %q class %q handler %q", l.EventID(), l.Record.ErrorClass, l.Record.Handler)
	}
	reasons := map[string]string{}
	for _, h := range l.Headers {
		reasons[h.Key] = string(h.Value)
	}
	if reasons["sluice-error-class"] != worker.ClassPermanent || reasons["sluice-handler"] != handler {
		t.Fatalf("the letter's reason headers: %v", reasons)
	}
	if !bytes.Equal(sh.Original.Value, orig.Value) || recordformat.Detect(sh.Original.Headers) != recordformat.CloudEvents {
		t.Fatalf("the original in the letter: %s %v", sh.Original.Value, sh.Original.Headers)
	}

	failing.Store(false)
	rr, err := q.Redrive(ctx, dlq.RedriveOptions{Ref: &dlq.Ref{Partition: 0, Offset: 0}})
	if err != nil || rr.Redriven != 1 {
		t.Fatalf("redrive: %+v %v", rr, err)
	}
	recs := testenv.ReadTopic(t, f.k.Brokers, f.orig)
	if len(recs) != 2 || !bytes.Equal(recs[1].Value, orig.Value) || !bytes.Equal(recs[1].Key, orig.Key) || len(recs[1].Headers) != len(orig.Headers) {
		t.Fatalf("re-produced: %d records %+v", len(recs), recs)
	}
	for _, h := range orig.Headers { // Letter.Original lists them in key order
		found := false
		for _, g := range recs[1].Headers {
			found = found || (g.Key == h.Key && bytes.Equal(g.Value, h.Value))
		}
		if !found {
			t.Fatalf("header %s=%s not re-produced", h.Key, h.Value)
		}
	}
	testenv.WaitFor(t, 30*time.Second, "the redriven record done", func() bool {
		rows, err := f.reg.Get(ctx, e.EventID)
		return err == nil && len(rows) == 1 && rows[0].Status == claim.StatusDone
	})
	mu.Lock()
	defer mu.Unlock()
	if len(handled) != 2 {
		t.Fatalf("handler ran %d times, want 2 (the failure, then the redrive)", len(handled))
	}
	for _, got := range handled {
		if got.EventID != e.EventID || got.EventType != e.EventType || !bytes.Equal(got.Data, e.Data) || got.Position != 77 {
			t.Fatalf("handler got %+v", got)
		}
	}
	if n := len(testenv.ReadTopic(t, f.k.Brokers, f.topic)); n != 1 {
		t.Fatalf("%d dead letters after the redrive, want 1", n)
	}
}
