package eventstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice/shared/backoff"
)

// layoutState is whether the store's number of shards has been checked
// against the index. New checks it once; when Postgres does not answer,
// the store starts anyway (a service started during a Postgres outage
// waits, it does not exit) and awaitLayout checks again in the background.
// Until then every operation whose meaning depends on the number of shards
// (appends, repair, reindex, reads by position and by segment) answers
// with the last error, as an outage; a mismatch found later refuses them
// for good. Stream reads by aggregate do not depend on it.
type layoutState struct {
	ready chan struct{} // closed once checked (err says how it ended)

	mu   sync.Mutex
	err  error // after ready: a permanent refusal (*ShardsMismatchError) or nil
	last error // before ready: why the check has not succeeded yet
}

func (l *layoutState) setPending(err error) {
	l.mu.Lock()
	l.last = err
	l.mu.Unlock()
}

// awaitLayout checks the store's layout until it succeeds, is refused, or
// the store closes: 250 ms doubling to 5 s between attempts.
func (s *Store) awaitLayout(configured int) {
	pol := backoff.Policy{Base: 250 * time.Millisecond, Cap: 5 * time.Second}
	for n := 0; ; n++ {
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(pol.Delay(n)):
		}
		ctx, cancel := context.WithTimeout(s.ctx, openTimeout)
		_, err := s.openLayout(ctx, configured)
		cancel()
		var mismatch *ShardsMismatchError
		switch {
		case errors.As(err, &mismatch):
			s.log.Error("eventstore: refused: the configured number of shards differs from the store's", "err", err)
			s.layout.mu.Lock()
			s.layout.err = err
			s.layout.mu.Unlock()
			close(s.layout.ready)
			return
		case err != nil:
			s.layout.setPending(err)
		default:
			s.log.Info("eventstore: the store's layout is checked", "shards", configured)
			close(s.layout.ready)
			return
		}
	}
}

// layoutChecked returns nil once the store's layout is checked and
// matches, the refusal when it does not, and while it is not checked yet
// an error wrapping the last failure (Postgres unavailable).
func (s *Store) layoutChecked() error {
	select {
	case <-s.layout.ready:
		s.layout.mu.Lock()
		defer s.layout.mu.Unlock()
		return s.layout.err
	default:
	}
	s.layout.mu.Lock()
	defer s.layout.mu.Unlock()
	return fmt.Errorf("eventstore: the store's layout is not checked yet: %w", s.layout.last)
}
