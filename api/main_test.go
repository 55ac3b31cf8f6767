package api

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/eventstore/eventstoretest"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/api/apitest"
	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/eventstore/objstore/filestore"
	"github.com/sluicehq/sluice/eventstore/objstore/s3store"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/envelope"
)

// minioServer is started on first use (fuzz workers and tests on the file
// backend never start it) and stopped by TestMain.
type minioServer struct {
	once sync.Once
	m    *testenv.MinIO
	err  error
}

var sharedMinIO minioServer

func (s *minioServer) get(t testing.TB) *testenv.MinIO {
	t.Helper()
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		s.m, s.err = testenv.StartMinIO(ctx)
	})
	if s.err != nil {
		t.Fatalf("start MinIO: %v", s.err)
	}
	return s.m
}

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedMinIO.m != nil {
		sharedMinIO.m.Close()
	}
	os.Exit(code)
}

// testAPI is one test's API over a real Postgres and a real bucket.
type testAPI struct {
	t       testing.TB
	h       http.Handler
	store   *eventstore.Store
	reg     *registry.Registry
	pool    *pgxpool.Pool
	bucket  objstore.Bucket
	backend string
}

type apiConfig struct {
	minio bool
	// cfg and deps adjust the API's Config and Deps.
	cfg  func(*Config)
	deps func(*Deps)
	// store adjusts the event store's configuration.
	store func(*eventstore.Config)
}

func newTestAPI(t testing.TB, c apiConfig) *testAPI {
	t.Helper()
	_, pool := testenv.NewMigratedDatabase(t)
	var bucket objstore.Bucket
	backend := "file"
	if c.minio {
		backend = "minio"
		mi := sharedMinIO.get(t)
		b, err := s3store.New(context.Background(), s3store.Options{
			Bucket: mi.NewBucket(t), Endpoint: mi.Endpoint, PathStyle: true,
			AccessKeyID: mi.AccessKey, SecretAccessKey: mi.SecretKey,
		})
		if err != nil {
			t.Fatal(err)
		}
		bucket = b
	} else {
		b, err := filestore.New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		bucket = b
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	scfg := eventstore.Config{GroupCommitMaxWait: 2 * time.Millisecond, GroupCommitMaxEvents: 500, AppendTimeout: 30 * time.Second}
	if c.store != nil {
		c.store(&scfg)
	}
	st, err := eventstore.New(scfg, eventstore.Deps{Pool: pool, Bucket: bucket, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	reg, err := registry.New(registry.Config{Owner: "api-test", BackoffBase: time.Millisecond, BackoffCap: 2 * time.Millisecond}, registry.Deps{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	var cfg Config
	if c.cfg != nil {
		c.cfg(&cfg)
	}
	deps := Deps{Store: st, Registry: reg, Sequences: st, Logger: logger}
	if c.deps != nil {
		c.deps(&deps)
	}
	h, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	return &testAPI{t: t, h: h, store: st, reg: reg, pool: pool, bucket: bucket, backend: backend}
}

// reply is a recorded response.
type reply struct {
	code   int
	header http.Header
	body   []byte
	json   map[string]any
}

func (r reply) str(key string) string {
	v, _ := r.json[key].(string)
	return v
}

func (r reply) num(key string) int64 {
	v, _ := r.json[key].(float64)
	return int64(v)
}

// do sends one request; headers are "Name: value" strings. A JSON body gets
// Content-Type application/json unless a header sets it.
func (a *testAPI) do(method, target, body string, headers ...string) reply {
	a.t.Helper()
	return doHandler(a.t, a.h, method, target, body, headers...)
}

func doHandler(t testing.TB, h http.Handler, method, target, body string, headers ...string) reply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, target, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ":")
		if v = strings.TrimSpace(v); v == "" && strings.HasSuffix(h, ":") {
			req.Header.Del(k)
			continue
		}
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	openAPIValidator(t).Handler(t, h).ServeHTTP(rec, req)
	r := reply{code: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
	if ct := rec.Header().Get("Content-Type"); strings.HasPrefix(ct, "application/json") || strings.HasPrefix(ct, "application/problem+json") {
		if err := json.Unmarshal(r.body, &r.json); err != nil {
			t.Fatalf("%s %s: reply is not a JSON object: %v\n%s", method, target, err, r.body)
		}
	}
	return r
}

// openAPIValidator is the validator of the served document, loaded once
// per test binary: every exchange of the suite goes through it (doHandler),
// so a reply the document does not describe fails the test.
var openAPIValidator = sync.OnceValue(func() func(testing.TB) *apitest.Validator {
	v, err := apitest.New(OpenAPI())
	return func(t testing.TB) *apitest.Validator {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
})()

// expect fails unless the reply has the status (and, when code is set, the
// error code).
func (r reply) expect(t testing.TB, status int, code string) reply {
	t.Helper()
	if r.code != status || (code != "" && r.str("error") != code) {
		t.Fatalf("got %d %s, want %d %s\n%s", r.code, r.str("error"), status, code, r.body)
	}
	return r
}

// appendsCount is the number of rows in the event store's index.
func (a *testAPI) appendsCount() int {
	a.t.Helper()
	n, err := eventstoretest.Count(context.Background(), a.pool, eventstoretest.Filter{})
	if err != nil {
		a.t.Fatal(err)
	}
	return int(n)
}

// stream returns the instance's stored events.
func (a *testAPI) stream(aggID string) []eventstore.Event {
	a.t.Helper()
	evs, err := a.store.Stream(context.Background(), envelope.AggregateTypeInstance, aggID, 1, 0, "")
	if err != nil {
		a.t.Fatal(err)
	}
	return evs
}

// domain appends the domain event of command slot seq, as the instance
// worker would.
func (a *testAPI) domain(aggID string, seq int64, eventType, data string) {
	a.t.Helper()
	cmd, err := a.store.Command(context.Background(), envelope.AggregateTypeInstance, aggID, seq)
	if err != nil {
		a.t.Fatal(err)
	}
	cid := cmd.Envelope.Metadata.CommandID()
	e := envelope.Envelope{
		EventID:   envelope.DomainEventID(cid, eventType, envelope.AggregateTypeInstance, aggID).String(),
		EventType: eventType, Kind: envelope.KindDomain, AggregateType: envelope.AggregateTypeInstance,
		AggregateID: aggID, SequenceNumber: seq, Data: json.RawMessage(data),
	}
	e.Metadata.SetString(envelope.MetaCommandID, cid)
	e.Metadata.SetString(envelope.MetaCausationID, cmd.Envelope.EventID)
	r, err := a.store.AppendOne(context.Background(), e)
	if err != nil {
		a.t.Fatal(err)
	}
	if r.Err != nil {
		a.t.Fatal(r.Err)
	}
}

// finish claims and marks done a command in the registry, as the instance
// worker would, with the outcome.
func (a *testAPI) finish(eventID, aggID string, seq int64, out claim.Outcome) {
	a.t.Helper()
	lease := a.claim(eventID, aggID, seq)
	if err := a.reg.MarkDone(context.Background(), lease, out); err != nil {
		a.t.Fatal(err)
	}
}

func (a *testAPI) claim(eventID, aggID string, seq int64) claim.Lease {
	a.t.Helper()
	// The instance worker's runtime keys the aggregate with
	// envelope.AggregateKey (consumer.DefaultAggregateKey).
	res, err := a.reg.Claim(context.Background(), claim.Request{Handler: DefaultHandler, EventID: eventID,
		AggregateID: envelope.AggregateKey(envelope.AggregateTypeInstance, aggID), Seq: seq, Policy: claim.WaitForPredecessor})
	if err != nil {
		a.t.Fatal(err)
	}
	if res.Kind != claim.Claimed {
		a.t.Fatalf("claim %s: %v", eventID, res.Kind)
	}
	return res.Lease
}
