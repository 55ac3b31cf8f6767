package readmodel_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/esserver"
	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/shared/failure"
)

// TestOutagesAreDetected: every Elasticsearch request of a NewClient
// client has a deadline, so a frozen cluster fails within one request
// timeout; the failure of each kind of outage is classified as an outage
// (readmodel.StatusError carries its HTTP status), a 400 as permanent; the
// Availability it is reported to turns red on outages only and green again
// by itself (its check pings) once the cluster answers.
func TestOutagesAreDetected(t *testing.T) {
	es := esserver.New()
	frozen := make(chan struct{})
	t.Cleanup(func() { close(frozen) })
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedURL := "http://" + closed.Addr().String()
	closed.Close()
	tests := []struct {
		name  string
		serve http.HandlerFunc // nil: a closed port
		class failure.Class
	}{
		{"closed port", nil, failure.Outage},
		{"frozen", func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-frozen:
			case <-r.Context().Done():
			}
		}, failure.Outage},
		{"503", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }, failure.Outage},
		{"429", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTooManyRequests) }, failure.Outage},
		{"400", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Elastic-Product", "Elasticsearch")
			w.WriteHeader(http.StatusBadRequest)
		}, failure.Permanent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var back atomic.Bool
			url := closedURL
			if tc.serve != nil {
				ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if back.Load() {
						es.ServeHTTP(w, r)
						return
					}
					tc.serve(w, r)
				}))
				t.Cleanup(ts.Close)
				url = ts.URL
			}
			client, err := readmodel.NewClient(readmodel.Config{URLs: []string{url}, RequestTimeout: 200 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			a := &readmodel.Availability{ES: client}
			_, err = readmodel.EnsureIndex(ctx, client, "sluice_", "h", 1)
			if err == nil {
				t.Fatal("EnsureIndex succeeded")
			}
			if c := failure.Classify(ctx, a.Observe(ctx, err)); c != tc.class {
				t.Errorf("class %s (%v), want %s", c, err, tc.class)
			}
			out, _ := a.Out()
			if red := a.Check(ctx) != nil; out != (tc.class == failure.Outage) || red != out {
				t.Errorf("out %v, check red %v after %v", out, red, err)
			}
			if tc.serve == nil || tc.class != failure.Outage {
				return
			}
			back.Store(true)
			if err := a.Check(ctx); err != nil {
				t.Errorf("check still red once the cluster answers: %v", err)
			}
		})
	}
}

// TestItemOutageNeedsAWrite: an outage seen as refused bulk items (the
// cluster answers, but rejects writes) is not cleared by the check's ping,
// only by a request whose items are accepted.
func TestItemOutageNeedsAWrite(t *testing.T) {
	ts := httptest.NewServer(esserver.New())
	t.Cleanup(ts.Close)
	client, err := readmodel.NewClient(readmodel.Config{URLs: []string{ts.URL}, RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a := &readmodel.Availability{ES: client}
	a.ObserveItems(ctx, &readmodel.StatusError{Op: "bulk item", Status: http.StatusTooManyRequests})
	if err := a.Check(ctx); err == nil {
		t.Fatal("check green after refused items")
	}
	a.ObserveItems(ctx, errors.New("a document error, not an outage"))
	if err := a.Check(ctx); err == nil {
		t.Fatal("check green after a non-outage item error")
	}
	a.ObserveItems(ctx, nil)
	if err := a.Check(ctx); err != nil {
		t.Fatalf("check red after accepted items: %v", err)
	}
}
