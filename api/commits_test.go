package api

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/internal/testenv"
)

// fakeStream is a commit stream that records the streams opened.
type fakeStream struct {
	mu      sync.Mutex
	streams []*openStream
}

type openStream struct {
	ctx context.Context
	out chan eventstore.Notification
}

func (f *fakeStream) Subscribe(ctx context.Context) <-chan eventstore.Notification {
	s := &openStream{ctx: ctx, out: make(chan eventstore.Notification)}
	go func() { <-ctx.Done(); close(s.out) }()
	f.mu.Lock()
	f.streams = append(f.streams, s)
	f.mu.Unlock()
	return s.out
}

func (f *fakeStream) opened() []*openStream {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*openStream(nil), f.streams...)
}

// TestCommitStreamOnlyWhileSubscribed: the API follows the store's commit
// stream (a LISTEN connection that every append wakes) only while a
// subscription needs it: none before the first subscription, one for all
// of them, closed after the last one ended (here without a linger), and
// kept for a subscription that comes back within the linger.
func TestCommitStreamOnlyWhileSubscribed(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	t.Run("no subscription, no stream; one stream for all; closed after the last", func(t *testing.T) {
		src := &fakeStream{}
		b := newBroadcaster(ctx, src, 0)
		if n := len(src.opened()); n != 0 {
			t.Fatalf("%d streams opened before any subscription", n)
		}
		a, endA := b.Subscribe()
		_, endB := b.Subscribe()
		if n := len(src.opened()); n != 1 {
			t.Fatalf("%d streams for two subscriptions, want 1", n)
		}
		s := src.opened()[0]
		s.out <- eventstore.Notification{Kind: eventstore.Committed, First: 1, Last: 1}
		select {
		case <-a:
		case <-time.After(20 * time.Second):
			t.Fatal("a commit did not wake the subscription")
		}
		endA()
		endB()
		testenv.WaitFor(t, 20*time.Second, "the stream closed after the last subscription", func() bool { return s.ctx.Err() != nil })
		_, endC := b.Subscribe()
		defer endC()
		if n := len(src.opened()); n != 2 {
			t.Fatalf("%d streams opened, want a second one for a new subscription", n)
		}
	})
	t.Run("a subscription within the linger keeps the stream", func(t *testing.T) {
		src := &fakeStream{}
		b := newBroadcaster(ctx, src, time.Hour)
		_, end := b.Subscribe()
		end()
		_, end = b.Subscribe()
		defer end()
		if n := len(src.opened()); n != 1 {
			t.Fatalf("%d streams opened, want the first one kept", n)
		}
		if err := src.opened()[0].ctx.Err(); err != nil {
			t.Fatalf("the stream was closed: %v", err)
		}
	})
}
