package api

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice/eventstore"
)

// CommitNotifier tells subscriptions that the log may have grown: a value
// on the channel means "read again". It is only a wake-up (a subscription
// also polls), so a missed notification delays an event, never loses it.
type CommitNotifier interface {
	// Subscribe returns a channel that receives (coalesced) wake-ups and
	// the function that ends the subscription.
	Subscribe() (<-chan struct{}, func())
}

// commitStream is the store's commit stream (eventstore.Store.Subscribe).
type commitStream interface {
	Subscribe(ctx context.Context) <-chan eventstore.Notification
}

// streamLinger is how long the commit stream stays open after the last
// subscription ended, so that clients that reconnect do not open a
// Postgres connection each time.
const streamLinger = time.Minute

// StoreCommits returns a CommitNotifier fed by the event store's commit
// stream (eventstore.Subscribe: commits, abandons and resyncs wake; a
// reservation does not), fanned out to every subscription, until ctx is
// done. One stream serves all subscriptions, and only while there are
// any (and a minute after the last): the stream is a LISTEN connection
// that every append's notifications wake, a cost an API process without
// subscribers has no reason to pay. A stream starts with a resync, which
// wakes the subscriptions, so a commit between a subscription's start and
// the stream's is read then.
func StoreCommits(ctx context.Context, store *eventstore.Store) CommitNotifier {
	return newBroadcaster(ctx, store, streamLinger)
}

func newBroadcaster(ctx context.Context, src commitStream, linger time.Duration) *broadcaster {
	return &broadcaster{ctx: ctx, src: src, linger: linger, subs: map[chan struct{}]struct{}{}}
}

// broadcaster fans wake-ups out to subscriptions, following the commit
// stream while it has subscriptions.
type broadcaster struct {
	ctx    context.Context
	src    commitStream
	linger time.Duration

	mu   sync.Mutex
	subs map[chan struct{}]struct{}
	stop context.CancelFunc // ends the stream being followed; nil when none
	idle *time.Timer        // ends it after linger without subscriptions
}

func (b *broadcaster) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	b.mu.Lock()
	b.subs[ch] = struct{}{}
	if b.idle != nil {
		b.idle.Stop()
		b.idle = nil
	}
	if b.stop == nil && b.ctx.Err() == nil {
		sctx, cancel := context.WithCancel(b.ctx)
		b.stop = cancel
		go b.follow(b.src.Subscribe(sctx))
	}
	b.mu.Unlock()
	return ch, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if _, ok := b.subs[ch]; !ok {
			return
		}
		delete(b.subs, ch)
		if len(b.subs) == 0 && b.stop != nil {
			stop := b.stop
			var t *time.Timer
			t = time.AfterFunc(b.linger, func() {
				b.mu.Lock()
				defer b.mu.Unlock()
				if b.idle == t && len(b.subs) == 0 { // no subscription came back meanwhile
					stop()
					b.stop, b.idle = nil, nil
				}
			})
			b.idle = t
		}
	}
}

func (b *broadcaster) wake() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch := range b.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// follow wakes the subscriptions for each notification of the stream but
// reservations, until the stream ends.
func (b *broadcaster) follow(stream <-chan eventstore.Notification) {
	for n := range stream {
		if n.Kind != eventstore.Reserved {
			b.wake()
		}
	}
}
