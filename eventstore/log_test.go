package eventstore

import (
	"context"
	"sync"
	"testing"
	"time"
)

// Log never reads past a position still reserved: an append in flight
// below a committed one holds the page's bound back until it settles, so
// a reader resuming from Through misses nothing.
func TestLogStopsBeforeReservedPositions(t *testing.T) {
	e := newEnv(t)
	block := make(chan struct{})
	var once sync.Once
	blocked := make(chan string, 1)
	hooks := &crashAt{afterReserve: func(ctx context.Context, key string) error {
		if key == SegmentKey(3, 3) {
			once.Do(func() { blocked <- key; <-block })
		}
		return nil
	}}
	s := e.store(t, testConfig(), hooks.option())
	ctx := ctxT(t)
	mustAppend(t, s, domainEvent("Device", "a", 1), domainEvent("Order", "b", 2))
	slow := make(chan Result, 1)
	go func() {
		rs, err := s.Append(ctx, domainEvent("Device", "a", 3))
		if err != nil {
			t.Error(err)
		}
		slow <- rs[0]
	}()
	<-blocked
	mustAppend(t, s, domainEvent("Device", "a", 4)) // position 4, committed above the reserved 3
	for _, tc := range []struct {
		q       LogQuery
		through int64
		n       int
	}{
		{LogQuery{}, 2, 2},
		{LogQuery{After: 1}, 2, 1},
		{LogQuery{AggregateType: "Device"}, 2, 1},
		{LogQuery{Limit: 1}, 1, 1},
		{LogQuery{After: 2}, 2, 0},
	} {
		p, err := s.Log(ctx, tc.q)
		if err != nil {
			t.Fatal(err)
		}
		if p.Through != tc.through || len(p.Events) != tc.n {
			t.Fatalf("%+v: through %d with %d events, want %d with %d", tc.q, p.Through, len(p.Events), tc.through, tc.n)
		}
	}
	close(block)
	select {
	case r := <-slow:
		if r.Err != nil || r.Event.Envelope.Position != 3 {
			t.Fatalf("the blocked append: %s", describe(r))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the blocked append did not finish")
	}
	p, err := s.Log(ctx, LogQuery{After: 2, AggregateType: "Device"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Through != 4 || len(p.Events) != 2 || p.Events[0].Envelope.Position != 3 || p.Events[1].Envelope.Position != 4 {
		t.Fatalf("after the commit: through %d, %d events", p.Through, len(p.Events))
	}
}
