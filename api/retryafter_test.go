package api

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/envelope"
)

// blockingStore holds every Append until release is closed, after telling
// entered.
type blockingStore struct {
	EventStore
	entered chan struct{}
	release chan struct{}
}

func (b blockingStore) Append(ctx context.Context, envs ...envelope.Envelope) ([]eventstore.Result, error) {
	b.entered <- struct{}{}
	<-b.release
	return b.EventStore.Append(ctx, envs...)
}

// failingStore fails every Append with err.
type failingStore struct {
	EventStore
	err error
}

func (f failingStore) Append(context.Context, ...envelope.Envelope) ([]eventstore.Result, error) {
	return nil, f.err
}

// downRegistry answers every read with the registry's outage error.
type downRegistry struct{ CommandRegistry }

func (downRegistry) Get(context.Context, string) ([]claim.Row, error) {
	return nil, fmt.Errorf("registry: get: %w", registry.ErrUnavailable)
}

func (downRegistry) LastSequence(context.Context, string, string) (int64, error) {
	return 0, fmt.Errorf("registry: last sequence: %w", registry.ErrUnavailable)
}

// Every 429 and 503 carries Retry-After (issue 27 item 5): the one the
// cause names (an object-storage outage's), else one second — so that a
// client that honours it neither hammers a struggling dependency nor gives
// up. Each reply is also checked against the OpenAPI document (doHandler),
// which requires the header on both.
func TestRetryAfter(t *testing.T) {
	cases := []struct {
		name  string
		cfg   apiConfig
		do    func(t *testing.T, a *testAPI) reply
		code  int
		after string
	}{
		{"429 over the in-flight limit", apiConfig{}, func(t *testing.T, a *testAPI) reply {
			// Replace the handler with one whose store holds the first
			// command: the second request finds no free slot.
			bs := blockingStore{EventStore: a.store, entered: make(chan struct{}), release: make(chan struct{})}
			h, err := New(Config{Settings: Settings{MaxInFlight: 1}}, Deps{Store: bs, Registry: a.reg, Sequences: a.store})
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan *httptest.ResponseRecorder, 1)
			go func() {
				req := httptest.NewRequest("POST", base, strings.NewReader(`{"instance_id":"o-1"}`))
				req.Header.Set("Content-Type", "application/json")
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				done <- rec
			}()
			select {
			case <-bs.entered:
			case <-time.After(10 * time.Second):
				t.Fatal("the first command never reached the store")
			}
			r := doHandler(t, h, "GET", "/v1/commands/c-1", ``)
			close(bs.release)
			if first := <-done; first.Code != http.StatusAccepted {
				t.Fatalf("the held command: %d %s", first.Code, first.Body)
			}
			// The slot is free again.
			doHandler(t, h, "GET", base+"/o-1", ``).expect(t, http.StatusNotFound, CodeInstanceNotFound)
			// A subscription holds its connection but takes no slot.
			h, err = New(Config{Settings: Settings{MaxInFlight: 1}, SSEPollInterval: 20 * time.Millisecond, SSEHeartbeat: 50 * time.Millisecond},
				Deps{Store: a.store, Registry: a.reg, Sequences: a.store, Events: a.store})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(h)
			defer srv.Close()
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			openSSE(t, ctx, srv.URL+"/v1/log/subscribe?from_position=1", "")
			doHandler(t, h, "GET", base+"/o-1", ``).expect(t, http.StatusNotFound, CodeInstanceNotFound)
			return r.expect(t, http.StatusTooManyRequests, CodeTooManyRequests)
		}, http.StatusTooManyRequests, "1"},
		{"503 registry down", apiConfig{deps: func(d *Deps) { d.Registry = downRegistry{d.Registry} }}, func(t *testing.T, a *testAPI) reply {
			// Appending needs no registry; reading the status does.
			a.do("POST", base, `{"instance_id":"o-1"}`, "Idempotency-Key: c-1").expect(t, http.StatusAccepted, "")
			return a.do("GET", "/v1/commands/c-1", ``)
		}, http.StatusServiceUnavailable, "1"},
		{"503 store failure without a delay", apiConfig{deps: func(d *Deps) {
			d.Store = failingStore{d.Store, fmt.Errorf("eventstore: commit: connection reset")}
		}}, func(t *testing.T, a *testAPI) reply {
			return a.do("POST", base, `{"instance_id":"o-1"}`, "Idempotency-Key: c-1")
		}, http.StatusServiceUnavailable, "1"},
		{"503 object storage outage names its delay", apiConfig{deps: func(d *Deps) {
			d.Store = failingStore{d.Store, &eventstore.UnavailableError{Dependency: "objectstore", RetryAfter: 2500 * time.Millisecond, Err: fmt.Errorf("hung")}}
		}}, func(t *testing.T, a *testAPI) reply {
			return a.do("POST", base, `{"instance_id":"o-1"}`, "Idempotency-Key: c-1")
		}, http.StatusServiceUnavailable, "3"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := newTestAPI(t, c.cfg)
			r := c.do(t, a)
			if r.code != c.code {
				t.Fatalf("status %d, want %d: %s", r.code, c.code, r.body)
			}
			if got := r.header.Get("Retry-After"); got != c.after {
				t.Fatalf("Retry-After %q, want %q", got, c.after)
			}
			if n, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || n < 1 {
				t.Fatalf("Retry-After %q is not a delay in seconds", r.header.Get("Retry-After"))
			}
			if r.num("status") != int64(c.code) {
				t.Fatalf("problem status: %s", r.body)
			}
		})
	}
}
