package minioext_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/eventstore/objstore/minioext"
)

// fakeListen serves the two calls ListenSegments makes (HEAD bucket and the
// listen stream) and flushes every event at once, as a correct MinIO does;
// it tests the wrapper's latency, coalescing and reconnects independently
// of the MinIO build.
type fakeListen struct {
	mu        sync.Mutex
	streams   []chan string // one per open listen stream
	failNext  atomic.Int32  // answer this many listen requests with 403
	subscribe chan struct{}
}

func (f *fakeListen) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodHead:
		w.WriteHeader(http.StatusOK)
	case r.URL.Query().Has("location"):
		fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><LocationConstraint xmlns="http://s3.amazonaws.com/doc/2006-03-01/">us-east-1</LocationConstraint>`)
	case r.URL.Query().Has("events"):
		if f.failNext.Load() > 0 {
			f.failNext.Add(-1)
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>Access Denied.</Message></Error>`)
			return
		}
		ch := make(chan string, 16)
		f.mu.Lock()
		f.streams = append(f.streams, ch)
		f.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case f.subscribe <- struct{}{}:
		default:
		}
		for {
			select {
			case key, ok := <-ch:
				if !ok {
					return // the server drops the stream
				}
				fmt.Fprintf(w, `{"Records":[{"eventName":"s3:ObjectCreated:Put","s3":{"object":{"key":%q}}}]}`+"\n", key)
				w.(http.Flusher).Flush()
			case <-r.Context().Done():
				return
			}
		}
	default:
		http.Error(w, "unexpected", http.StatusBadRequest)
	}
}

func (f *fakeListen) publish(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ch := range f.streams {
		ch <- key
	}
}

// dropStreams ends every open stream (the server restarts them).
func (f *fakeListen) dropStreams() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ch := range f.streams {
		close(ch)
	}
	f.streams = nil
}

func TestListenSegmentsWithFlushingServer(t *testing.T) {
	fake := &fakeListen{subscribe: make(chan struct{}, 1)}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	c, err := minioext.New(minioext.Options{
		Endpoint: srv.URL, AccessKeyID: "k", SecretAccessKey: "s",
		ReconnectMin: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	wake, err := c.ListenSegments(ctx, "bucket", "segments/")
	if err != nil {
		t.Fatal(err)
	}
	waitSubscribed := func() {
		t.Helper()
		select {
		case <-fake.subscribe:
		case <-time.After(10 * time.Second):
			t.Fatal("no listen stream opened")
		}
	}
	expectWake := func(within time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		select {
		case _, ok := <-wake:
			if !ok {
				t.Fatal("wake-up channel closed")
			}
		case <-time.After(within):
			t.Fatalf("no wake-up within %v", within)
		}
		return time.Since(start)
	}
	waitSubscribed()

	// One event: one prompt wake-up.
	fake.publish("segments/1.jsonl")
	t.Logf("wake-up latency: %v", expectWake(time.Second))

	// A burst coalesces into one pending wake-up. Nothing reads the
	// channel while 10 events arrive; then the server ends the stream, and
	// minio-go reads a stream to its end before it subscribes again: the
	// new subscription is the evidence that every event of the burst was
	// delivered to the listener, which must have left one wake-up pending.
	for i := range 10 {
		fake.publish(fmt.Sprintf("segments/%d.jsonl", i+2))
	}
	fake.dropStreams()
	waitSubscribed()
	if n := len(wake); n != 1 {
		t.Fatalf("%d wake-ups pending after a burst of 10 events, want 1", n)
	}
	expectWake(time.Second)

	// The server drops the stream: minio-go re-subscribes by itself and
	// later events arrive again.
	fake.dropStreams()
	waitSubscribed()
	fake.publish("segments/after-drop.jsonl")
	expectWake(time.Second)

	// The server refuses a re-subscription (an error minio-go gives up
	// on): ListenSegments retries with backoff, wakes the caller because
	// events may have been missed, and delivers later events.
	fake.failNext.Store(2)
	fake.dropStreams()
	waitSubscribed()
	expectWake(time.Second) // the reconnect wake-up
	if n := fake.failNext.Load(); n != 0 {
		t.Fatalf("%d refusals left unconsumed", n)
	}
	fake.publish("segments/after-refusal.jsonl")
	expectWake(time.Second)

	cancel()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case _, ok := <-wake:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("channel not closed after the context ended")
		}
	}
}
