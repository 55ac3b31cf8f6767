package eventstore

import (
	"context"
	"testing"
	"time"
)

func TestParseNotification(t *testing.T) {
	for _, c := range []struct {
		payload string
		want    Notification
	}{
		{"committed 1 1", Notification{Kind: Committed, First: 1, Last: 1}},
		{"committed 17 42", Notification{Kind: Committed, First: 17, Last: 42}},
		{"reserved 1 2", Notification{Kind: Reserved, First: 1, Last: 2}},
		{"abandoned 3 4", Notification{Kind: Abandoned, First: 3, Last: 4}},
		{"committed 2 1", Notification{}},
		{"committed 0 3", Notification{}},
		{"committed 1", Notification{}},
		{"committed a b", Notification{}},
		{"committed 1 2 3", Notification{}},
		{"published 1 2", Notification{}},
		{"", Notification{}},
	} {
		if got := parseNotification(c.payload); got != c.want {
			t.Errorf("parseNotification(%q) = %+v; want %+v", c.payload, got, c.want)
		}
	}
}

// A full queue collapses into one Resync followed by what came after, so a
// slow subscriber learns that it missed notifications.
func TestNotifyQueueOverflow(t *testing.T) {
	q := &notifyQueue{wake: make(chan struct{}, 1)}
	for i := range subscribeBuffer + 3 {
		q.push(Notification{Kind: Committed, First: int64(i + 1), Last: int64(i + 1)})
	}
	q.close()
	var got []Notification
	for {
		n, ok := q.pop(context.Background())
		if !ok {
			break
		}
		got = append(got, n)
	}
	want := []Notification{{Kind: Resync}, {Kind: Committed, First: subscribeBuffer + 1, Last: subscribeBuffer + 1},
		{Kind: Committed, First: subscribeBuffer + 2, Last: subscribeBuffer + 2}, {Kind: Committed, First: subscribeBuffer + 3, Last: subscribeBuffer + 3}}
	if len(got) != len(want) {
		t.Fatalf("got %d notifications %v, want %v", len(got), got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("notification %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// Subscribe starts with a Resync, then reports an append's reservation and
// commit with its positions, and closes its channel when ctx ends.
func TestSubscribe(t *testing.T) {
	s := newEnv(t).store(t, testConfig())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub, stop := context.WithCancel(ctx)
	ch := s.Subscribe(sub)
	next := func() Notification {
		t.Helper()
		select {
		case n, ok := <-ch:
			if !ok {
				t.Fatal("channel closed early")
			}
			return n
		case <-ctx.Done():
			t.Fatal("no notification")
		}
		return Notification{}
	}
	if n := next(); n.Kind != Resync {
		t.Fatalf("first notification %+v, want a resync", n)
	}
	res := mustAppend(t, s, command("Thing", "sub-1", 1))[0]
	var committed bool
	for !committed {
		switch n := next(); n.Kind {
		case Committed:
			if n.First > res.Event.Envelope.Position || n.Last < res.Event.Envelope.Position {
				t.Fatalf("commit %+v does not cover position %d", n, res.Event.Envelope.Position)
			}
			committed = true
		case Reserved:
			if n.First > res.Event.Envelope.Position || n.Last < res.Event.Envelope.Position {
				t.Fatalf("reservation %+v does not cover position %d", n, res.Event.Envelope.Position)
			}
		default:
			t.Fatalf("unexpected %+v", n)
		}
	}
	h, err := s.HeadWithClock(ctx)
	if err != nil || h.Position < res.Event.Envelope.Position || h.Now.IsZero() {
		t.Fatalf("HeadWithClock = %+v, %v; want at least %d and a clock", h, err, res.Event.Envelope.Position)
	}
	stop()
	for range ch { // drains, then closes
	}
}
