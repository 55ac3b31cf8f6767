// Package backoff is sluice's one capped exponential backoff and its one
// context-aware sleep. Every retry loop of the product — the worker
// runtime's retries and outages, Elasticsearch retries within an attempt,
// the relay's loops, the event store's waits for another writer, the
// object store's reconnects — takes its delays from here, so that the
// formula (min(Cap, Base·2^n), optionally scaled by a random factor in
// [0.5, 1)) is written and tested once.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Policy shapes the delays: Delay(n) = min(Cap, Base·2^n), scaled by a
// random factor in [0.5, 1) when Jitter is set (so that many waiters do
// not retry in step).
type Policy struct {
	Base, Cap time.Duration
	Jitter    bool
}

// Delay is the delay before retry n (0-based).
func (p Policy) Delay(n int) time.Duration {
	d := p.Cap
	if n < 30 {
		if v := p.Base << max(n, 0); v > 0 && v < p.Cap {
			d = v
		}
	}
	if p.Jitter {
		d = time.Duration(float64(d) * (0.5 + rand.Float64()/2))
	}
	return d
}

// Sleep waits Delay(n), or returns ctx's error when ctx ends first.
func (p Policy) Sleep(ctx context.Context, n int) error { return Sleep(ctx, p.Delay(n)) }

// Sleep waits d, or returns ctx's error when ctx ends first.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Backoff counts the retries of one loop: Next returns the policy's delay
// for the next retry, Reset starts again from Base after a success. Not
// safe for concurrent use.
type Backoff struct {
	p Policy
	n int
}

// New returns a Backoff with policy p.
func New(p Policy) *Backoff { return &Backoff{p: p} }

// Next returns the delay before the next retry.
func (b *Backoff) Next() time.Duration {
	d := b.p.Delay(b.n)
	b.n++
	return d
}

// Reset starts again from Base.
func (b *Backoff) Reset() { b.n = 0 }
