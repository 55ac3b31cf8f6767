package eventstore

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// NotificationKind says what a Notification reports.
type NotificationKind int

const (
	// Resync: the stream (re)connected, or dropped notifications because
	// the subscriber fell behind, or the store sent a wake-up without a
	// range. Anything may have changed: re-read the head.
	Resync NotificationKind = iota
	// Reserved: positions First..Last were reserved (not yet readable).
	Reserved
	// Committed: positions First..Last were committed (readable), by an
	// append or by a repair.
	Committed
	// Abandoned: the reserved positions First..Last will never hold an
	// event.
	Abandoned
)

// String returns "resync", "reserved", "committed" or "abandoned".
func (k NotificationKind) String() string {
	switch k {
	case Reserved:
		return stateReserved
	case Committed:
		return stateCommitted
	case Abandoned:
		return stateAbandoned
	default:
		return "resync"
	}
}

// Notification is one message of the store's commit stream (Subscribe).
// It is a wake-up, not a record of the log: read the events themselves
// with Log, Segments, ReadSegment or Index.
type Notification struct {
	Kind NotificationKind
	// Shard is the shard of the positions (0 in a store of one shard, and
	// for Resync).
	Shard int
	// First and Last are the positions concerned, in Shard (zero for
	// Resync).
	First, Last int64
}

// parseNotification reads a payload the store sends on NotifyChannel:
// "reserved|committed|abandoned FIRST LAST". Anything else is a Resync.
func parseNotification(payload string) Notification {
	word, rest, _ := strings.Cut(payload, " ")
	a, b, ok := strings.Cut(rest, " ")
	if !ok {
		return Notification{}
	}
	first, err1 := strconv.ParseInt(a, 10, 64)
	last, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || first < 1 || last < first {
		return Notification{}
	}
	for _, k := range [...]NotificationKind{Reserved, Committed, Abandoned} {
		if word == k.String() {
			return Notification{Kind: k, First: first, Last: last}
		}
	}
	return Notification{}
}

// parseNotifications reads a payload of a store of shards shards: the
// one-shard form (parseNotification), or "WORD S:FIRST-LAST …" with one
// block per shard (blockNotify), which gives one Notification per block,
// in the payload's order. Anything else — a block of a shard the store
// does not have, a shard named twice — is one Resync.
func parseNotifications(payload string, shards int) []Notification {
	word, rest, _ := strings.Cut(payload, " ")
	if !strings.Contains(rest, ":") {
		return []Notification{parseNotification(payload)}
	}
	kind := Resync
	for _, k := range [...]NotificationKind{Reserved, Committed, Abandoned} {
		if word == k.String() {
			kind = k
		}
	}
	resync := []Notification{{}}
	if kind == Resync {
		return resync
	}
	var out []Notification
	seen := map[int]bool{}
	for block := range strings.SplitSeq(rest, " ") {
		sh, span, ok1 := strings.Cut(block, ":")
		a, b, ok2 := strings.Cut(span, "-")
		shard, err0 := strconv.Atoi(sh)
		first, err1 := strconv.ParseInt(a, 10, 64)
		last, err2 := strconv.ParseInt(b, 10, 64)
		if !ok1 || !ok2 || err0 != nil || err1 != nil || err2 != nil || shard < 0 || shard >= shards || seen[shard] || first < 1 || last < first {
			return resync
		}
		seen[shard] = true
		out = append(out, Notification{Kind: kind, Shard: shard, First: first, Last: last})
	}
	return out
}

// subscribeBuffer bounds the notifications a Subscribe holds for a slow
// subscriber; past it they collapse into one Resync.
const subscribeBuffer = 1024

// Subscribe returns the store's commit stream: one Notification per
// reservation, commit (append or repair) and abandonment of a block of
// positions of a shard, as the store sends them with NOTIFY, until ctx
// ends, when the channel is closed. A group commit that touched several
// shards gives one Notification per shard, in ascending shard order.
//
// The stream is a source of wake-ups, not of events: delivery is at most
// once, and a notification may be missed while the connection is down.
// Each (re)connection therefore starts with a Resync, and so does the
// stream after it dropped notifications because the subscriber fell more
// than a thousand behind (the connection is always drained, so a slow
// subscriber never holds back Postgres's notification queue). A subscriber
// re-reads the head (Head, HeadWithClock) on Resync and may poll besides.
//
// Each Subscribe holds one dedicated Postgres connection (reconnected with
// backoff); a process with many readers fans one subscription out.
func (s *Store) Subscribe(ctx context.Context) <-chan Notification {
	if s.parts != nil {
		return s.subscribeServers(ctx)
	}
	out := make(chan Notification)
	q := &notifyQueue{wake: make(chan struct{}, 1)}
	go func() {
		s.listen(ctx, q)
		q.close()
	}()
	go func() {
		defer close(out)
		for {
			n, ok := q.pop(ctx)
			if !ok {
				return
			}
			select {
			case out <- n:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// listen LISTENs on NotifyChannel on a dedicated connection and queues what
// arrives; it reconnects with backoff until ctx ends.
func (s *Store) listen(ctx context.Context, q *notifyQueue) {
	const minWait, maxWait = 250 * time.Millisecond, 5 * time.Second
	wait := time.Duration(0)
	for ctx.Err() == nil {
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		wait = min(max(2*wait, minWait), maxWait)
		conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
		if err != nil {
			s.log.Debug("eventstore: LISTEN connection failed; subscribers poll meanwhile", "err", err)
			continue
		}
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{NotifyChannel}.Sanitize()); err != nil {
			s.log.Debug("eventstore: LISTEN failed", "err", err)
			_ = conn.Close(context.WithoutCancel(ctx))
			continue
		}
		wait = 0
		q.push(Notification{Kind: Resync}) // notifications may have been missed meanwhile
		for {
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				break
			}
			for _, m := range parseNotifications(n.Payload, s.shards) {
				q.push(m)
			}
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = conn.Close(cctx)
		cancel()
	}
}

// notifyQueue is the bounded queue between a subscription's connection
// and its channel; an overflow replaces what it holds with one Resync.
type notifyQueue struct {
	mu     sync.Mutex
	items  []Notification
	closed bool
	wake   chan struct{} // capacity 1: something was pushed or closed
}

func (q *notifyQueue) push(n Notification) {
	q.mu.Lock()
	if len(q.items) >= subscribeBuffer {
		q.items = append(q.items[:0], Notification{Kind: Resync})
	}
	q.items = append(q.items, n)
	q.mu.Unlock()
	q.signal()
}

func (q *notifyQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.signal()
}

func (q *notifyQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// pop returns the oldest queued notification, waiting for one; ok is false
// when the queue is closed and empty or ctx ended.
func (q *notifyQueue) pop(ctx context.Context) (Notification, bool) {
	for {
		q.mu.Lock()
		if len(q.items) > 0 {
			n := q.items[0]
			q.items = q.items[1:]
			q.mu.Unlock()
			return n, true
		}
		closed := q.closed
		q.mu.Unlock()
		if closed {
			return Notification{}, false
		}
		select {
		case <-q.wake:
		case <-ctx.Done():
			return Notification{}, false
		}
	}
}
