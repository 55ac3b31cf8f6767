package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/eventstore/objstore/s3store"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/migrations"
	"github.com/sluicehq/sluice/shared/config"
	"github.com/sluicehq/sluice/shared/crashpoint"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/kafka"
	"github.com/sluicehq/sluice/shared/observability"
)

// helperEnv makes the test binary run one relay process (crash and HA
// tests) instead of the tests.
const helperEnv = "SLUICE_RELAY_TEST_HELPER"

var minio *testenv.MinIO

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		os.Exit(runHelper())
	}
	os.Exit(testenv.RunWithMinIO(m, func(mi *testenv.MinIO) { minio = mi }))
}

// runHelper is a relay process configured from the environment, like
// `sluice relay`; it exits 0 on SIGTERM and 42 at a crash point.
func runHelper() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var cfg struct {
		Postgres   migrations.PostgresConfig
		EventStore eventstore.Config
		Relay      Config
		Kafka      kafka.Config
		Testing    crashpoint.Config
	}
	if err := config.Parse(&cfg, config.EnvironOS()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	pool, err := pgxpool.New(ctx, cfg.Postgres.URL.Value())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer pool.Close()
	bucket, err := s3store.New(ctx, s3store.Options{Bucket: cfg.EventStore.Bucket, Endpoint: cfg.EventStore.S3Endpoint, PathStyle: true,
		AccessKeyID: cfg.EventStore.S3AccessKeyID, SecretAccessKey: cfg.EventStore.S3SecretAccessKey.Value()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	st, err := eventstore.New(cfg.EventStore, eventstore.Deps{Pool: pool, Bucket: bucket, Logger: logger})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer func() { _ = st.Close() }()
	crasher, err := crashpoint.New(cfg.Testing.CrashPoint, cfg.Testing.CrashMarkerDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	rcfg := cfg.Relay
	rcfg.AppendTimeout, rcfg.Holder = cfg.EventStore.AppendTimeout, os.Getenv("RELAY_TEST_HOLDER")
	if v := os.Getenv("RELAY_TEST_CHECKPOINT_MAX_RECORDS"); v != "" {
		if rcfg.CheckpointMaxRecords, err = strconv.Atoi(v); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}
	r, err := New(rcfg, Deps{Store: st, Bucket: bucket, Pool: pool, Kafka: cfg.Kafka, Logger: logger, Crasher: crasher})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer r.Close()
	if err := r.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// env is one test's Postgres database, MinIO bucket, event store and kfake
// cluster.
type env struct {
	url        string
	pool       *pgxpool.Pool
	bucketName string
	bucket     objstore.Bucket
	store      *eventstore.Store
	kafka      *testenv.Kafka
	prefix     string
	appendTO   time.Duration
}

func newEnv(t testing.TB, appendTimeout time.Duration) *env {
	t.Helper()
	url, pool := testenv.NewMigratedDatabase(t)
	name := minio.NewBucket(t)
	b, err := s3store.New(context.Background(), s3store.Options{
		Bucket: name, Endpoint: minio.Endpoint, PathStyle: true,
		AccessKeyID: minio.AccessKey, SecretAccessKey: minio.SecretKey,
	})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{url: url, pool: pool, bucketName: name, bucket: b, kafka: testenv.NewKafka(t), prefix: testenv.UniqueName("t") + ".", appendTO: appendTimeout}
	e.store = e.newStore(t)
	return e
}

func (e *env) newStore(t testing.TB) *eventstore.Store {
	t.Helper()
	st, err := eventstore.New(eventstore.Config{
		GroupCommitMaxWait: 2 * time.Millisecond, GroupCommitMaxEvents: 500, AppendTimeout: e.appendTO,
	}, eventstore.Deps{Pool: e.pool, Bucket: e.bucket, Logger: testLogger(t, slog.LevelWarn)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func (e *env) commandsTopic() string { return e.prefix + "commands" }
func (e *env) eventsTopic() string   { return e.prefix + "events" }

// relayArgs are New's arguments, for a test to adjust before runRelay.
type relayArgs struct {
	Config Config
	Deps   Deps
	Opts   []Option
}

// new calls New with the arguments.
func (a relayArgs) new() (*Relay, error) { return New(a.Config, a.Deps, a.Opts...) }

// opts are a relay's arguments for tests over e: fast polling, short lease
// and timeouts.
func (e *env) opts(t testing.TB) relayArgs {
	return relayArgs{
		Config: Config{
			Name: "test", BatchSize: 200, KafkaFlushBatchSize: 200, KafkaFlushTimeout: 2 * time.Second,
			PollInterval: 100 * time.Millisecond, LeaderLease: 2 * time.Second, ParallelGets: 8,
			StallAfter: 3 * time.Second, Lookback: time.Minute, LookbackMaxKeys: 50,
			DedupMaxEvents: 10000, DedupCheckpointMaxEvents: 2000,
			AppendTimeout: e.appendTO,
		},
		Deps: Deps{
			Store: e.store, Bucket: e.bucket, Pool: e.pool,
			Kafka:  kafka.Config{Brokers: e.kafka.Brokers, TopicPrefix: e.prefix, TopicPartitions: 4, ReplicationFactor: 1},
			Logger: testLogger(t, slog.LevelInfo),
			Health: observability.NewHealth(),
		},
	}
}

// helperEnv returns the environment of a relay helper process.
func (e *env) helperEnviron(holder string, extra ...string) []string {
	vars := append(os.Environ(),
		helperEnv+"=1",
		"RELAY_TEST_HOLDER="+holder,
		"DATABASE_URL="+e.url,
		"EVENT_STORE_BACKEND=s3",
		"EVENT_STORE_BUCKET="+e.bucketName,
		"EVENT_STORE_S3_ENDPOINT="+minio.Endpoint,
		"EVENT_STORE_S3_ACCESS_KEY_ID="+minio.AccessKey,
		"EVENT_STORE_S3_SECRET_ACCESS_KEY="+minio.SecretKey,
		"EVENT_STORE_APPEND_TIMEOUT="+e.appendTO.String(),
		"KAFKA_BROKERS="+strings.Join(e.kafka.Brokers, ","),
		"KAFKA_TOPIC_PREFIX="+e.prefix,
		"KAFKA_TOPIC_PARTITIONS=4",
		"KAFKA_TOPIC_REPLICATION_FACTOR=1",
		"EVENT_PUBLISHER_NAME=test",
		"EVENT_PUBLISHER_POLL_INTERVAL=100ms",
		"EVENT_PUBLISHER_LEADER_LEASE_SECONDS=2",
		"EVENT_PUBLISHER_KAFKA_FLUSH_TIMEOUT_SECONDS=2",
		"EVENT_PUBLISHER_METRICS_LOG_INTERVAL_SECONDS=0",
		"SLUICE_HTTP_ADDR=",
	)
	return append(vars, extra...)
}

// helperProc is a running relay helper process.
type helperProc struct {
	cmd  *exec.Cmd
	done chan struct{}
	code int
}

func (e *env) startHelper(t *testing.T, holder string, extra ...string) *helperProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = e.helperEnviron(holder, extra...)
	cmd.Stdout = testWriter{t, holder}
	cmd.Stderr = testWriter{t, holder}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helperProc{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		h.code = cmd.ProcessState.ExitCode()
		close(h.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-h.done
	})
	return h
}

// wait waits for the process to exit and returns its exit code.
func (h *helperProc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-h.done:
		return h.code
	case <-time.After(timeout):
		t.Fatalf("relay process did not exit within %s", timeout)
		return -1
	}
}

func (h *helperProc) stop(t *testing.T) int {
	t.Helper()
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	return h.wait(t, 30*time.Second)
}

// runRelay runs a relay in-process until the test ends or stop is called.
func runRelay(t testing.TB, e *env, opts relayArgs) (r *Relay, stop func()) {
	t.Helper()
	r, err := opts.new()
	if err != nil {
		t.Fatal(err)
	}
	return r, testenv.RunInBackground(t, "relay Run", r.Run, r.Close)
}

type testWriter struct {
	t      testing.TB
	prefix string
}

func (w testWriter) Write(p []byte) (int, error) {
	for l := range strings.SplitSeq(strings.TrimRight(string(p), "\n"), "\n") {
		w.t.Log(w.prefix + " " + l)
	}
	return len(p), nil
}

func testLogger(t testing.TB, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t, "log"}, &slog.HandlerOptions{Level: level}))
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// command returns a command envelope for an aggregate.
func command(aggID string, n int) envelope.Envelope {
	return envelope.Envelope{
		EventID: uuid.NewString(), EventType: "DO_SOMETHING", Kind: envelope.KindCommand,
		AggregateType: "Order", AggregateID: aggID, Data: json.RawMessage(`{"n":` + strconv.Itoa(n) + `}`),
		OccurredAt: envelope.NewTimestamp(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)),
	}
}

// appendAll appends envelopes one call each from `writers` goroutines and
// returns the stored events by event id.
func appendAll(t testing.TB, st *eventstore.Store, writers int, envs []envelope.Envelope) map[string]eventstore.Event {
	t.Helper()
	ctx := ctxT(t, 5*time.Minute)
	var mu sync.Mutex
	out := make(map[string]eventstore.Event, len(envs))
	var wg sync.WaitGroup
	var firstErr error
	work := make(chan envelope.Envelope)
	for range writers {
		wg.Go(func() {
			for env := range work {
				res, err := st.AppendOne(ctx, env)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				if err == nil {
					out[res.Event.Envelope.EventID] = res.Event
				}
				mu.Unlock()
			}
		})
	}
	for _, e := range envs {
		work <- e
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	return out
}

// checkpoint reads the checkpoint object.
func (e *env) checkpoint(t testing.TB) Checkpoint {
	t.Helper()
	cp, _, found, err := NewCheckpointStore(e.bucket, "checkpoints/test.json").Load(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if !found {
		return Checkpoint{Position: -1}
	}
	return cp
}

// consumeAll reads every record of the topics from the beginning to their
// current end offsets.
func (e *env) consumeAll(t testing.TB, topics ...string) []*kgo.Record {
	t.Helper()
	ctx := ctxT(t, 2*time.Minute)
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.kafka.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topics...)
	if err != nil {
		t.Fatal(err)
	}
	parts := map[string]map[int32]kgo.Offset{}
	want := int64(0)
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil || o.Offset == 0 {
			return
		}
		if parts[o.Topic] == nil {
			parts[o.Topic] = map[int32]kgo.Offset{}
		}
		parts[o.Topic][o.Partition] = kgo.NewOffset().AtStart()
		want += o.Offset
	})
	if want == 0 {
		return nil
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(e.kafka.Brokers...), kgo.ConsumePartitions(parts))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	var out []*kgo.Record
	for int64(len(out)) < want {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d records: %v", len(out), want, err)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Logf("fetch %s/%d: %v", topic, p, err) })
		out = append(out, fs.Records()...)
	}
	return out
}

func header(r *kgo.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}
