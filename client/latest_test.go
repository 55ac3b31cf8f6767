package client

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// Latest puts as=latest on the three reads (and nothing when unset), and
// the schema_version the API sends comes back on the Event.
func TestLatestAsksForTheLatestVersion(t *testing.T) {
	var mu sync.Mutex
	var got []string // the as parameter of each request, "-" when absent
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		as := "-"
		if v, ok := r.URL.Query()["as"]; ok {
			as = v[0]
		}
		mu.Lock()
		got = append(got, as)
		mu.Unlock()
		version := 1
		if as == "latest" {
			version = 3
		}
		ev := fmt.Sprintf(`{"event_id":"e1","event_type":"OrderPlaced","kind":"domain","aggregate_type":"order","aggregate_id":"o1","sequence_number":1,"position":1,"occurred_at":"2026-11-27T10:00:00Z","data":{},"schema_version":%d}`, version)
		switch r.URL.Path {
		case "/v1/streams/order/o1/events":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"aggregate_type":"order","aggregate_id":"o1","last_sequence":1,"events":[%s]}`, ev)
		case "/v1/log":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"events":[%s],"next_from_position":2}`, ev)
		case "/v1/log/subscribe":
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "id: 1\nevent: event\ndata: %s\n\n", ev)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	c, err := New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	reads := []struct {
		name string
		read func(ctx context.Context, latest bool) (Event, error)
	}{
		{"stream", func(ctx context.Context, latest bool) (Event, error) {
			p, err := c.ReadStreamPage(ctx, "order", "o1", StreamOptions{Latest: latest})
			if err != nil {
				return Event{}, err
			}
			return p.Events[0], nil
		}},
		{"log", func(ctx context.Context, latest bool) (Event, error) {
			p, err := c.ReadLogPage(ctx, LogOptions{Latest: latest})
			if err != nil {
				return Event{}, err
			}
			return p.Events[0], nil
		}},
		{"subscribe", func(ctx context.Context, latest bool) (Event, error) {
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			for ev, err := range c.Subscribe(ctx, SubscribeOptions{FromPosition: 1, Latest: latest}) {
				return ev, err
			}
			return Event{}, fmt.Errorf("the subscription ended without an event")
		}},
	}
	for _, rd := range reads {
		for _, tc := range []struct {
			latest      bool
			wantAs      string
			wantVersion int
		}{{false, "-", 1}, {true, "latest", 3}} {
			t.Run(fmt.Sprintf("%s/latest=%t", rd.name, tc.latest), func(t *testing.T) {
				mu.Lock()
				got = nil
				mu.Unlock()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				ev, err := rd.read(ctx, tc.latest)
				if err != nil {
					t.Fatal(err)
				}
				mu.Lock()
				defer mu.Unlock()
				if len(got) == 0 || got[0] != tc.wantAs {
					t.Fatalf("as parameters sent %q, want first %q", got, tc.wantAs)
				}
				if ev.SchemaVersion != tc.wantVersion {
					t.Fatalf("SchemaVersion = %d, want %d", ev.SchemaVersion, tc.wantVersion)
				}
			})
		}
	}
}
