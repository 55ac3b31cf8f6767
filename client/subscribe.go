package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// SubscribeOptions shape a subscription.
type SubscribeOptions struct {
	// AggregateType, when set, subscribes to that type's events only.
	AggregateType string
	// Latest asks for each event upcast to its type's latest registered
	// schema version (as=latest; docs/schemas.md#upcasting-on-read).
	Latest bool
	// FromPosition is the first log position to deliver; 0 starts at the
	// head of the log (only what is appended from now on).
	FromPosition int64
	// IdleTimeout ends a connection on which nothing (not even the
	// server's keep-alive comment, every 15 s) arrived for this long, and
	// reconnects. Default 45 s.
	IdleTimeout time.Duration
	// OnReconnect, when set, is told of each disconnection before the
	// subscription reconnects: why, after which position it resumes, and
	// after how long.
	OnReconnect func(err error, afterPosition int64, delay time.Duration)
}

// Subscribe follows the global log (or one aggregate type) over
// Server-Sent Events: it catches up from o.FromPosition, then delivers
// events as they are appended, until ctx ends or the loop breaks.
//
// It survives disconnections: when the stream ends (a restart of the
// server, a proxy timeout, a network failure, an "event: error" of the
// server) it reconnects with backoff and Last-Event-ID set to the last
// position delivered, so every event is delivered once and in order. It
// yields an error, and stops, only when ctx ends (the context's error)
// or the API refuses the subscription with a status that a retry cannot
// change (401, 400, 422, 404: the *Error or typed error).
func (c *Client) Subscribe(ctx context.Context, o SubscribeOptions) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		s := &subscription{c: c, o: o, last: -1, b: c.poll.backoff()}
		if s.o.IdleTimeout <= 0 {
			s.o.IdleTimeout = 45 * time.Second
		}
		if o.FromPosition > 0 {
			s.last = o.FromPosition - 1
		}
		for {
			delivered, err := s.connect(ctx, yield)
			if s.stopped {
				return
			}
			if ctx.Err() != nil {
				yield(Event{}, fmt.Errorf("sluice client: subscription: %w", context.Cause(ctx)))
				return
			}
			wait, retry := retryable(err, true)
			var ae *Error
			if !retry && errors.As(err, &ae) {
				yield(Event{}, fmt.Errorf("sluice client: subscription: %w", err))
				return
			}
			if delivered {
				s.b.Reset()
			}
			if d := s.b.NextBackOff(); wait <= 0 {
				wait = max(d, s.retryHint)
			}
			if o.OnReconnect != nil {
				o.OnReconnect(err, s.last, wait)
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				yield(Event{}, fmt.Errorf("sluice client: subscription: %w", context.Cause(ctx)))
				return
			case <-t.C:
			}
		}
	}
}

// ErrStreamEnded is the cause a subscription reports (OnReconnect) when
// the server ended the stream: a restart, a proxy's timeout.
var ErrStreamEnded = errors.New("the server ended the event stream")

// subscription is the state of one Subscribe iteration.
type subscription struct {
	c *Client
	o SubscribeOptions
	// last is the position after which the next connection starts (-1:
	// at the head, not known yet).
	last      int64
	retryHint time.Duration
	b         *backoff.ExponentialBackOff
	// stopped is set when the consumer broke out of the loop.
	stopped bool
}

// connect runs one connection until it ends; delivered says whether it
// delivered an event (or learnt the head), which resets the backoff.
func (s *subscription) connect(ctx context.Context, yield func(Event, error) bool) (delivered bool, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	path := "/v1/log/subscribe"
	q := url.Values{}
	if s.o.AggregateType != "" {
		q.Set("aggregate_type", s.o.AggregateType)
	}
	setLatest(q, s.o.Latest)
	r := request{method: http.MethodGet, path: path, query: q, header: http.Header{}}
	if s.last >= 0 {
		r.header.Set("Last-Event-ID", strconv.FormatInt(s.last, 10))
	}
	req, err := s.c.newHTTPRequest(ctx, r)
	if err != nil {
		return false, err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Cache-Control", "no-store")
	// The watchdog ends a connection that went quiet (no keep-alive).
	idle := time.AfterFunc(s.o.IdleTimeout, func() {
		cancel(fmt.Errorf("no data for %s", s.o.IdleTimeout))
	})
	defer idle.Stop()
	resp, err := s.c.hc.Do(req)
	if err != nil {
		if c := context.Cause(ctx); c != nil && ctx.Err() != nil {
			err = c
		}
		return false, &transportError{err: err}
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return false, typed(parseProblem(resp, body))
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		return false, &transportError{err: fmt.Errorf("the subscription replied with Content-Type %q, not text/event-stream", ct)}
	}
	rd := bufio.NewReaderSize(resp.Body, 64<<10)
	var id, event string
	var data bytes.Buffer
	hasID := false
	for {
		line, err := rd.ReadBytes('\n')
		if err != nil {
			if c := context.Cause(ctx); c != nil && ctx.Err() != nil && !errors.Is(c, context.Canceled) {
				return delivered, &transportError{err: c}
			}
			if errors.Is(err, io.EOF) {
				return delivered, &transportError{err: ErrStreamEnded}
			}
			return delivered, &transportError{err: err}
		}
		idle.Reset(s.o.IdleTimeout)
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 { // dispatch
			if hasID && event != "error" {
				if n, perr := strconv.ParseInt(id, 10, 64); perr == nil && data.Len() > 0 {
					var ev Event
					raw := json.RawMessage(bytes.Clone(data.Bytes()))
					if err := json.Unmarshal(raw, &ev); err != nil {
						return delivered, &transportError{err: fmt.Errorf("decode event at position %d: %w", n, err)}
					}
					ev.Raw = raw
					if ev.Position == 0 {
						ev.Position = n
					}
					delivered = true
					s.last = n
					if !yield(ev, nil) {
						s.stopped = true
						return delivered, nil
					}
				}
			} else if event == "error" {
				return delivered, &transportError{err: fmt.Errorf("the server ended the stream with an error: %s", data.String())}
			}
			id, event, hasID = "", "", false
			data.Reset()
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "": // a comment
			// ": subscribed after position N" tells where a subscription
			// that started at the head stands, so that a reconnection
			// before its first event misses nothing.
			if rest, ok := bytes.CutPrefix(value, []byte("subscribed after position ")); ok && s.last < 0 {
				if n, err := strconv.ParseInt(string(bytes.TrimSpace(rest)), 10, 64); err == nil {
					s.last = n
					delivered = true
				}
			}
		case "id":
			id, hasID = string(value), true
		case "event":
			event = string(value)
		case "data":
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.Write(value)
		case "retry":
			if n, err := strconv.Atoi(string(value)); err == nil && n >= 0 {
				s.retryHint = time.Duration(n) * time.Millisecond
			}
		}
	}
}
