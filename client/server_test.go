package client_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore/filestore"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/shared/config"
)

// backend is the real API handler over a real event store: a fresh
// migrated Postgres database and the file object store, as `sluice api`
// builds it (the event routes mounted, subscriptions woken by the store's
// commit notifications).
type backend struct {
	t       testing.TB
	store   *eventstore.Store
	handler http.Handler
}

type backendOptions struct {
	tokens []string
	// shards is the store's number of shards (0: one).
	shards int
}

func newBackend(t testing.TB, o backendOptions) *backend {
	t.Helper()
	_, pool := testenv.NewMigratedDatabase(t)
	bucket, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bucket.Close() })
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := eventstore.New(eventstore.Config{Shards: o.shards, GroupCommitMaxWait: 2 * time.Millisecond, GroupCommitMaxEvents: 500, AppendTimeout: 30 * time.Second},
		eventstore.Deps{Pool: pool, Bucket: bucket, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	reg, err := registry.New(registry.Config{Owner: "client-test"}, registry.Deps{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var tokens []config.Secret
	for _, tok := range o.tokens {
		tokens = append(tokens, config.Secret(tok))
	}
	h, err := api.New(api.Config{Settings: api.Settings{Tokens: tokens}, SSEPollInterval: 200 * time.Millisecond, SSEHeartbeat: time.Second},
		api.Deps{Store: st, Registry: reg, Sequences: st, Logger: logger, Events: st, Commits: api.StoreCommits(ctx, st)})
	if err != nil {
		t.Fatal(err)
	}
	return &backend{t: t, store: st, handler: h}
}

// serve serves the backend, through wrap when given, until the test ends.
func (b *backend) serve(wrap func(http.Handler) http.Handler) string {
	b.t.Helper()
	h := b.handler
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	b.t.Cleanup(srv.Close)
	return srv.URL
}

// newClient is a client of url with quick retries.
func newClient(t testing.TB, url string, opts ...client.Option) *client.Client {
	t.Helper()
	opts = append([]client.Option{
		client.WithRetry(client.RetryPolicy{InitialInterval: 20 * time.Millisecond, MaxInterval: 200 * time.Millisecond}),
		client.WithPollPolicy(client.RetryPolicy{InitialInterval: 20 * time.Millisecond, MaxInterval: 200 * time.Millisecond}),
	}, opts...)
	c, err := client.New(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// restartable serves a handler on a fixed address and can be stopped
// (every connection cut, as when the process dies) and started again on
// the same address.
type restartable struct {
	t    testing.TB
	h    http.Handler
	addr string
	mu   sync.Mutex
	srv  *http.Server
}

func newRestartable(t testing.TB, h http.Handler) *restartable {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &restartable{t: t, h: h, addr: ln.Addr().String()}
	r.serve(ln)
	t.Cleanup(r.stop)
	return r
}

func (r *restartable) url() string { return "http://" + r.addr }

func (r *restartable) serve(ln net.Listener) {
	srv := &http.Server{Handler: r.h, ReadHeaderTimeout: 5 * time.Second}
	r.mu.Lock()
	r.srv = srv
	r.mu.Unlock()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			r.t.Errorf("serve: %v", err)
		}
	}()
}

// stop closes the listener and every connection at once.
func (r *restartable) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.srv != nil {
		_ = r.srv.Close()
		r.srv = nil
	}
}

// start listens on the same address again.
func (r *restartable) start() {
	r.t.Helper()
	var ln net.Listener
	var err error
	for range 50 {
		if ln, err = net.Listen("tcp", r.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond) // paces the retries while the old listener's port is released; no assertion follows it
	}
	if err != nil {
		r.t.Fatalf("listen %s again: %v", r.addr, err)
	}
	r.serve(ln)
}
