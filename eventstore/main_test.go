package eventstore

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/eventstore/objstore/s3store"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/shared/crashpoint"
	"github.com/sluicehq/sluice/shared/envelope"
)

// The MinIO server of the package's tests, started by the first test that
// needs one (the tests of decide and FuzzDecide do not: a fuzz worker
// starts no server).
var (
	minioOnce sync.Once
	minioSrv  *testenv.MinIO
	minioErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if minioSrv != nil {
		minioSrv.Close()
	}
	os.Exit(code)
}

// minioServer returns the package's MinIO server, started at the first call.
func minioServer(t testing.TB) *testenv.MinIO {
	t.Helper()
	minioOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		minioSrv, minioErr = testenv.StartMinIO(ctx)
	})
	if minioErr != nil {
		t.Fatalf("MinIO is required by this test: %v", minioErr)
	}
	return minioSrv
}

// countingBucket wraps a bucket, counts requests and can fail or delay them.
type countingBucket struct {
	objstore.Bucket
	creates, gets, ranges, lists atomic.Int64
	// createErr, when set, is returned after (writeThrough) or instead of
	// the real Create.
	mu           sync.Mutex
	createErr    error
	writeThrough bool
	// getErr, when set, is returned instead of the real Get.
	getErr error
}

func (b *countingBucket) Create(ctx context.Context, key string, body []byte) (objstore.ObjectInfo, error) {
	b.creates.Add(1)
	b.mu.Lock()
	cerr, through := b.createErr, b.writeThrough
	b.mu.Unlock()
	if cerr != nil {
		if through {
			_, _ = b.Bucket.Create(ctx, key, body)
		}
		return objstore.ObjectInfo{}, cerr
	}
	return b.Bucket.Create(ctx, key, body)
}

func (b *countingBucket) Get(ctx context.Context, key string) ([]byte, objstore.ObjectInfo, error) {
	b.gets.Add(1)
	b.mu.Lock()
	gerr := b.getErr
	b.mu.Unlock()
	if gerr != nil {
		return nil, objstore.ObjectInfo{}, gerr
	}
	return b.Bucket.Get(ctx, key)
}

// fail sets the injected Create and Get errors (nil: none).
func (b *countingBucket) fail(createErr error, writeThrough bool, getErr error) {
	b.mu.Lock()
	b.createErr, b.writeThrough, b.getErr = createErr, writeThrough, getErr
	b.mu.Unlock()
}

func (b *countingBucket) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	b.ranges.Add(1)
	return b.Bucket.GetRange(ctx, key, off, n)
}

func (b *countingBucket) List(ctx context.Context, prefix, startAfter string, limit int) ([]objstore.ObjectInfo, error) {
	b.lists.Add(1)
	return b.Bucket.List(ctx, prefix, startAfter, limit)
}

// env is one test's Postgres database and MinIO bucket.
type env struct {
	url    string
	pool   *pgxpool.Pool // with tracer
	tracer *testenv.RoundTrips
	bucket *countingBucket
}

func newEnv(t testing.TB) *env {
	t.Helper()
	url, _ := testenv.NewMigratedDatabase(t)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	tr := &testenv.RoundTrips{}
	cfg.ConnConfig.Tracer = tr
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	minio := minioServer(t)
	name := minio.NewBucket(t)
	b, err := s3store.New(context.Background(), s3store.Options{
		Bucket: name, Endpoint: minio.Endpoint, PathStyle: true,
		AccessKeyID: minio.AccessKey, SecretAccessKey: minio.SecretKey,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := objstore.SelfTest(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	return &env{url: url, pool: pool, tracer: tr, bucket: &countingBucket{Bucket: b}}
}

// store opens a Store on the environment; it is closed when the test ends.
// Its log goes to the test log.
func (e *env) store(t testing.TB, cfg Config, opts ...Option) *Store {
	t.Helper()
	return e.storeLogging(t, cfg, slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})), opts...)
}

func (e *env) storeLogging(t testing.TB, cfg Config, log *slog.Logger, opts ...Option) *Store {
	t.Helper()
	s, err := New(cfg, Deps{Pool: e.pool, Bucket: e.bucket, Logger: log}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// named is cfg with WriterID id.
func named(cfg Config, id string) Config {
	cfg.WriterID = id
	return cfg
}

// crashAt is what a test does at the store's crash points (WithCrasher):
// a non-nil error stops the group there as a crashed process would.
type crashAt struct {
	afterReserve, afterPut func(ctx context.Context, segmentKey string) error
}

func (c *crashAt) option() Option {
	return WithCrasher(crashpoint.Func(func(ctx context.Context, worker, point, key string) error {
		h := c.afterReserve
		if point == "after_put" {
			h = c.afterPut
		}
		if worker != CrashWorker || h == nil {
			return nil
		}
		return h(ctx, key)
	}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// levelRecorder records the levels of log records.
type levelRecorder struct {
	mu     sync.Mutex
	levels []slog.Level
}

func (r *levelRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *levelRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.levels = append(r.levels, rec.Level)
	return nil
}
func (r *levelRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *levelRecorder) WithGroup(string) slog.Handler      { return r }

func testConfig() Config {
	return Config{GroupCommitMaxWait: 2 * time.Millisecond, GroupCommitMaxEvents: 500, AppendTimeout: 30 * time.Second}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// command returns a command envelope for an aggregate.
func command(aggType, aggID string, data any) envelope.Envelope {
	if _, ok := data.(map[string]any); !ok {
		data = map[string]any{"v": data}
	}
	b, _ := json.Marshal(data)
	return envelope.Envelope{
		EventID: uuid.NewString(), EventType: "DO_SOMETHING", Kind: envelope.KindCommand,
		AggregateType: aggType, AggregateID: aggID, Data: b,
		OccurredAt: envelope.NewTimestamp(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)),
	}
}

func domainEvent(aggType, aggID string, data any) envelope.Envelope {
	e := command(aggType, aggID, data)
	e.Kind, e.EventType = envelope.KindDomain, "SOMETHING_DONE"
	return e
}

func expect(n int64) *int64 { return &n }

// mustAppend appends and fails on any error.
func mustAppend(t testing.TB, s *Store, envs ...envelope.Envelope) []Result {
	t.Helper()
	rs, err := s.Append(ctxT(t), envs...)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		if r.Err != nil {
			t.Fatalf("append %d: %v", i, r.Err)
		}
	}
	return rs
}

// tableSnapshot is the index content that the segments determine.
type tableSnapshot struct {
	appends   []string
	sequences []string
	head      int64    // shard 0's next position
	heads     []string // every shard's next position, by shard
}

func snapshot(t testing.TB, pool *pgxpool.Pool) tableSnapshot {
	t.Helper()
	ctx := ctxT(t)
	var s tableSnapshot
	// shard 0's rows as before shards (TestReservationOutcomes compares them
	// with what the store wrote then); other shards' prefixed with s{shard}
	s.appends = queryStrings(t, pool, `SELECT concat_ws('|', CASE WHEN shard <> 0 THEN 's' || shard END, position, event_id, kind, aggregate_type, aggregate_id, sequence_number, state,
		segment_key, byte_offset, byte_length, encode(canonical_hash, 'hex'), occurred_at) FROM sluice.appends ORDER BY shard, position`)
	s.sequences = queryStrings(t, pool, `SELECT concat_ws('|', aggregate_type, aggregate_id, last_sequence) FROM sluice.sequences ORDER BY 1`)
	s.heads = queryStrings(t, pool, `SELECT shard || ':' || next_position FROM sluice.log_head ORDER BY shard`)
	if err := pool.QueryRow(ctx, `SELECT coalesce((SELECT next_position FROM sluice.log_head WHERE shard = 0), 0)`).Scan(&s.head); err != nil {
		t.Fatal(err)
	}
	return s
}

// queryStrings runs sql, a query of one text column, and returns its rows.
func queryStrings(t testing.TB, pool *pgxpool.Pool, sql string) []string {
	t.Helper()
	rows, err := pool.Query(ctxT(t), sql)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func rowState(t testing.TB, pool *pgxpool.Pool, eventID string) string {
	t.Helper()
	var st string
	err := pool.QueryRow(ctxT(t), `SELECT state FROM sluice.appends WHERE event_id = $1::uuid`, eventID).Scan(&st)
	if err == pgx.ErrNoRows {
		return "none"
	}
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func describe(r Result) string {
	if r.Err != nil {
		return "error: " + r.Err.Error()
	}
	return fmt.Sprintf("seq %d pos %d dup %v", r.Event.Envelope.SequenceNumber, r.Event.Envelope.Position, r.Duplicate)
}
