package s3store

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"

	"github.com/sluicehq/sluice/eventstore/objstore"
)

// errCallTimeout is the cause of a call cut by its deadline (Options.Timeout
// plus the transfer time of its body at Options.MinBytesPerSecond). It wraps
// context.DeadlineExceeded, so shared/failure classifies it as an outage.
var errCallTimeout = fmt.Errorf("object-storage call exceeded its deadline (EVENT_STORE_OBJECT_TIMEOUT): %w", context.DeadlineExceeded)

// callDeadline bounds one call of the Bucket, every SDK attempt and backoff
// included: a store that accepts connections but does not answer (a frozen
// process, a black-holed network) fails the call with ErrUnavailable after
// the budget instead of holding it for the SDK's response-header timeout
// per attempt.
type callDeadline struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	timer  *time.Timer
	b      *Bucket
}

// budget is the time a call moving size bytes may take.
func (b *Bucket) budget(size int64) time.Duration {
	return b.timeout + time.Duration(float64(max(size, 0))/float64(b.minRate)*float64(time.Second))
}

// deadline starts the bound of a call that moves size bytes.
func (b *Bucket) deadline(ctx context.Context, size int64) *callDeadline {
	c, cancel := context.WithCancelCause(ctx)
	d := &callDeadline{ctx: c, cancel: cancel, b: b}
	d.timer = time.AfterFunc(b.budget(size), func() { cancel(errCallTimeout) })
	return d
}

// extend restarts the bound for reading a response body of size bytes (a
// GET learns its size from the response headers).
func (d *callDeadline) extend(size int64) { d.timer.Reset(d.b.budget(size)) }

// done releases the call's timer and context.
func (d *callDeadline) done() {
	d.timer.Stop()
	d.cancel(nil)
}

// wrap adds the deadline's cause to err when the deadline cut the call.
func (d *callDeadline) wrap(err error) error {
	if err != nil && errors.Is(context.Cause(d.ctx), errCallTimeout) && !errors.Is(err, errCallTimeout) {
		return fmt.Errorf("%w: %w", errCallTimeout, err)
	}
	return err
}

// writeRecord follows the attempts of one write (Create, Put) to tell a
// write that definitely did not happen from one whose outcome is unknown.
type writeRecord struct {
	mu      sync.Mutex
	applied bool // some attempt may have taken effect
}

type writeRecordKey struct{}

func withWriteRecord(ctx context.Context) (context.Context, *writeRecord) {
	r := &writeRecord{}
	return context.WithValue(ctx, writeRecordKey{}, r), r
}

// attempt records one HTTP attempt: it may have taken effect when the
// request reached the store in full (headers and body written) and no
// error status came back.
func (r *writeRecord) attempt(wrote bool, resp *http.Response, err error) {
	if err == nil && resp != nil && resp.StatusCode >= 300 {
		return // the store answered with an error: nothing was written
	}
	if !wrote {
		return // refused, DNS, or cut while sending: S3 stores no partial body
	}
	r.mu.Lock()
	r.applied = true
	r.mu.Unlock()
}

func (r *writeRecord) notWritten() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.applied
}

// writeErr classifies a failed write, adding objstore.ErrNotWritten when
// no attempt may have taken effect (never to a lost conditional write).
func writeErr(ctx context.Context, op, key string, rec *writeRecord, err error) error {
	cerr := classify(ctx, op, key, err)
	if rec.notWritten() && !errors.Is(cerr, objstore.ErrPreconditionFailed) {
		return fmt.Errorf("%w: %w", objstore.ErrNotWritten, cerr)
	}
	return cerr
}

// tracingClient is the HTTP client under the SDK: for writes that carry a
// writeRecord it observes whether each attempt's request was written in
// full and what came back.
type tracingClient struct{ next config.HTTPClient }

func (c tracingClient) Do(req *http.Request) (*http.Response, error) {
	rec, _ := req.Context().Value(writeRecordKey{}).(*writeRecord)
	if rec == nil {
		return c.next.Do(req)
	}
	var mu sync.Mutex
	wrote := false
	trace := &httptrace.ClientTrace{WroteRequest: func(i httptrace.WroteRequestInfo) {
		mu.Lock()
		wrote = wrote || i.Err == nil
		mu.Unlock()
	}}
	resp, err := c.next.Do(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
	mu.Lock()
	w := wrote
	mu.Unlock()
	rec.attempt(w, resp, err)
	return resp, err
}
