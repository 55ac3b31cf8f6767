package eventstore

import (
	"errors"
	"sync"
	"testing"
)

// Close lets gathered appends finish, refuses new ones, and never hangs;
// every append it acknowledged is stored.
func TestCloseDrains(t *testing.T) {
	e := newEnv(t)
	s, err := New(testConfig(), Deps{Pool: e.pool, Bucket: e.bucket})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var stored []string
	start := make(chan struct{})
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range 5 {
				r, err := s.AppendOne(ctxT(t), command("Order", "o", 1))
				if errors.Is(err, ErrClosed) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				stored = append(stored, r.Event.Envelope.EventID)
				mu.Unlock()
			}
		}()
	}
	close(start)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if _, err := s.Append(ctxT(t), command("Order", "o", 1)); !errors.Is(err, ErrClosed) {
		t.Errorf("append after Close: %v", err)
	}
	_ = s.Close() // idempotent
	reader := e.store(t, testConfig())
	for _, id := range stored {
		if _, err := reader.ByEventID(ctxT(t), id); err != nil {
			t.Errorf("acknowledged event %s: %v", id, err)
		}
	}
	if rep, err := reader.Repair(ctxT(t), 0); err != nil || rep.InFlight+rep.Abandoned+rep.Committed != 0 {
		t.Errorf("Close left reservations behind: %+v %v", rep, err)
	}
}
