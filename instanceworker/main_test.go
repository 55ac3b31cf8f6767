package instanceworker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/eventstore/eventstoretest"
	"github.com/sluicehq/sluice/registry/registrytest"

	"github.com/elastic/go-elasticsearch/v8"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/esserver"
	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore/backend"
	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/migrations"
	"github.com/sluicehq/sluice/pipeline/sluiceconfig"
	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/observability"
)

var minio *testenv.MinIO

const helperEnv = "SLUICE_INSTANCEWORKER_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		os.Exit(helperMain())
	}
	os.Exit(testenv.RunWithMinIO(m, func(mi *testenv.MinIO) { minio = mi }))
}

// helperMain runs the instance worker as a real process (the test binary
// re-executed), configured by the environment exactly like
// `sluice instance-worker`.
func helperMain() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg, err := sluiceconfig.FromOS()
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	pool, err := pgxpool.New(ctx, cfg.Postgres.URL.Value())
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	defer pool.Close()
	bucket, err := backend.Open(ctx, cfg.EventStore)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	store, err := eventstore.New(cfg.EventStore, eventstore.Deps{Pool: pool, Bucket: bucket, Logger: logger})
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	defer func() { _ = store.Close() }()
	es, err := readmodel.NewClient(cfg.Elasticsearch)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	svc, err := instanceworker.New(cfg.InstanceWorker(), instanceworker.Deps{Pool: pool, Store: store, ES: es, Logger: logger},
		// A crashed member's session must expire quickly for the restart.
		instanceworker.WithKafkaOpts(kgo.SessionTimeout(6*time.Second), kgo.HeartbeatInterval(500*time.Millisecond)))
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	if err := svc.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	return 0
}

// env is one test's pipeline: Postgres, a MinIO bucket, kfake, the ES test
// server, and the store used to append commands.
type env struct {
	t      testing.TB
	url    string
	pool   *pgxpool.Pool
	bucket string
	store  *eventstore.Store
	kafka  *testenv.Kafka
	es     *esserver.Server
	esURL  string
	esc    *elasticsearch.Client
	topic  string
	dlq    string
	prod   *kgo.Client
	vars   map[string]string
	// logs, when set, also receives the log of in-process workers.
	logs io.Writer
	// metrics is the registry of the last in-process worker started.
	metrics *prometheus.Registry
}

func newEnv(t testing.TB, partitions int) *env {
	t.Helper()
	url, pool := testenv.NewMigratedDatabase(t)
	e := &env{t: t, url: url, pool: pool, bucket: minio.NewBucket(t)}
	e.topic, e.dlq = testenv.UniqueName("cmds-"), testenv.UniqueName("cmds-dlq-")
	e.kafka = testenv.NewKafka(t)
	e.es = esserver.New()
	ts := httptest.NewServer(e.es)
	t.Cleanup(ts.Close)
	e.esURL = ts.URL
	var err error
	if e.esc, err = elasticsearch.NewClient(elasticsearch.Config{Addresses: []string{ts.URL}}); err != nil {
		t.Fatal(err)
	}
	e.vars = map[string]string{
		"DATABASE_URL": url, "DATABASE_MAX_CONNS": "8",
		"EVENT_STORE_BACKEND": "s3", "EVENT_STORE_BUCKET": e.bucket, "EVENT_STORE_S3_ENDPOINT": minio.Endpoint,
		"EVENT_STORE_S3_ACCESS_KEY_ID": minio.AccessKey, "EVENT_STORE_S3_SECRET_ACCESS_KEY": minio.SecretKey,
		"EVENT_STORE_S3_PATH_STYLE": "true",
		"KAFKA_BROKERS":             strings.Join(e.kafka.Brokers, ","), "COMMANDS_TOPIC": e.topic, "COMMANDS_DLQ_TOPIC": e.dlq,
		"KAFKA_TOPIC_PARTITIONS": fmt.Sprint(partitions), "KAFKA_TOPIC_REPLICATION_FACTOR": "1",
		"ELASTICSEARCH_URLS": ts.URL, "SLUICE_HTTP_ADDR": "", "SLUICE_LOG_FORMAT": "text",
		"PROCESSED_EVENT_OWNER": "worker-a", "WORKER_RETRY_BACKOFF_BASE": "20ms", "WORKER_RETRY_BACKOFF_CAP": "200ms",
		"SHUTDOWN_TIMEOUT": "10s", "INSTANCE_WORKER_MAX_RETRY_ATTEMPTS": "3",
	}
	cfg := e.config(nil)
	bucket, err := backend.Open(context.Background(), cfg.EventStore)
	if err != nil {
		t.Fatal(err)
	}
	if e.store, err = eventstore.New(cfg.EventStore, eventstore.Deps{Pool: pool, Bucket: bucket}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.store.Close() })
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

// cmd is one command appended to the store.
type cmd struct {
	ev eventstore.Event
}

// appendCmd appends a command for instance db:class:id and returns the stored event.
func (e *env) appendCmd(typ, db, class, id string, payload map[string]any) cmd {
	e.t.Helper()
	return e.appendCmdID(typ, db, class, id, payload, "cmd-"+uuid.NewString())
}

// appendCmdID is appendCmd with the command's metadata.command_id.
func (e *env) appendCmdID(typ, db, class, id string, payload map[string]any, commandID string) cmd {
	e.t.Helper()
	agg, err := envelope.InstanceAggregateID(db, class, id)
	if err != nil {
		e.t.Fatal(err)
	}
	b, _ := json.Marshal(payload)
	env := envelope.Envelope{EventID: uuid.NewString(), EventType: typ, Kind: envelope.KindCommand,
		AggregateType: envelope.AggregateTypeInstance, AggregateID: agg, Data: b,
		Metadata: envelope.Metadata{}}
	env.Metadata.SetString(envelope.MetaCommandID, commandID)
	res, err := e.store.AppendOne(ctxT(e.t), env)
	if err != nil {
		e.t.Fatal(err)
	}
	return cmd{ev: res.Event}
}

// publish produces commands to the topic as the relay would.
func (e *env) publish(cs ...cmd) {
	e.t.Helper()
	var recs []*kgo.Record
	for _, c := range cs {
		recs = append(recs, &kgo.Record{Key: envelope.KafkaKey(c.ev.Envelope), Value: c.ev.Raw})
	}
	if err := e.producer().ProduceSync(ctxT(e.t), recs...).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) publishRaw(key, value []byte) {
	e.t.Helper()
	if err := e.producer().ProduceSync(ctxT(e.t), &kgo.Record{Key: key, Value: value}).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// startInProcess runs a Service in this process until the test ends or the
// returned stop is called.
func (e *env) startInProcess(extra map[string]string) (*instanceworker.Service, func()) {
	e.t.Helper()
	return e.startInProcessWith(extra, nil)
}

// startInProcessWith is startInProcess with the service's checks
// registered in health (nil: none).
func (e *env) startInProcessWith(extra map[string]string, health *observability.Health) (*instanceworker.Service, func()) {
	e.t.Helper()
	cfg := e.config(extra)
	pool, err := pgxpool.New(context.Background(), cfg.Postgres.URL.Value())
	if err != nil {
		e.t.Fatal(err)
	}
	// The store on a database of its own (EVENT_STORE_DATABASE_URL) gets a
	// pool of its own, as the service's wiring gives it.
	storePool := pool
	if u := cfg.Postgres.URLOf(migrations.RoleStore); u != cfg.Postgres.URL.Value() {
		if storePool, err = pgxpool.New(context.Background(), u); err != nil {
			e.t.Fatal(err)
		}
	}
	bucket, err := backend.Open(context.Background(), cfg.EventStore)
	if err != nil {
		e.t.Fatal(err)
	}
	store, err := eventstore.New(cfg.EventStore, eventstore.Deps{Pool: storePool, Bucket: bucket})
	if err != nil {
		e.t.Fatal(err)
	}
	es, err := readmodel.NewClient(cfg.Elasticsearch)
	if err != nil {
		e.t.Fatal(err)
	}
	var lw io.Writer = testenv.LogWriter{T: e.t}
	if e.logs != nil {
		lw = io.MultiWriter(lw, e.logs)
	}
	logger := slog.New(slog.NewTextHandler(lw, &slog.HandlerOptions{Level: slog.LevelInfo}))
	e.metrics = prometheus.NewRegistry()
	svc, err := instanceworker.New(cfg.InstanceWorker(), instanceworker.Deps{Pool: pool, Store: store, ES: es, Logger: logger, Health: health, Metrics: e.metrics},
		instanceworker.WithKafkaOpts(kgo.WithLogger(kgo.BasicLogger(testenv.LogWriter{T: e.t}, kgo.LogLevelWarn, nil)),
			kgo.SessionTimeout(6*time.Second), kgo.HeartbeatInterval(500*time.Millisecond)))
	if err != nil {
		e.t.Fatal(err)
	}
	return svc, testenv.RunInBackground(e.t, "worker", svc.Run, func() { _ = store.Close() }, storePool.Close, pool.Close)
}

// startProcess runs the worker as a real process (the test binary
// re-executed; TestMain runs the worker when instanceworker's helper variable is set).
func (e *env) startProcess(extra map[string]string) *testenv.Process {
	e.t.Helper()
	return testenv.StartHelperProcess(e.t, testenv.HelperEnv(e.vars, extra, helperEnv+"=1"))
}

// rows returns the registry rows of the instance worker for the commands.
func (e *env) statuses(cs ...cmd) map[string]claim.Status {
	e.t.Helper()
	rows, err := registrytest.Rows(ctxT(e.t), e.pool, instanceworker.HandlerName)
	if err != nil {
		e.t.Fatal(err)
	}
	have := make(map[string]claim.Status, len(rows))
	for _, r := range rows {
		have[r.EventID] = r.Status
	}
	out := make(map[string]claim.Status, len(cs))
	for _, c := range cs {
		st, ok := have[c.ev.Envelope.EventID]
		if !ok {
			st = "none"
		}
		out[c.ev.Envelope.EventID] = st
	}
	return out
}

func (e *env) allDone(cs ...cmd) bool {
	for _, st := range e.statuses(cs...) {
		if st != claim.StatusDone {
			return false
		}
	}
	return true
}

func (e *env) outcome(c cmd) claim.Outcome {
	e.t.Helper()
	row, err := registrytest.Row(ctxT(e.t), e.pool, instanceworker.HandlerName, c.ev.Envelope.EventID)
	if err != nil {
		e.t.Fatal(err)
	}
	if row.Outcome == nil {
		return claim.Outcome{}
	}
	return *row.Outcome
}

// domainEvents returns, per aggregate, the slots holding a domain event
// (and how many events each slot holds).
func (e *env) domainEvents() map[string][]string {
	e.t.Helper()
	rows, err := eventstoretest.Rows(ctxT(e.t), e.pool)
	if err != nil {
		e.t.Fatal(err)
	}
	type slot struct {
		agg string
		seq int64
	}
	count := map[slot]int{}
	var slots []slot
	for _, r := range rows {
		if r.Kind != envelope.KindDomain {
			continue
		}
		k := slot{r.AggregateID, r.SequenceNumber}
		if count[k] == 0 {
			slots = append(slots, k)
		}
		count[k]++
	}
	sort.Slice(slots, func(i, j int) bool {
		if slots[i].agg != slots[j].agg {
			return slots[i].agg < slots[j].agg
		}
		return slots[i].seq < slots[j].seq
	})
	out := map[string][]string{}
	for _, k := range slots {
		out[k.agg] = append(out[k.agg], fmt.Sprintf("%d×%d", k.seq, count[k]))
	}
	return out
}

// doc reads an instance document (raw, by concrete index) with its version.
func (e *env) doc(db, class, id string) (version int64, source map[string]any, found bool) {
	e.t.Helper()
	n := readmodel.InstanceNames("sluice_", db, 0)
	res, err := e.esc.Get(n.Index, readmodel.DocumentID(class, id))
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode == http.StatusNotFound {
		return 0, nil, false
	}
	var g struct {
		Version int64          `json:"_version"`
		Source  map[string]any `json:"_source"`
	}
	b, _ := io.ReadAll(res.Body)
	if err := json.Unmarshal(b, &g); err != nil {
		e.t.Fatalf("doc: %v: %s", err, b)
	}
	return g.Version, g.Source, true
}

// dlqRecords returns the records in the DLQ topic.
func (e *env) dlqRecords() []*kgo.Record {
	e.t.Helper()
	return testenv.ReadTopic(e.t, e.kafka.Brokers, e.dlq)
}

// committed returns the group's committed offsets and the topic's end
// offsets, summed over partitions.
func (e *env) committed() (committed, end int64) {
	e.t.Helper()
	adm := kadm.NewClient(e.producer())
	offs, err := adm.FetchOffsets(ctxT(e.t), e.config(nil).Kafka.Group(instanceworker.GroupName))
	if errors.Is(err, kerr.GroupIDNotFound) {
		// The worker has not joined yet: nothing committed.
		offs, err = nil, nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Topic == e.topic {
			committed += o.At
		}
	})
	ends, err := adm.ListEndOffsets(ctxT(e.t), e.topic)
	if err != nil {
		e.t.Fatal(err)
	}
	ends.Each(func(o kadm.ListedOffset) { end += o.Offset })
	return committed, end
}

// counter returns the sum of the series of counter name of the last
// in-process worker whose labels include want (0 when there are none).
func (e *env) counter(name string, want map[string]string) float64 {
	e.t.Helper()
	return testenv.MetricSum(e.t, e.metrics, name, want)
}

// probes is sluice_worker_outage_probes_total of the instance worker for
// dependency dep (every dependency when dep is ""): the tries of a
// dependency in outage after its backoff, the evidence that an outage was
// ridden out.
func (e *env) probes(dep string) float64 {
	e.t.Helper()
	want := map[string]string{"handler": instanceworker.HandlerName}
	if dep != "" {
		want["dependency"] = dep
	}
	return e.counter("sluice_worker_outage_probes_total", want)
}

// maxAttempts is INSTANCE_WORKER_MAX_RETRY_ATTEMPTS of the env: an outage
// test rides out more probes than this, so that an outage spending
// attempts would have dead-lettered.
func (e *env) maxAttempts() float64 {
	e.t.Helper()
	n, err := strconv.Atoi(e.vars["INSTANCE_WORKER_MAX_RETRY_ATTEMPTS"])
	if err != nil {
		e.t.Fatal(err)
	}
	return float64(n)
}
