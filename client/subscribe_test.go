package client_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/client"
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

// A subscription delivers every event once and in order across the end
// of its streams and restarts of the server, resuming with Last-Event-ID.
func TestSubscribeResumes(t *testing.T) {
	cases := []struct {
		name string
		// from is the subscription's FromPosition (0: live from the head).
		from int64
		// serve returns the URL the subscription uses and a function that
		// disrupts it, calling during while it is disrupted.
		serve func(t *testing.T, b *backend) (url string, disrupt func(during func()))
	}{
		{"the server ends each stream", 1, func(t *testing.T, b *backend) (string, func(func())) {
			var conns atomic.Int32
			return b.serve(endEach(700*time.Millisecond, &conns)), func(during func()) {
				n := conns.Load()
				for conns.Load() == n {
					time.Sleep(20 * time.Millisecond)
				}
				during()
			}
		}},
		{"the server restarts", 1, func(t *testing.T, b *backend) (string, func(func())) {
			r := newRestartable(t, b.handler)
			return r.url(), func(during func()) {
				r.stop()
				during()                           // appended while the subscription's server is down
				time.Sleep(300 * time.Millisecond) // refused connections meanwhile
				r.start()
			}
		}},
		{"live from the head, the server restarts before the first event", 0, func(t *testing.T, b *backend) (string, func(func())) {
			r := newRestartable(t, b.handler)
			return r.url(), func(during func()) {
				r.stop()
				during()
				time.Sleep(300 * time.Millisecond)
				r.start()
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := newBackend(t, backendOptions{})
			writer := newClient(t, b.serve(nil))
			url, disrupt := tc.serve(t, b)
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
			var reconnects atomic.Int32
			events := make(chan client.Event)
			errc := make(chan error, 1)
			subCtx, stop := context.WithCancel(ctx)
			defer stop()
			go func() {
				for ev, err := range sub.Subscribe(subCtx, client.SubscribeOptions{FromPosition: tc.from,
					OnReconnect: func(error, int64, time.Duration) { reconnects.Add(1) }}) {
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
				time.Sleep(300 * time.Millisecond) // connected at the head
			}
			receive()
			for range 2 {
				disrupt(func() { appendN(2) })
				receive()
			}
			appendN(1)
			receive()
			select {
			case ev := <-events:
				t.Fatalf("an event more: %s at %d", ev.EventID, ev.Position)
			case <-time.After(300 * time.Millisecond):
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("event %d is %s, want %s (got %v)", i, got[i], want[i], got)
				}
			}
			if reconnects.Load() < 2 {
				t.Fatalf("%d reconnections, want at least 2", reconnects.Load())
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
