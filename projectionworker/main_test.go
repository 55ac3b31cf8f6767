package projectionworker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/elastic/go-elasticsearch/v8"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/esserver"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/pipeline/sluiceconfig"
	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/worker"
)

const (
	helperEnv      = "SLUICE_PROJECTIONWORKER_HELPER"
	projectionsEnv = "SLUICE_TEST_PROJECTIONS"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		os.Exit(helperMain())
	}
	os.Exit(m.Run())
}

// helperMain runs the projection worker as a real process (the test binary
// re-executed), configured by the environment like `sluice projection-worker`.
func helperMain() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "helper:", err); return 1 }
	cfg, err := sluiceconfig.FromOS()
	if err != nil {
		return fail(err)
	}
	pool, err := pgxpool.New(ctx, cfg.Postgres.URL.Value())
	if err != nil {
		return fail(err)
	}
	defer pool.Close()
	es, err := readmodel.NewClient(cfg.Elasticsearch)
	if err != nil {
		return fail(err)
	}
	var specs []projectionworker.Spec
	for _, n := range strings.Split(os.Getenv(projectionsEnv), ",") {
		p, err := projectionworker.Lookup(n)
		if err != nil {
			return fail(err)
		}
		specs = append(specs, projectionworker.Spec{Projection: p})
	}
	pcfg := cfg.ProjectionWorker()
	pcfg.Projections = specs
	svc, err := projectionworker.New(pcfg, projectionworker.Deps{Pool: pool, ES: es, Logger: logger},
		projectionworker.WithKafkaOpts(kgo.SessionTimeout(6*time.Second), kgo.HeartbeatInterval(500*time.Millisecond)))
	if err != nil {
		return fail(err)
	}
	if err := svc.Run(ctx); err != nil {
		return fail(err)
	}
	return 0
}

// env is one test's pipeline: Postgres, kfake, the ES test server.
type env struct {
	t     testing.TB
	url   string
	pool  *pgxpool.Pool
	kafka *testenv.Kafka
	es    *esserver.Server
	esc   *elasticsearch.Client
	topic string
	dlq   string
	prod  *kgo.Client
	vars  map[string]string
	pos   int64
	// wrapRegistry, when set, wraps the registry of workers started in
	// process (WithRegistryWrapper).
	wrapRegistry func(worker.Registry) worker.Registry
	// logs, when set, also receives the log lines (level info and up) of
	// workers started in process: tests wait for them as evidence.
	logs *testenv.Buffer
}

func newEnv(t testing.TB, partitions int) *env {
	t.Helper()
	url, pool := testenv.NewMigratedDatabase(t)
	e := &env{t: t, url: url, pool: pool}
	e.topic, e.dlq = testenv.UniqueName("events-"), testenv.UniqueName("events-dlq-")
	e.kafka = testenv.NewKafka(t)
	e.es = esserver.New()
	ts := httptest.NewServer(e.es)
	t.Cleanup(ts.Close)
	var err error
	if e.esc, err = elasticsearch.NewClient(elasticsearch.Config{Addresses: []string{ts.URL}, DisableRetry: true}); err != nil {
		t.Fatal(err)
	}
	e.vars = map[string]string{
		"DATABASE_URL": url, "DATABASE_MAX_CONNS": "8",
		"KAFKA_BROKERS": strings.Join(e.kafka.Brokers, ","), "EVENTS_TOPIC": e.topic, "EVENTS_DLQ_TOPIC": e.dlq,
		"KAFKA_TOPIC_PARTITIONS": fmt.Sprint(partitions), "KAFKA_TOPIC_REPLICATION_FACTOR": "1",
		"ELASTICSEARCH_URLS": ts.URL, "SLUICE_HTTP_ADDR": "", "SLUICE_LOG_FORMAT": "text",
		"PROCESSED_EVENT_OWNER": "worker-a", "WORKER_RETRY_BACKOFF_BASE": "20ms", "WORKER_RETRY_BACKOFF_CAP": "200ms",
		"SHUTDOWN_TIMEOUT": "10s", "PROJECTION_WORKER_MAX_RETRIES": "3",
	}
	testenv.CreateTopics(t, e.producer(), partitions, e.topic, e.dlq)
	return e
}

func (e *env) config(extra map[string]string) *sluiceconfig.Config {
	cfg, err := sluiceconfig.Load(testenv.MergeVars(e.vars, extra))
	if err != nil {
		e.t.Fatal(err)
	}
	return cfg
}

func (e *env) producer() *kgo.Client {
	if e.prod == nil {
		e.prod = e.kafka.Client(e.t, kgo.DefaultProduceTopic(e.topic))
	}
	return e.prod
}

// event builds an instance domain event as the instance worker writes it.
func (e *env) event(typ, db, class, id string, seq int64, state map[string]any) envelope.Envelope {
	e.t.Helper()
	agg, err := envelope.InstanceAggregateID(db, class, id)
	if err != nil {
		e.t.Fatal(err)
	}
	if state == nil {
		state = map[string]any{}
	}
	b, _ := json.Marshal(state)
	e.pos++
	return envelope.Envelope{EventID: uuid.NewString(), EventType: typ, Kind: envelope.KindDomain,
		AggregateType: envelope.AggregateTypeInstance, AggregateID: agg, SequenceNumber: seq, Position: e.pos,
		OccurredAt: envelope.NewTimestamp(time.Unix(1_700_000_000+seq, 0)), Data: b, SchemaVersion: 1}
}

// publish produces events to the topic as the relay would.
func (e *env) publish(evs ...envelope.Envelope) {
	e.t.Helper()
	var recs []*kgo.Record
	for _, ev := range evs {
		raw, err := envelope.Marshal(ev)
		if err != nil {
			e.t.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Key: envelope.KafkaKey(ev), Value: raw})
	}
	if err := e.producer().ProduceSync(ctxT(e.t), recs...).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func (e *env) deps(metrics prometheus.Registerer) (projectionworker.Deps, func()) {
	e.t.Helper()
	pool, err := pgxpool.New(context.Background(), e.url)
	if err != nil {
		e.t.Fatal(err)
	}
	var logger *slog.Logger
	if e.logs != nil {
		logger = slog.New(slog.NewTextHandler(io.MultiWriter(testenv.LogWriter{T: e.t}, e.logs), &slog.HandlerOptions{Level: slog.LevelInfo}))
	} else {
		logger = slog.New(slog.NewTextHandler(testenv.LogWriter{T: e.t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return projectionworker.Deps{Pool: pool, ES: e.esc, Logger: logger, Metrics: metrics}, pool.Close
}

// opts are the test hooks of the Services (and switches) of e: e's
// registry wrapper, a session that expires quickly for the restarts.
func (e *env) opts() []projectionworker.Option {
	return []projectionworker.Option{projectionworker.WithRegistryWrapper(e.wrapRegistry),
		projectionworker.WithKafkaOpts(kgo.SessionTimeout(6*time.Second), kgo.HeartbeatInterval(500*time.Millisecond))}
}

// serviceConfig is the configuration of a Service of e running specs.
func (e *env) serviceConfig(extra map[string]string, specs ...projectionworker.Spec) projectionworker.Config {
	c := e.config(extra).ProjectionWorker()
	c.Projections = specs
	return c
}

// startInProcess runs a Service in this process until the test ends or the
// returned stop is called.
func (e *env) startInProcess(extra map[string]string, metrics prometheus.Registerer, specs ...projectionworker.Spec) (*projectionworker.Service, func()) {
	e.t.Helper()
	cfg := e.serviceConfig(extra, specs...)
	cfg.VersionCheck = 200 * time.Millisecond // follow a rebuild's swap quickly
	d, closePool := e.deps(metrics)
	svc, err := projectionworker.New(cfg, d, e.opts()...)
	if err != nil {
		e.t.Fatal(err)
	}
	return svc, testenv.RunInBackground(e.t, "worker", svc.Run, closePool)
}

// startProcess runs the worker as a real process (the test binary
// re-executed; TestMain runs the worker when projectionworker's helper variable is set).
func (e *env) startProcess(projections string, extra map[string]string) *testenv.Process {
	e.t.Helper()
	return testenv.StartHelperProcess(e.t, testenv.HelperEnv(e.vars, extra, helperEnv+"=1", projectionsEnv+"="+projections))
}

// lag is the lag of the worker group with base name group
// ("projection-instances-v1"), its id prefixed as the worker prefixes it
// (KAFKA_GROUP_PREFIX).
func (e *env) lag(group string) projectionworker.Lag {
	e.t.Helper()
	l, err := projectionworker.GroupLag(ctxT(e.t), kadm.NewClient(e.producer()), e.config(nil).Kafka.Group(group), e.topic)
	if err != nil {
		e.t.Fatal(err)
	}
	return l
}

func (e *env) caughtUp(group string) func() bool {
	return func() bool { return e.lag(group).Lag == 0 }
}

type esDoc struct {
	Found   bool           `json:"found"`
	Version int64          `json:"_version"`
	SeqNo   int64          `json:"_seq_no"`
	Source  map[string]any `json:"_source"`
}

// get reads a document by index (or alias) and id.
func (e *env) get(index, id string) esDoc {
	e.t.Helper()
	res, err := e.esc.Get(index, id)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	var d esDoc
	if res.StatusCode == http.StatusNotFound {
		return d
	}
	b, _ := io.ReadAll(res.Body)
	if err := json.Unmarshal(b, &d); err != nil {
		e.t.Fatalf("get %s/%s: %v: %s", index, id, err, b)
	}
	return d
}

// instance reads an instance document from the concrete index of version.
func (e *env) instance(db, class, id string, version int) esDoc {
	return e.get(readmodel.InstanceNames("sluice_", db, version).Index, readmodel.DocumentID(class, id))
}

// search runs a query on index (an alias applies its filter) and returns
// the hit ids.
func (e *env) search(index string, query map[string]any) []string {
	e.t.Helper()
	b, _ := json.Marshal(map[string]any{"query": query, "size": 10000})
	res, err := e.esc.Search(e.esc.Search.WithIndex(index), e.esc.Search.WithBody(strings.NewReader(string(b))))
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.IsError() {
		e.t.Fatalf("search %s: %s", index, raw)
	}
	var r struct {
		Hits struct {
			Hits []struct {
				ID string `json:"_id"`
			} `json:"hits"`
		} `json:"hits"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		e.t.Fatal(err)
	}
	var ids []string
	for _, h := range r.Hits.Hits {
		ids = append(ids, h.ID)
	}
	return ids
}

// dlqRecords returns the records in the DLQ topic.
func (e *env) dlqRecords() []*kgo.Record {
	e.t.Helper()
	return testenv.ReadTopic(e.t, e.kafka.Brokers, e.dlq)
}

// probes is sluice_worker_outage_probes_total of handler for dependency
// dep: the tries of a dependency in outage after its backoff, the
// evidence that an outage was ridden out.
func probes(t testing.TB, reg *prometheus.Registry, handler, dep string) float64 {
	t.Helper()
	return counter(t, reg, "sluice_worker_outage_probes_total", map[string]string{"handler": handler, "dependency": dep})
}

// maxRetries is PROJECTION_WORKER_MAX_RETRIES of the env (the attempt
// budget): an outage test rides out more probes than this, so that an
// outage spending attempts would have dead-lettered.
func (e *env) maxRetries() float64 {
	e.t.Helper()
	n, err := strconv.Atoi(e.vars["PROJECTION_WORKER_MAX_RETRIES"])
	if err != nil {
		e.t.Fatal(err)
	}
	return float64(n)
}

// counter sums a counter of the metrics registry with the given labels.
func counter(t testing.TB, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	return testenv.MetricSum(t, reg, name, labels)
}

func spec(name string) projectionworker.Spec {
	p, err := projectionworker.Lookup(name)
	if err != nil {
		panic(err)
	}
	return projectionworker.Spec{Projection: p}
}
