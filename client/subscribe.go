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
	// Cursor, when set, starts after it: an Event.Cursor or a
	// LogPage.NextCursor this API gave, sent back as it was (the client
	// never interprets it; docs/api.md#the-log-cursor). It works on a
	// store of any number of shards. A cursor of another store, or of
	// another number of shards, ends the subscription with a
	// *ValidationError (Field "cursor").
	Cursor string
	// FromPosition is the first log position to deliver. It serves a
	// store of one shard only: a store of several shards has no global
	// position and refuses it (400 invalid_parameter), so the
	// subscription ends with a *ValidationError whose Field is
	// "from_position"; subscribe to such a store by Cursor. Cursor and
	// FromPosition together are refused likewise (Field "cursor").
	//
	// With neither Cursor nor FromPosition the subscription starts at the
	// head of the log (only what is appended from now on). To read a
	// store of several shards from its start, page through it with
	// ReadLogPage (no Cursor) and subscribe after the last NextCursor.
	FromPosition int64
	// IdleTimeout ends a connection on which nothing (not even the
	// server's keep-alive comment, every 15 s) arrived for this long, and
	// reconnects. Default 45 s.
	IdleTimeout time.Duration
	// OnReconnect, when set, is told of each disconnection before the
	// subscription reconnects: why, after which position it resumes, and
	// after how long. The position is known on a store of one shard
	// only: it is -1 on a store of several shards (the subscription
	// resumes after the Cursor of the last event it delivered) and
	// before the server said where a subscription at the head starts.
	OnReconnect func(err error, afterPosition int64, delay time.Duration)
}

// Subscribe follows the global log (or one aggregate type) over
// Server-Sent Events: it catches up from o.Cursor or o.FromPosition (else
// it starts at the head), then delivers events as they are appended,
// until ctx ends or the loop breaks. Each event carries the cursor after
// it (Event.Cursor): store it to start a later subscription there.
//
// It survives disconnections: when the stream ends (a restart of the
// server, a proxy timeout, a network failure, an "event: error" of the
// server) it reconnects with backoff and Last-Event-ID set to the cursor
// after the last event delivered (on a store of one shard, its
// position), so every event is delivered once, each aggregate's in
// order, on a store of any number of shards. It yields an error, and
// stops, only when ctx ends (the context's error) or the API refuses the
// subscription with a status that a retry cannot change (401, 400, 422,
// 404: the *Error or typed error) — FromPosition on a store of several
// shards is such a 400 (a *ValidationError on Field "from_position").
func (c *Client) Subscribe(ctx context.Context, o SubscribeOptions) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		s := &subscription{c: c, o: o, pos: -1, b: c.poll.backoff()}
		if s.o.IdleTimeout <= 0 {
			s.o.IdleTimeout = 45 * time.Second
		}
		if o.Cursor == "" && o.FromPosition > 0 {
			s.pos = o.FromPosition - 1
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
				o.OnReconnect(err, s.pos, wait)
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
	// last is the cursor after which the next connection resumes, as the
	// server spelt it (an SSE id, or the cursor of its "subscribed after"
	// comment); "" until the server gave one: the first connection then
	// starts where the options say.
	last string
	// pos is last as a position, for OnReconnect, when the server speaks
	// of positions (a store of one shard); -1 otherwise.
	pos       int64
	retryHint time.Duration
	b         *backoff.ExponentialBackOff
	// stopped is set when the consumer broke out of the loop.
	stopped bool
}

// connect runs one connection until it ends; delivered says whether it
// delivered an event (or learnt where it starts), which resets the
// backoff.
func (s *subscription) connect(ctx context.Context, yield func(Event, error) bool) (delivered bool, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	req, err := s.newRequest(ctx)
	if err != nil {
		return false, err
	}
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
	return s.readStream(ctx, resp.Body, idle, yield)
}

// newRequest is the request of the next connection: resuming after the
// last event delivered, or the first one where the options say.
func (s *subscription) newRequest(ctx context.Context) (*http.Request, error) {
	q := url.Values{}
	if s.o.AggregateType != "" {
		q.Set("aggregate_type", s.o.AggregateType)
	}
	setLatest(q, s.o.Latest)
	r := request{method: http.MethodGet, path: "/v1/log/subscribe", query: q, header: http.Header{}}
	if s.last != "" {
		// Resuming: after the last event delivered, whatever the options.
		r.header.Set("Last-Event-ID", s.last)
	} else {
		// The first connection (or a retry of one that learnt nothing):
		// where the options say, checked by the server.
		if s.o.Cursor != "" {
			q.Set("cursor", s.o.Cursor)
		}
		if s.o.FromPosition > 0 {
			q.Set("from_position", strconv.FormatInt(s.o.FromPosition, 10))
		}
	}
	req, err := s.c.newHTTPRequest(ctx, r)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Cache-Control", "no-store")
	return req, nil
}

// readStream reads the event stream of one connection, yielding each
// event, until it ends.
func (s *subscription) readStream(ctx context.Context, body io.Reader, idle *time.Timer, yield func(Event, error) bool) (delivered bool, err error) {
	rd := bufio.NewReaderSize(body, 64<<10)
	var id, event string
	var data bytes.Buffer
	hasID := false
	// positions: this stream's ids are log positions (a store of one
	// shard), so OnReconnect can name one; until the server's first
	// comment says otherwise ("subscribed after cursor …": several
	// shards), as from a server from before shards.
	positions := true
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
			if hasID && id != "" && event != "error" && data.Len() > 0 {
				var ev Event
				raw := json.RawMessage(bytes.Clone(data.Bytes()))
				if err := json.Unmarshal(raw, &ev); err != nil {
					return delivered, &transportError{err: fmt.Errorf("decode the event before cursor %s: %w", id, err)}
				}
				ev.Raw, ev.Cursor = raw, id
				delivered = true
				s.last = id
				if positions {
					s.pos = ev.Position
				}
				if !yield(ev, nil) {
					s.stopped = true
					return delivered, nil
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
			if s.startComment(value, &positions) {
				delivered = true
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

// startComment reads a comment: ": subscribed after position N" (one
// shard) or ": subscribed after cursor C" (several) tells where the stream
// starts, so that a reconnection before the first event resumes there (a
// subscription at the head misses nothing). It sets positions to whether
// the stream's ids are positions, and reports whether it learnt the start.
func (s *subscription) startComment(value []byte, positions *bool) bool {
	rest, ok := bytes.CutPrefix(value, []byte("subscribed after "))
	if !ok {
		return false
	}
	kind, cur, _ := bytes.Cut(bytes.TrimSpace(rest), []byte(" "))
	*positions = string(kind) == "position"
	if s.last != "" || len(cur) == 0 {
		return false
	}
	s.last = string(cur)
	if n, err := strconv.ParseInt(s.last, 10, 64); err == nil && *positions {
		s.pos = n
	}
	return true
}
