package client_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/testenv"
)

// endEach ends every subscription it serves after d, as a server that
// closes streams (a shutdown, a proxy's timeout) does.
func endEach(d time.Duration, conns *atomic.Int32) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			conns.Add(1)
			ctx, cancel := context.WithTimeout(r.Context(), d)
			defer cancel()
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
}

// seen is what a test sees of a subscription: its reconnections
// (OnReconnect) and the streams on which the server said where the head
// stands (": subscribed after position N", or "cursor C" on a store of
// several shards).
type seen struct {
	reconnects, heads atomic.Int32
}

// watch wraps next (the handler itself when nil) so that s.heads counts
// the head announcements the handler writes.
func (s *seen) watch(next func(http.Handler) http.Handler) func(http.Handler) http.Handler {
	return func(h http.Handler) http.Handler {
		if next != nil {
			h = next(h)
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.ServeHTTP(&headWriter{ResponseWriter: w, heads: &s.heads}, r)
		})
	}
}

// cutAndRefused waits until the subscription was told of two more
// disconnections than n, the count before its server stopped: the stream
// cut and at least one refused connection (the server is down).
func (s *seen) cutAndRefused(t *testing.T, n int32) {
	t.Helper()
	testenv.WaitFor(t, 10*time.Second, "the cut stream and a refused connection", func() bool { return s.reconnects.Load() >= n+2 })
}

// headWriter counts the head announcements written through it.
type headWriter struct {
	http.ResponseWriter
	heads *atomic.Int32
}

func (w *headWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	if bytes.Contains(b, []byte("subscribed after ")) { // position N, or cursor C on several shards
		w.heads.Add(1)
	}
	return n, err
}

func (w *headWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *headWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// A subscription delivers every event once and in order across the end
// of its streams and restarts of the server, resuming with Last-Event-ID.
func TestSubscribeResumes(t *testing.T) {
	cases := []struct {
		name string
		// from is the subscription's FromPosition (0: live from the head).
		from int64
		// serve returns the URL the subscription uses and a function that
		// disrupts it, calling during while it is disrupted. s is what the
		// test sees of the subscription.
		serve func(t *testing.T, b *backend, s *seen) (url string, disrupt func(during func()))
	}{
		{"the server ends each stream", 1, func(t *testing.T, b *backend, s *seen) (string, func(func())) {
			var conns atomic.Int32
			return b.serve(s.watch(endEach(700*time.Millisecond, &conns))), func(during func()) {
				n := conns.Load()
				testenv.WaitFor(t, 10*time.Second, "a stream ended and the subscription connected again", func() bool { return conns.Load() > n })
				during()
			}
		}},
		{"the server restarts", 1, func(t *testing.T, b *backend, s *seen) (string, func(func())) {
			r := newRestartable(t, s.watch(nil)(b.handler))
			return r.url(), func(during func()) {
				n := s.reconnects.Load()
				r.stop()
				during() // appended while the subscription's server is down
				s.cutAndRefused(t, n)
				r.start()
			}
		}},
		{"live from the head, the server restarts before the first event", 0, func(t *testing.T, b *backend, s *seen) (string, func(func())) {
			r := newRestartable(t, s.watch(nil)(b.handler))
			return r.url(), func(during func()) {
				n := s.reconnects.Load()
				r.stop()
				during()
				s.cutAndRefused(t, n)
				r.start()
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := newBackend(t, backendOptions{})
			writer := newClient(t, b.serve(nil))
			var s seen
			url, disrupt := tc.serve(t, b, &s)
			sub := newClient(t, url)
			ctx := ctxT(t)
			var want []string
			appendN := func(n int) {
				t.Helper()
				evs := make([]client.EventData, n)
				for i := range evs {
					evs[i] = reading(len(want) + i)
				}
				res, err := writer.Append(ctx, "Device", "sub", "", evs...)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range res.Events {
					want = append(want, e.EventID)
				}
			}
			if tc.from > 0 {
				appendN(3) // before the subscription: caught up
			}
			events := make(chan client.Event)
			errc := make(chan error, 1)
			subCtx, stop := context.WithCancel(ctx)
			defer stop()
			go func() {
				for ev, err := range sub.Subscribe(subCtx, client.SubscribeOptions{FromPosition: tc.from,
					OnReconnect: func(error, int64, time.Duration) { s.reconnects.Add(1) }}) {
					if err != nil {
						errc <- err
						return
					}
					events <- ev
				}
			}()
			var got []string
			receive := func() {
				t.Helper()
				for len(got) < len(want) {
					select {
					case ev := <-events:
						got = append(got, ev.EventID)
					case err := <-errc:
						t.Fatalf("the subscription ended: %v", err)
					case <-ctx.Done():
						t.Fatalf("received %d of %d events", len(got), len(want))
					}
				}
			}
			if tc.from == 0 {
				// Live from the head: what is appended before the server
				// fixed the head is not for this subscription.
				testenv.WaitFor(t, 10*time.Second, "the subscription at the head", func() bool { return s.heads.Load() > 0 })
			}
			receive()
			for range 2 {
				disrupt(func() { appendN(2) })
				receive()
			}
			// The last event appended closes the check: the stream is in
			// position order, so an event more (a duplicate after a
			// reconnection) arrives before it and the comparison below
			// finds it; no waiting for one that does not come.
			appendN(1)
			receive()
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("event %d is %s, want %s (got %v)", i, got[i], want[i], got)
				}
			}
			if s.reconnects.Load() < 2 {
				t.Fatalf("%d reconnections, want at least 2", s.reconnects.Load())
			}
			stop()
			select {
			case err := <-errc:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("the subscription ended with %v, want the context's error", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the subscription did not end with its context")
			}
		})
	}
}

// A subscription the API refuses (here: no token) ends with the error
// instead of retrying.
func TestSubscribeRefused(t *testing.T) {
	b := newBackend(t, backendOptions{tokens: []string{"secret"}})
	c := newClient(t, b.serve(nil))
	for _, err := range c.Subscribe(ctxT(t), client.SubscribeOptions{}) {
		var ae *client.Error
		if !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized {
			t.Fatalf("want 401, got %v", err)
		}
		return
	}
	t.Fatal("the subscription yielded nothing")
}
