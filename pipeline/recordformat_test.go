package pipeline_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/dlq"
	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/observability"
	"github.com/sluicehq/sluice/shared/recordformat"
)

// formatsProbe is a projection of Order events that remembers every
// envelope it projects and writes one document per event; while failing
// is set it refuses (permanently) an event whose data says "fail".
type formatsProbe struct {
	mu      sync.Mutex
	seen    map[string][]envelope.Envelope
	failing atomic.Bool
}

func (*formatsProbe) Name() string                        { return "formats" }
func (*formatsProbe) Version() int                        { return 1 }
func (*formatsProbe) SequenceGuard() claim.Policy         { return claim.Unguarded }
func (*formatsProbe) Template() projectionworker.Template { return projectionworker.Template{} }
func (*formatsProbe) Handles(e envelope.Envelope) bool {
	return e.Kind == envelope.KindDomain && e.AggregateType == "Order"
}

func (p *formatsProbe) Project(e envelope.Envelope) ([]projectionworker.Op, error) {
	p.mu.Lock()
	p.seen[e.EventID] = append(p.seen[e.EventID], e)
	p.mu.Unlock()
	if p.failing.Load() && bytes.Contains(e.Data, []byte(`"fail"`)) {
		return nil, errors.New("the order service refuses it")
	}
	doc, err := json.Marshal(map[string]any{"event_type": e.EventType, "sequence_number": e.SequenceNumber, "position": e.Position,
		"data": e.Data, "correlation_id": e.Metadata.CorrelationID()})
	return []projectionworker.Op{{Scope: "shop", ID: envelope.ESDocumentID(e.EventID), Create: true, Doc: doc}}, err
}

func (p *formatsProbe) calls(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.seen[id])
}

// A deployment switches KAFKA_RECORD_FORMAT from envelope to cloudevents
// with a rolling restart of its relay while the projection worker runs on:
// the events topic then holds both kinds of records, an aggregate's in one
// partition, and the projection gets every event exactly once, as stored,
// whichever format carried it. An invalid CloudEvents record is
// dead-lettered with the attribute named and the worker goes on; a
// CloudEvents record the projection refused is redriven from the DLQ and
// projected.
func TestRollingSwitchOfTheRecordFormat(t *testing.T) {
	ctx := context.Background()
	e := pipelinetest.Start(t, pipelinetest.Options{Services: []string{pipeline.API}})
	probe := &formatsProbe{seen: map[string][]envelope.Envelope{}}
	pw, err := pipeline.Build(ctx, pipeline.ProjectionWorker, e.Deps,
		pipeline.Options{Projections: []projectionworker.Spec{{Projection: probe}}})
	if err != nil {
		t.Fatal(err)
	}
	testenv.RunInBackground(t, "projection worker", pw.Run, pw.Close)

	// runRelay runs a relay of the pipeline's configuration with
	// KAFKA_RECORD_FORMAT=format (its own metrics and health: a new
	// process) until stop.
	runRelay := func(format string) (stop func()) {
		cfg := *e.Config
		cfg.Kafka.RecordFormat = format
		d := e.Deps
		d.Config, d.Metrics, d.Health = &cfg, observability.NewProcessRegistry("test", "test"), observability.NewHealth()
		r, err := pipeline.Build(ctx, pipeline.Relay, d, pipeline.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return testenv.RunInBackground(t, "relay ("+format+")", r.Run, r.Close)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	post := func(agg, contentType, body string) {
		t.Helper()
		resp, err := client.Post(e.APIURL+"/v1/streams/Order/"+agg+"/events", contentType, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("append to %s: %d %s", agg, resp.StatusCode, b)
		}
	}
	appendSome := func(round string, data string) {
		for _, agg := range []string{"o-1", "o-2", "o-3"} {
			post(agg, "application/json", fmt.Sprintf(`{"events":[{"event_type":"OrderPlaced","data":%s,"metadata":{"correlation_id":"%s"}},`+
				`{"event_type":"order.paid.v1","data":{"round":"%s"}}]}`, data, round, round))
			post(agg, "application/cloudevents+json", fmt.Sprintf(`{"specversion":"1.0","id":"%s-%s","source":"/shop","type":"com.example.order.shipped",`+
				`"time":"2026-11-21T10:00:00Z","comexampletenant":"t1","data":{"round":"%s"}}`, agg, round, round))
		}
	}
	topic := e.Config.Kafka.EventsTopic
	published := func(n int) func() bool {
		return func() bool { return len(testenv.ReadTopic(t, e.Kafka.Brokers, topic)) >= n }
	}

	// Before the switch: envelope records.
	stopA := runRelay("envelope")
	appendSome("before", `{"total":1}`)
	pipelinetest.WaitFor(t, 30*time.Second, "9 envelope records", published(9))
	stopA()
	// The relay restarts with the new setting; the worker runs on.
	stopB := runRelay("cloudevents")
	defer stopB()
	appendSome("after", `{"total":2}`)
	pipelinetest.WaitFor(t, 30*time.Second, "9 more records, in the CloudEvents format", published(18))

	stored := storedEvents(t, e.Store)
	if len(stored) != 18 {
		t.Fatalf("%d events stored, want 18", len(stored))
	}
	pipelinetest.WaitFor(t, 30*time.Second, "every event projected", func() bool {
		for id := range stored {
			if probe.calls(id) == 0 {
				return false
			}
		}
		return true
	})

	// Kafka: each event once, the first nine as envelopes, the others as
	// CloudEvents; every aggregate's partition holds both.
	recs := testenv.ReadTopic(t, e.Kafka.Brokers, topic)
	byID := map[string]*kgo.Record{}
	formats := map[string]map[recordformat.Format]bool{} // partition's aggregate → formats
	for _, r := range recs {
		env, err := recordformat.Decode(r, envelope.Limits{})
		if err != nil {
			t.Fatalf("record %d/%d: %v", r.Partition, r.Offset, err)
		}
		if byID[env.EventID] != nil {
			t.Fatalf("event %s published twice", env.EventID)
		}
		byID[env.EventID] = r
		f := recordformat.Detect(r.Headers)
		if want := map[bool]recordformat.Format{true: recordformat.Envelope, false: recordformat.CloudEvents}[env.Position <= 9]; f != want {
			t.Fatalf("position %d published as %s, want %s", env.Position, f, want)
		}
		// The CloudEvent's own extension leaves as it came in: its own
		// attribute, not inside ce_metadata.
		if f == recordformat.CloudEvents && env.EventType == "com.example.order.shipped" {
			if v, ok := headerOf(r, "ce_comexampletenant"); !ok || v != "t1" {
				t.Fatalf("position %d: header ce_comexampletenant = %q (present %v), want \"t1\"", env.Position, v, ok)
			}
		}
		k := fmt.Sprintf("%s@%d", env.AggregateID, r.Partition)
		if formats[k] == nil {
			formats[k] = map[recordformat.Format]bool{}
		}
		formats[k][f] = true
	}
	if len(formats) != 3 {
		t.Fatalf("aggregates by partition: %v, want each aggregate in one partition", formats)
	}
	for k, fs := range formats {
		if !fs[recordformat.Envelope] || !fs[recordformat.CloudEvents] {
			t.Fatalf("%s holds %v, want both formats", k, fs)
		}
	}
	// The projection: each event exactly once, equal to the stored one.
	for id, want := range stored {
		if n := probe.calls(id); n != 1 {
			t.Fatalf("event %s (position %d) projected %d times", id, want.Position, n)
		}
		probe.mu.Lock()
		got := probe.seen[id][0]
		probe.mu.Unlock()
		if g, w := mustMarshal(t, got), mustMarshal(t, want); g != w {
			t.Fatalf("projected event differs from the stored one (%s record):\n got %s\nwant %s",
				recordformat.Detect(byID[id].Headers), g, w)
		}
	}
	pipelinetest.WaitFor(t, 30*time.Second, "18 documents", func() bool {
		return esCount(t, client, e.ESURL+"/sluice_shop_formats/_count") == 18
	})

	// An invalid CloudEvents record (no ce_type) is dead-lettered naming
	// the attribute; the worker goes on with the next event.
	bad := cloneRecord(byID[anyCloudEventsID(t, byID)])
	bad.Headers = dropKey(bad.Headers, "ce_type")
	if err := produce(ctx, e, bad); err != nil {
		t.Fatal(err)
	}
	q, err := dlq.New(dlq.Config{Topic: e.Config.Kafka.EventsDLQTopic, Kafka: e.Config.Kafka, ReplicationFactor: 1, By: "test"},
		dlq.Deps{Registry: newRegistry(t, e)})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	pipelinetest.WaitFor(t, 30*time.Second, "the dead letter of the invalid record", func() bool {
		return len(testenv.ReadTopic(t, e.Kafka.Brokers, e.Config.Kafka.EventsDLQTopic)) == 1
	})
	letters, err := q.Letters(ctx, nil)
	if err != nil || len(letters) != 1 || letters[0].Record.ErrorClass != "parse" ||
		!strings.Contains(letters[0].Record.Error, "ce_type") {
		t.Fatalf("dead letter of the invalid record: %+v %v", letters, err)
	}

	// A CloudEvents record the projection refuses goes to the DLQ; once
	// the cause is fixed, redrive projects it.
	probe.failing.Store(true)
	post("o-9", "application/json", `{"events":[{"event_type":"OrderPlaced","data":{"fail":true}}]}`)
	pipelinetest.WaitFor(t, 30*time.Second, "the refused event dead-lettered", func() bool {
		return len(testenv.ReadTopic(t, e.Kafka.Brokers, e.Config.Kafka.EventsDLQTopic)) == 2
	})
	letters, err = q.Letters(ctx, nil)
	if err != nil || len(letters) != 2 {
		t.Fatalf("letters: %d %v", len(letters), err)
	}
	refused := letters[1]
	id := refused.EventID()
	reg := newRegistry(t, e)
	// The runtime marks the row dead once the dead letter is acknowledged.
	pipelinetest.WaitFor(t, 30*time.Second, "the refused event's registry row dead", func() bool {
		rows, err := reg.Get(ctx, id)
		return err == nil && len(rows) == 1 && rows[0].Status == claim.StatusDead
	})
	probe.failing.Store(false)
	// The invalid record names (ce_source, ce_id) an event already done:
	// its letter is skipped, not produced again; the refused one is.
	rr, err := q.Redrive(ctx, dlq.RedriveOptions{All: true})
	if err != nil || rr.Redriven != 1 || rr.Skipped != 1 || rr.Failed != 0 {
		t.Fatalf("redrive: %+v %v", rr, err)
	}
	if recordformat.Detect(mustOriginal(t, refused).Headers) != recordformat.CloudEvents {
		t.Fatalf("the refused record is not a CloudEvents record")
	}
	pipelinetest.WaitFor(t, 30*time.Second, "the redriven event projected", func() bool {
		return esCount(t, client, e.ESURL+"/sluice_shop_formats/_count") == 19
	})
	if n := probe.calls(id); n != 2 {
		t.Fatalf("refused event projected %d times, want 2 (refused, then redriven)", n)
	}
	pipelinetest.WaitFor(t, 30*time.Second, "the redriven event's registry row done", func() bool {
		rows, err := reg.Get(ctx, id)
		return err == nil && len(rows) == 1 && rows[0].Status == claim.StatusDone
	})
}

// storedEvents reads the whole log.
func storedEvents(t *testing.T, st *eventstore.Store) map[string]envelope.Envelope {
	t.Helper()
	out := map[string]envelope.Envelope{}
	page, err := st.Log(context.Background(), eventstore.LogQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range page.Events {
		out[ev.Envelope.EventID] = ev.Envelope
	}
	return out
}

func mustMarshal(t *testing.T, e envelope.Envelope) string {
	t.Helper()
	b, err := envelope.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func esCount(t *testing.T, c *http.Client, url string) int {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var v struct {
		Count int `json:"count"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&v) != nil {
		return -1
	}
	return v.Count
}

func anyCloudEventsID(t *testing.T, byID map[string]*kgo.Record) string {
	t.Helper()
	for id, r := range byID {
		if recordformat.Detect(r.Headers) == recordformat.CloudEvents {
			return id
		}
	}
	t.Fatal("no CloudEvents record")
	return ""
}

func cloneRecord(r *kgo.Record) *kgo.Record {
	return &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: append([]kgo.RecordHeader(nil), r.Headers...)}
}

func dropKey(hs []kgo.RecordHeader, key string) []kgo.RecordHeader {
	var out []kgo.RecordHeader
	for _, h := range hs {
		if h.Key != key {
			out = append(out, h)
		}
	}
	return out
}

func produce(ctx context.Context, e *pipelinetest.Env, r *kgo.Record) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.Kafka.Brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	return cl.ProduceSync(ctx, r).FirstErr()
}

func newRegistry(t *testing.T, e *pipelinetest.Env) *registry.Registry {
	t.Helper()
	reg, err := registry.New(registry.Config{Owner: "test"}, registry.Deps{Pool: e.Pool})
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func mustOriginal(t *testing.T, l *dlq.Letter) *kgo.Record {
	t.Helper()
	r, err := l.Original()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// headerOf returns the value of header k of r and whether it is there.
func headerOf(r *kgo.Record, k string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == k {
			return string(h.Value), true
		}
	}
	return "", false
}
