package inspect_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/esserver"
	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore/backend"
	"github.com/sluicehq/sluice/inspect"
	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/pipeline/sluiceconfig"
	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/relay"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/kafka"
)

// pipeline is the whole pipeline in this process, as `sluice dev` runs it:
// Postgres, a file-backend event store, kfake, the Elasticsearch test
// server, the API, the relay (started by startRelay), the instance worker
// and the history projection.
type pipeline struct {
	cfg    *sluiceconfig.Config
	store  *eventstore.Store
	reg    *registry.Registry
	in     *inspect.Inspector
	api    *httptest.Server
	kafka  *testenv.Kafka
	parked *relay.ParkedStore
	relay  func()
}

// handlersOf are the pipeline's workers, their groups named as the
// workers name them (KAFKA_GROUP_PREFIX first).
func handlersOf(k kafka.Config) []inspect.Handler {
	return []inspect.Handler{
		{Name: instanceworker.HandlerName, Group: k.Group(instanceworker.GroupName), Kind: envelope.KindCommand},
		{Name: projectionworker.HandlerName("history", 1), Group: k.Group(projectionworker.GroupName("history", 1)), Kind: envelope.KindDomain},
	}
}

func startPipeline(t *testing.T) *pipeline {
	t.Helper()
	ctx := context.Background()
	dbURL, pool := testenv.NewMigratedDatabase(t)
	k := testenv.NewKafka(t)
	es := httptest.NewServer(esserver.New())
	t.Cleanup(es.Close)
	cfg, err := sluiceconfig.Load(map[string]string{
		"DATABASE_URL": dbURL, "EVENT_STORE_BACKEND": "file", "EVENT_STORE_FILE_DIR": filepath.Join(t.TempDir(), "events"),
		"KAFKA_BROKERS": strings.Join(k.Brokers, ","), "KAFKA_TOPIC_PARTITIONS": "3", "KAFKA_TOPIC_REPLICATION_FACTOR": "1",
		"KAFKA_TOPIC_PREFIX": testenv.UniqueName("t") + ".", "ELASTICSEARCH_URLS": es.URL, "PROCESSED_EVENT_OWNER": "inspect-test",
		"EVENT_PUBLISHER_POLL_INTERVAL": "100ms", "KAFKA_SESSION_TIMEOUT": "6s",
	})
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	bucket, err := backend.Open(ctx, cfg.EventStore)
	if err != nil {
		t.Fatal(err)
	}
	store, err := eventstore.New(cfg.EventStore, eventstore.Deps{Pool: pool, Bucket: bucket, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	esc, err := readmodel.NewClient(cfg.Elasticsearch)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.New(cfg.Registry.WithRetry(cfg.Worker.InstanceRetry()), registry.Deps{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	iw, err := instanceworker.New(cfg.InstanceWorker(), instanceworker.Deps{Pool: pool, Store: store, ES: esc, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	testenv.RunInBackground(t, "instance worker", iw.Run)
	pcfg := cfg.ProjectionWorker()
	pcfg.Projections = []projectionworker.Spec{{Projection: projectionworker.History{}}}
	pw, err := projectionworker.New(pcfg, projectionworker.Deps{Pool: pool, ES: esc, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	testenv.RunInBackground(t, "projection worker", pw.Run)
	h, err := api.New(api.Config{}, api.Deps{Store: store, Registry: reg, Sequences: store, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	in, err := inspect.New(inspect.Config{Kafka: cfg.Kafka, Relay: cfg.Relay, Elasticsearch: cfg.Elasticsearch}, inspect.Deps{Pool: pool, Store: store, Bucket: bucket, Registry: reg,
		Sequences: store, ES: esc, Handlers: handlersOf(cfg.Kafka)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(in.Close)
	p := &pipeline{cfg: cfg, store: store, reg: reg, in: in, api: srv, kafka: k, parked: relay.NewParkedStore(pool)}
	p.relay = func() {
		rl, err := relay.New(cfg.RelayConfig(), relay.Deps{Store: store, Bucket: bucket, Pool: pool, Kafka: cfg.Kafka, Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rl.Close)
		testenv.RunInBackground(t, "relay", rl.Run)
	}
	return p
}

// send posts a command to the API and returns its command_id.
func (p *pipeline) send(t *testing.T, method, path, body string) string {
	t.Helper()
	cid := uuid.NewString()
	req, _ := http.NewRequest(method, p.api.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", cid)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusAccepted {
		t.Fatalf("%s %s: %d %s", method, path, res.StatusCode, b)
	}
	var acc struct {
		CommandID string `json:"command_id"`
	}
	if err := json.Unmarshal(b, &acc); err != nil || acc.CommandID == "" {
		t.Fatalf("accepted body %s: %v", b, err)
	}
	return acc.CommandID
}

// steps renders a trace's steps as "step[handler|group]=state" per event.
func steps(tr inspect.Trace) []string {
	var out []string
	for _, e := range tr.Events {
		var s []string
		for _, st := range e.Steps {
			name := st.Step
			if st.Group != "" {
				name += "[" + st.Group + "]"
			} else if st.Handler != "" {
				name += "[" + st.Handler + "]"
			}
			s = append(s, name+"="+st.State)
		}
		out = append(out, e.Kind+": "+strings.Join(s, " "))
	}
	return out
}

func find(t *testing.T, e inspect.EventTrace, step, who string) inspect.Step {
	t.Helper()
	for _, st := range e.Steps {
		if st.Step == step && (who == "" || st.Handler == who || st.Group == who) {
			return st
		}
	}
	t.Fatalf("%s event has no step %s %s: %+v", e.Kind, step, who, e.Steps)
	return inspect.Step{}
}

// A command traced through the whole pipeline: pending while the relay has
// not published it, then every step done with its position, partition,
// offset, registry row, document version and offset commit, each checked
// against the source it came from.
func TestTraceFollowsACommandThroughThePipeline(t *testing.T) {
	ctx := context.Background()
	p := startPipeline(t)
	hist := projectionworker.HandlerName("history", 1)
	cid := p.send(t, "POST", "/v1/dbs/shop/classes/orders/instances", `{"instance_id":"42","data":{"total":10}}`)

	// Before the relay runs: appended, not published, no handler yet.
	tr, err := p.in.Trace(ctx, cid)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Events) != 1 || tr.CommandID != cid {
		t.Fatalf("trace before the relay: %+v", steps(tr))
	}
	got := strings.Join(steps(tr), "\n")
	want := "command: accepted=done appended=done published=pending handled[instanceworker]=pending"
	if got != want {
		t.Fatalf("before the relay:\n got %s\nwant %s", got, want)
	}

	p.relay()
	want = "command: accepted=done appended=done published=done handled[instanceworker]=done document[instanceworker]=done offset_commit[" + p.cfg.Kafka.Group(instanceworker.GroupName) + "]=done\n" +
		"domain: emitted=done appended=done published=done handled[" + hist + "]=done document[" + hist + "]=done offset_commit[" + p.cfg.Kafka.Group(projectionworker.GroupName("history", 1)) + "]=done"
	deadline := time.Now().Add(60 * time.Second)
	for {
		tr, err = p.in.Trace(ctx, cid)
		if err == nil && strings.Join(steps(tr), "\n") == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not every step done within 60s:\n got %s\nwant %s\n%v %v", strings.Join(steps(tr), "\n"), want, err, tr.Warnings)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(tr.Warnings) > 0 {
		t.Errorf("warnings: %v", tr.Warnings)
	}

	cmd, dom := tr.Events[0], tr.Events[1]
	stored, err := p.store.ByEventID(ctx, cmd.EventID)
	if err != nil {
		t.Fatal(err)
	}
	if app := find(t, cmd, "appended", ""); app.Position != stored.Envelope.Position || app.Sequence != 1 || app.At.IsZero() {
		t.Errorf("appended step %+v, stored at position %d", app, stored.Envelope.Position)
	}
	// The partition and offset are where the record really is.
	for _, e := range []inspect.EventTrace{cmd, dom} {
		pub := find(t, e, "published", "")
		if pub.Partition == nil || pub.Offset == nil {
			t.Fatalf("%s published without partition/offset: %+v", e.Kind, pub)
		}
		topic := p.cfg.Kafka.CommandsTopic
		if e.Kind == "domain" {
			topic = p.cfg.Kafka.EventsTopic
		}
		if pub.Topic != topic {
			t.Errorf("%s published to %q, want %q", e.Kind, pub.Topic, topic)
		}
		rec := readAt(t, p.kafka.Brokers, topic, *pub.Partition, *pub.Offset)
		if string(header(rec, "event_id")) != e.EventID || string(header(rec, "position")) != fmt.Sprint(e.Position) {
			t.Errorf("%s: the record at %s[%d]@%d is event %s position %s, want %s at %d", e.Kind, topic, *pub.Partition, *pub.Offset,
				header(rec, "event_id"), header(rec, "position"), e.EventID, e.Position)
		}
		oc := find(t, e, "offset_commit", "")
		if oc.Committed == nil || *oc.Committed <= *pub.Offset {
			t.Errorf("%s offset commit %+v not past offset %d", e.Kind, oc, *pub.Offset)
		}
	}
	rows, err := p.reg.Get(ctx, cmd.EventID)
	if err != nil || len(rows) != 1 {
		t.Fatalf("registry rows %v %v", rows, err)
	}
	if h := find(t, cmd, "handled", instanceworker.HandlerName); h.Attempts != rows[0].Attempts || h.Outcome != "applied" || !h.At.Equal(rows[0].ProcessedAt) {
		t.Errorf("handled step %+v, registry row %+v", h, rows[0])
	}
	if d := find(t, cmd, "document", instanceworker.HandlerName); d.Version == nil || *d.Version != 1 || !strings.HasSuffix(d.Index, "shop_instances_write") {
		t.Errorf("instance document step %+v", d)
	}
	if d := find(t, dom, "document", hist); d.DocID != dom.EventID {
		t.Errorf("history document step %+v", d)
	}

	// The domain event's id gives the same trace; so does the command's
	// event id.
	for _, id := range []string{dom.EventID, cmd.EventID} {
		tr2, err := p.in.Trace(ctx, id)
		if err != nil || len(tr2.Events) != 2 || tr2.Events[0].EventID != cmd.EventID || tr2.Events[1].EventID != dom.EventID {
			t.Errorf("trace of %s: %v %v", id, steps(tr2), err)
		}
	}

	// Unknown ids.
	for _, id := range []string{uuid.NewString(), "no-such-command", " "} {
		if _, err := p.in.Trace(ctx, id); !errors.Is(err, inspect.ErrNotFound) && !errors.Is(err, inspect.ErrInvalid) {
			t.Errorf("trace of %q: %v, want not found or invalid", id, err)
		}
	}

	// Over HTTP.
	srv := httptest.NewServer(p.in.Handler())
	defer srv.Close()
	for _, tc := range []struct {
		path   string
		status int
		want   string
	}{
		{inspect.TracePath + cid, 200, `"command_id":"` + cid + `"`},
		{inspect.TracePath + uuid.NewString(), 404, `"field":"id"`},
		{inspect.AggregatePath + "Instance/shop:orders:42", 200, `"last_sequence":1`},
		{inspect.AggregatePath + "Instance/shop:orders:43", 404, `"field":"aggregate_id"`},
		{inspect.AggregatePath + "Instance/shop:orders:42?limit=x", 400, `"field":"limit"`},
	} {
		res, err := http.Get(srv.URL + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != tc.status || !strings.Contains(string(b), tc.want) {
			t.Errorf("GET %s: %d %s, want %d with %s", tc.path, res.StatusCode, b, tc.status, tc.want)
		}
	}
}

// The aggregate view: every event of the page with its handlers' rows,
// each handler's guard and the instance document beside the last event.
func TestAggregateView(t *testing.T) {
	ctx := context.Background()
	p := startPipeline(t)
	p.relay()
	p.send(t, "POST", "/v1/dbs/shop/classes/orders/instances", `{"instance_id":"7","data":{"total":1}}`)
	p.send(t, "PATCH", "/v1/dbs/shop/classes/orders/instances/7", `{"data":{"total":2}}`)
	p.send(t, "PATCH", "/v1/dbs/shop/classes/orders/instances/7", `{"data":{"total":3}}`)
	var v inspect.AggregateView
	testenv.WaitFor(t, 60*time.Second, "the third update in the instance document", func() bool {
		var err error
		v, err = p.in.Aggregate(ctx, inspect.AggregateQuery{Type: "Instance", ID: "shop:orders:7"})
		return err == nil && v.Document != nil && v.Document.Version == 3 && len(v.Events) == 6 && len(v.Events[5].Handlers) == 1
	})
	if v.LastSequence != 3 || v.FromSeq != 1 || v.Key != envelope.AggregateKey("Instance", "shop:orders:7") {
		t.Errorf("view %+v", v)
	}
	var kinds []string
	for _, e := range v.Events {
		kinds = append(kinds, fmt.Sprintf("%d%s", e.Sequence, e.Kind[:1]))
		if e.Kind == "command" && (len(e.Handlers) != 1 || e.Handlers[0].Handler != instanceworker.HandlerName || e.Handlers[0].Status != "done") {
			t.Errorf("command %d handlers %+v", e.Sequence, e.Handlers)
		}
	}
	if g := strings.Join(kinds, " "); g != "1c 1d 2c 2d 3c 3d" {
		t.Errorf("events %s", g)
	}
	var guard *inspect.Guard
	for i := range v.Guards {
		if v.Guards[i].Handler == instanceworker.HandlerName {
			guard = &v.Guards[i]
		}
	}
	if guard == nil || guard.LastSequence != 3 || guard.Behind != 0 {
		t.Errorf("instance worker guard %+v in %+v", guard, v.Guards)
	}
	if !strings.Contains(string(v.Document.Source), `"total":3`) {
		t.Errorf("document %s", v.Document.Source)
	}

	// A page: the first slot only.
	v, err := p.in.Aggregate(ctx, inspect.AggregateQuery{Type: "Instance", ID: "shop:orders:7", FromSeq: 1, Limit: 1})
	if err != nil || len(v.Events) != 2 || v.ToSeq != 1 {
		t.Errorf("page 1..1: %+v %v", v, err)
	}
	for _, q := range []inspect.AggregateQuery{{Type: "Instance", ID: "shop:orders:8"}, {Type: "", ID: "x"}, {Type: "Instance", ID: ""}} {
		if _, err := p.in.Aggregate(ctx, q); !errors.Is(err, inspect.ErrNotFound) && !errors.Is(err, inspect.ErrInvalid) {
			t.Errorf("aggregate %+v: %v", q, err)
		}
	}
}

// A record the relay parked shows as parked with its reason, and nothing
// after it waits for it.
func TestTraceShowsAParkedRecord(t *testing.T) {
	ctx := context.Background()
	p := startPipeline(t)
	cid := p.send(t, "POST", "/v1/dbs/shop/classes/orders/instances", `{"instance_id":"9","data":{"total":1}}`)
	ev, err := p.store.ByEventID(ctx, api.EventIDForCommand(cid))
	if err != nil {
		t.Fatal(err)
	}
	// Parked before the relay first runs (as a relay that crashed after
	// parking it would have): the relay skips it.
	if _, err := p.parked.Park(ctx, relay.ParkedRecord{Relay: p.cfg.Relay.Name, Position: ev.Envelope.Position, EventID: ev.Envelope.EventID,
		Topic: p.cfg.Kafka.CommandsTopic, Key: envelope.KafkaKey(ev.Envelope), Envelope: ev.Raw, Reason: relay.ReasonTooLarge,
		Error: "MESSAGE_TOO_LARGE", Attempts: 3}); err != nil {
		t.Fatal(err)
	}
	p.relay()
	next := p.send(t, "POST", "/v1/dbs/shop/classes/orders/instances", `{"instance_id":"10","data":{"total":1}}`)
	testenv.WaitFor(t, 60*time.Second, "the next command handled", func() bool {
		tr, err := p.in.Trace(ctx, next)
		return err == nil && find(t, tr.Events[0], "handled", instanceworker.HandlerName).State == inspect.StateDone
	})
	tr, err := p.in.Trace(ctx, cid)
	if err != nil {
		t.Fatal(err)
	}
	want := "command: accepted=done appended=done parked=parked handled[instanceworker]=pending"
	if g := strings.Join(steps(tr), "\n"); g != want {
		t.Fatalf("parked trace:\n got %s\nwant %s", g, want)
	}
	if st := find(t, tr.Events[0], "parked", ""); !strings.Contains(st.Error, "too_large") || st.Attempts != 3 {
		t.Errorf("parked step %+v", st)
	}
}

// inspect keeps its own copy of api.EventIDForCommand (the api package is
// on its floor); they must agree.
func TestEventIDForCommandMatchesAPI(t *testing.T) {
	ctx := context.Background()
	p := startPipeline(t)
	for _, cid := range []string{"order-17", uuid.NewString()} {
		req, _ := http.NewRequest("POST", p.api.URL+"/v1/dbs/shop/classes/orders/instances", strings.NewReader(`{"data":{"n":1}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", cid)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusAccepted {
			t.Fatalf("create: %d", res.StatusCode)
		}
		tr, err := p.in.Trace(ctx, cid)
		if err != nil || tr.CommandID != cid || tr.Events[0].EventID != api.EventIDForCommand(cid) {
			t.Errorf("trace of command %q: %+v %v", cid, tr, err)
		}
	}
}

func readAt(t *testing.T, brokers []string, topic string, partition int32, offset int64) *kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().At(offset)}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("no record at %s[%d]@%d", topic, partition, offset)
		}
		var rec *kgo.Record
		fs.EachRecord(func(r *kgo.Record) {
			if rec == nil && r.Offset == offset {
				rec = r
			}
		})
		if rec != nil {
			return rec
		}
	}
}

func header(r *kgo.Record, key string) []byte {
	for _, h := range r.Headers {
		if h.Key == key {
			return h.Value
		}
	}
	return nil
}
