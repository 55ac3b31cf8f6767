package api

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

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

// PostgresCommits returns a CommitNotifier fed by the event store's
// NOTIFY (eventstore.NotifyChannel: "committed F L" and "abandoned F L")
// on one LISTEN connection of its own, reconnecting with backoff, until
// ctx is done.
func PostgresCommits(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) CommitNotifier {
	if log == nil {
		log = slog.Default()
	}
	b := &broadcaster{subs: map[chan struct{}]struct{}{}}
	go b.listen(ctx, pool, log)
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

func (b *broadcaster) listen(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) {
	wait := 250 * time.Millisecond
	for ctx.Err() == nil {
		conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
		if err == nil {
			_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{eventstore.NotifyChannel}.Sanitize())
			if err != nil {
				_ = conn.Close(context.WithoutCancel(ctx))
			}
		}
		if err != nil {
			log.Debug("api: LISTEN for commits failed; subscriptions poll meanwhile", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
			wait = min(2*wait, 5*time.Second)
			continue
		}
		wait = 250 * time.Millisecond
		b.wake() // notifications may have been missed meanwhile
		for {
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				break
			}
			if strings.HasPrefix(n.Payload, "reserved") {
				continue
			}
			b.wake()
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = conn.Close(cctx)
		cancel()
	}
}
