package readmodel

import (
	"context"
	"errors"
	"time"

	"github.com/sluicehq/sluice/shared/backoff"
)

// Transient reports whether an Elasticsearch failure may succeed when the
// request is repeated: a 429 or 5xx answer, or a transport error (anything
// but a *StatusError with another status). The caller's own cancellation
// is not transient.
func Transient(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil || errors.Is(err, ErrNotFound) {
		return false
	}
	var se *StatusError
	if errors.As(err, &se) {
		return se.Retryable()
	}
	return true
}

// Retry is how a worker repeats transient Elasticsearch failures within one
// attempt at an event, so that a short 429 storm or a node restart does not
// use up the event's registry attempts (and send it to the DLQ) in the
// second it lasts.
type Retry struct {
	// Tries is the number of repetitions after the first request.
	Tries int
	// Base and Cap shape the delay before repetition n:
	// min(Cap, Base·2^n) scaled by a random factor in [0.5, 1).
	Base, Cap time.Duration
}

// policy is the retry's backoff (shared/backoff, jittered).
func (r Retry) policy() backoff.Policy { return backoff.Policy{Base: r.Base, Cap: r.Cap, Jitter: true} }

// Delay is the delay before repetition n (0-based).
func (r Retry) Delay(n int) time.Duration { return r.policy().Delay(n) }

// Sleep waits Delay(n), or returns ctx's error when it ends first.
func (r Retry) Sleep(ctx context.Context, n int) error { return r.policy().Sleep(ctx, n) }

// Do calls fn until it succeeds, fails with an error that is not
// Transient, or has been repeated Tries times; it returns fn's last error.
func (r Retry) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	for n := 0; ; n++ {
		err := fn(ctx)
		if n >= r.Tries || !Transient(ctx, err) {
			return err
		}
		if serr := r.Sleep(ctx, n); serr != nil {
			return err
		}
	}
}
