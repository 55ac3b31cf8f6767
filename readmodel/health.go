package readmodel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/elastic/go-elasticsearch/v8"

	"github.com/sluicehq/sluice/shared/failure"
)

// DeadlineTransport gives every request a deadline of Timeout, from the
// connect to the end of the answer's body (closing the body releases it).
// A request past its deadline fails with context.DeadlineExceeded, which
// failure.Classify counts as an outage.
type DeadlineTransport struct {
	Base    http.RoundTripper
	Timeout time.Duration
}

// RoundTrip sends r under the deadline.
func (t DeadlineTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(r.Context(), t.Timeout)
	res, err := t.Base.RoundTrip(r.WithContext(ctx))
	if err != nil {
		cancel()
		return nil, err
	}
	res.Body = &cancelBody{ReadCloser: res.Body, cancel: cancel}
	return res, nil
}

type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// Availability tracks whether Elasticsearch is out (guarantee 4,
// docs/architecture.md#explicit-failure): a worker reports the result of each of its
// Elasticsearch calls with Observe, and its readiness check (Check) is red
// from the first call that failed as an outage (refused, reset, timed out,
// 429, 502, 503, 504) until a call gets an answer again. Check itself asks
// Elasticsearch (one ping under the client's request deadline) while it is
// red, so readiness turns green when the cluster is back even if no record
// is waiting. Safe for concurrent use; the zero value (without ES) only
// reflects Observe.
type Availability struct {
	// ES, when set, is pinged by Check while the cluster is out.
	ES *elasticsearch.Client

	mu    sync.Mutex
	out   bool
	items bool // out because of refused items (ObserveItems): a ping cannot tell
	since time.Time
	last  error
}

// Observe records the result of one Elasticsearch call made under ctx and
// returns err unchanged: nil or an answer that is not an outage (a 400, a
// 404, a 409…) means the cluster answers; an outage marks it out; the
// caller's own cancellation says nothing.
func (a *Availability) Observe(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil {
		return err
	}
	switch {
	case err == nil || errors.Is(err, ErrNotFound):
		a.set(false, nil)
	case failure.Classify(ctx, err) == failure.Outage:
		a.set(true, err)
	default:
		var se *StatusError
		if errors.As(err, &se) && se.Status < 500 {
			a.set(false, nil) // it answered, with a refusal of this request
		}
	}
	return err
}

// ObserveItems records a request Elasticsearch answered but whose items
// it refused as an outage (429, 503 items of a 200 bulk: the cluster is
// overloaded); itemErr is the first such item's error, nil when none
// was. Out until a request's items are accepted again (ObserveItems or
// Observe with nil): Check's ping, which the cluster answers, cannot clear
// it.
func (a *Availability) ObserveItems(ctx context.Context, itemErr error) {
	if itemErr == nil {
		a.Observe(ctx, nil)
		return
	}
	if ctx.Err() != nil || failure.Classify(ctx, itemErr) != failure.Outage {
		return
	}
	a.set(true, itemErr)
	a.mu.Lock()
	a.items = true
	a.mu.Unlock()
}

func (a *Availability) set(out bool, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if out && !a.out {
		a.since = time.Now()
	}
	a.out, a.last = out, err
	a.items = false
}

// Out reports whether Elasticsearch is out, and the last outage error.
func (a *Availability) Out() (bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.out, a.last
}

// Check is a readiness check: an error while Elasticsearch is out. When
// ES is set it pings the cluster first (unless the outage is one of
// refused items, ObserveItems), so that the check recovers by itself.
func (a *Availability) Check(ctx context.Context) error {
	a.mu.Lock()
	out, items := a.out, a.items
	a.mu.Unlock()
	if !out {
		return nil
	}
	if a.ES != nil && !items {
		res, err := a.ES.Ping(a.ES.Ping.WithContext(ctx))
		if err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode < 500 && res.StatusCode != http.StatusTooManyRequests {
				a.set(false, nil)
				return nil
			}
			err = &StatusError{Op: "ping", Status: res.StatusCode}
		}
		if ctx.Err() == nil {
			a.set(true, err)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.out {
		return nil
	}
	return fmt.Errorf("elasticsearch outage since %s: %v", a.since.UTC().Format(time.RFC3339), a.last)
}

// StaleReasonPrefix starts the outcome reason of a command whose domain
// event is stored but whose instance document could not be written for a
// reason retrying cannot fix (a mapping conflict): the command is applied,
// the read model is stale until repaired (docs/instanceworker.md).
const StaleReasonPrefix = "read model stale: "

// StaleReason is the outcome reason of such a command, with the write's
// error.
func StaleReason(err error) string { return StaleReasonPrefix + err.Error() }

// IsStaleReason reports whether an outcome reason says the read model is
// stale (StaleReason).
func IsStaleReason(reason string) bool { return strings.HasPrefix(reason, StaleReasonPrefix) }
