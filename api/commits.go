package api

import (
	"context"
	"sync"

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

// StoreCommits returns a CommitNotifier fed by the event store's commit
// stream (eventstore.Subscribe: commits, abandons and resyncs wake; a
// reservation does not), fanned out to every subscription, until ctx is
// done. One stream serves all subscriptions.
func StoreCommits(ctx context.Context, store *eventstore.Store) CommitNotifier {
	b := &broadcaster{subs: map[chan struct{}]struct{}{}}
	go b.follow(store.Subscribe(ctx))
	return b
}

// broadcaster fans wake-ups out to subscriptions.
type broadcaster struct {
	mu   sync.Mutex
	subs map[chan struct{}]struct{}
}

func (b *broadcaster) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	b.mu.Lock()
	b.subs[ch] = struct{}{}
	b.mu.Unlock()
	return ch, func() {
		b.mu.Lock()
		delete(b.subs, ch)
		b.mu.Unlock()
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
