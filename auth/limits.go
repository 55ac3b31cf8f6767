package auth

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limiter holds the per-principal abuse limits of one API process
// (SLUICE_AUTH_RATE_APPENDS, SLUICE_AUTH_RATE_COMMANDS,
// SLUICE_AUTH_MAX_SUBSCRIPTIONS): token buckets per principal name and
// kind, and counts of open subscriptions. A nil *Limiter limits nothing.
type Limiter struct {
	appendRate, commandRate float64
	maxSubs                 int

	mu      sync.Mutex
	buckets map[bucketKey]*bucket
	subs    map[string]int
	now     func() time.Time
}

type bucketKey struct {
	principal string
	op        Operation
}

type bucket struct {
	lim  *rate.Limiter
	used time.Time
}

// NewLimiter returns the limiter of c, or nil when c sets no limit.
func NewLimiter(c Config) *Limiter {
	if c.AppendRate <= 0 && c.CommandRate <= 0 && c.MaxSubscriptions <= 0 {
		return nil
	}
	return &Limiter{appendRate: c.AppendRate, commandRate: c.CommandRate, maxSubs: c.MaxSubscriptions,
		buckets: map[bucketKey]*bucket{}, subs: map[string]int{}, now: time.Now}
}

// Allow takes one request of op (OpAppend or OpCommand) from principal's
// bucket. When the bucket is empty it returns false and how long until a
// request would be allowed (the Retry-After).
func (l *Limiter) Allow(principal string, op Operation) (bool, time.Duration) {
	if l == nil {
		return true, 0
	}
	var r float64
	switch op {
	case OpAppend:
		r = l.appendRate
	case OpCommand:
		r = l.commandRate
	}
	if r <= 0 {
		return true, 0
	}
	now := l.now()
	l.mu.Lock()
	k := bucketKey{principal, op}
	b := l.buckets[k]
	if b == nil {
		burst := int(math.Max(1, math.Ceil(2*r)))
		b = &bucket{lim: rate.NewLimiter(rate.Limit(r), burst)}
		l.buckets[k] = b
		if len(l.buckets) > 10000 {
			l.sweepLocked(now)
		}
	}
	b.used = now
	l.mu.Unlock()
	res := b.lim.ReserveN(now, 1)
	if !res.OK() {
		return false, time.Second
	}
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return false, d
	}
	return true, 0
}

// sweepLocked drops buckets idle for a minute (full again by then for any
// rate of at least 2/min), so that many principals do not grow the map
// without bound.
func (l *Limiter) sweepLocked(now time.Time) {
	for k, b := range l.buckets {
		if now.Sub(b.used) > time.Minute {
			delete(l.buckets, k)
		}
	}
}

// OpenSubscription counts one more open subscription of principal; it
// returns false when the principal has SLUICE_AUTH_MAX_SUBSCRIPTIONS open
// already, else the func that closes it (call it once).
func (l *Limiter) OpenSubscription(principal string) (func(), bool) {
	if l == nil || l.maxSubs <= 0 {
		return func() {}, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.subs[principal] >= l.maxSubs {
		return nil, false
	}
	l.subs[principal]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.subs[principal]--; l.subs[principal] <= 0 {
				delete(l.subs, principal)
			}
		})
	}, true
}

// MaxSubscriptions is the configured limit (0: none).
func (l *Limiter) MaxSubscriptions() int {
	if l == nil {
		return 0
	}
	return l.maxSubs
}
