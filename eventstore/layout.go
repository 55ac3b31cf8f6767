package eventstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicehq/sluice/shared/backoff"
)

// layoutState is whether the store's number of shards has been checked
// against the index. New checks it once; when Postgres does not answer,
// the store starts anyway (a service started during a Postgres outage
// waits, it does not exit) and awaitLayout checks again in the background.
// Until then every operation whose meaning depends on the number of shards
// (appends, repair, reindex, reads by position and by segment) answers
// with a *LayoutPendingError saying what the store waits for, as an
// outage; a mismatch found later refuses them for good. Stream reads by
// aggregate do not depend on it.
type layoutState struct {
	ready chan struct{} // closed once checked (err says how it ended)

	mu       sync.Mutex
	err      error               // after ready: a permanent refusal (*ShardsMismatchError) or nil
	last     *LayoutPendingError // before ready: why the check has not succeeded yet
	attempts int                 // failed background checks
	logged   string              // what the last log line said the store waits for
}

// layoutLogEvery is how many failed background checks pass between two
// log lines that wait for the same thing: about a minute at the 5 s cap
// of awaitLayout's backoff. A change of what it waits for is logged at
// once.
const layoutLogEvery = 12

// LayoutPendingError: the store has not read its layout yet (the number
// of shards recorded in sluice.eventstore_layout), so the operations that
// depend on it cannot run. Waiting says what the store waits for — the
// store's Postgres to answer, or a table the migrations create — and is
// what readiness and the log show; Err is the last failure, which
// shared/failure classifies (an outage).
type LayoutPendingError struct {
	Waiting string
	Err     error
	// Once: the layout was read once and not waited for
	// (Config.LayoutNoWait); the message says it could not be read rather
	// than that the store is waiting.
	Once bool
}

func (e *LayoutPendingError) Error() string {
	if e.Once {
		return fmt.Sprintf("eventstore: cannot read the store's layout: it needs %s: %v", e.Waiting, e.Err)
	}
	return fmt.Sprintf("eventstore: the store's layout is not checked yet: waiting for %s: %v", e.Waiting, e.Err)
}

func (e *LayoutPendingError) Unwrap() error { return e.Err }

// pendingLayout says what a failed layout check waits for.
func pendingLayout(err error) *LayoutPendingError {
	const migrate = " (the migrations are not applied to the store's database: run `sluice migrate up`)"
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "42P01": // undefined_table
		table := "a table of schema sluice"
		if _, rest, ok := strings.Cut(pgErr.Message, `"`); ok {
			if name, _, ok := strings.Cut(rest, `"`); ok {
				table = "the table " + name
			}
		}
		return &LayoutPendingError{Waiting: table + migrate, Err: err}
	case errors.As(err, &pgErr) && pgErr.Code == "3F000": // invalid_schema_name
		return &LayoutPendingError{Waiting: "the schema sluice" + migrate, Err: err}
	case errors.As(err, &pgErr):
		return &LayoutPendingError{Waiting: "the store's database to read its layout (" + pgErr.Code + ")", Err: err}
	default:
		return &LayoutPendingError{Waiting: "the store's Postgres to answer", Err: err}
	}
}

// setPending records a failed check and says whether to log it: the first
// one, one that waits for something else than the last line said, and
// every layoutLogEvery-th.
func (l *layoutState) setPending(err error) (p *LayoutPendingError, attempt int, log bool) {
	p = pendingLayout(err)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last = p
	l.attempts++
	log = l.attempts == 1 || p.Waiting != l.logged || l.attempts%layoutLogEvery == 0
	if log {
		l.logged = p.Waiting
	}
	return p, l.attempts, log
}

// awaitLayout checks the store's layout until it succeeds, is refused, or
// the store closes: 250 ms doubling to 5 s between attempts. While it
// fails it logs what it waits for (setPending says when).
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
		switch {
		case layoutRefused(err):
			s.log.Error("eventstore: refused: the configured number of shards (or shard map) differs from the store's", "err", err)
			s.layout.mu.Lock()
			s.layout.err = err
			s.layout.mu.Unlock()
			close(s.layout.ready)
			return
		case err != nil:
			if s.ctx.Err() != nil {
				return // closed meanwhile: not a failure to report
			}
			if p, attempt, log := s.layout.setPending(err); log {
				s.log.Warn("eventstore: still waiting to read the store's layout; appends and reads by position answer unavailable meanwhile",
					"waiting_for", p.Waiting, "checks", attempt, "err", err)
			}
		default:
			s.layout.mu.Lock()
			attempts := s.layout.attempts
			s.layout.mu.Unlock()
			s.log.Info("eventstore: the store's layout is checked", "shards", configured, "failed_checks", attempts)
			close(s.layout.ready)
			return
		}
	}
}

// layoutChecked returns nil once the store's layout is checked and
// matches, the refusal when it does not, and while it is not checked yet
// the *LayoutPendingError of the last failure (Postgres unavailable, a
// table missing).
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
	if s.layout.last == nil { // not reached: New records the first failure
		return &LayoutPendingError{Waiting: "the first check", Err: errors.New("not run yet")}
	}
	return s.layout.last
}
