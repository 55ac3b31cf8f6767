package api

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/auth"
	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/shared/drain"
)

// Defaults of the subscriptions (Server-Sent Events).
const (
	DefaultSSEPollInterval = time.Second
	DefaultSSEHeartbeat    = 15 * time.Second
	ssePageSize            = 500
	// shutdownComment is the last thing a stream sends when the server
	// shuts down: the reconnection delay and a comment.
	shutdownComment = "retry: 1000\n: shutting down; reconnect with Last-Event-ID to resume\n\n"
)

// handleSubscribeLog serves GET /v1/log/subscribe?aggregate_type=&from_position=&as=.
func (s *server) handleSubscribeLog(w http.ResponseWriter, r *http.Request) {
	aggType := r.URL.Query().Get("aggregate_type")
	if aggType != "" {
		if e := checkTypeFilter(aggType); e != nil {
			s.fail(w, r, e)
			return
		}
	}
	s.subscribe(w, r, aggType)
}

// handleSubscribeType serves GET /v1/streams/{aggregate_type}/subscribe.
func (s *server) handleSubscribeType(w http.ResponseWriter, r *http.Request) {
	aggType := pathValue(r, "aggregate_type")
	if e := checkTypeFilter(aggType); e != nil {
		e.Status, e.Code = http.StatusUnprocessableEntity, CodeValidationFailed
		s.fail(w, r, e)
		return
	}
	if r.URL.Query().Has("aggregate_type") {
		s.fail(w, r, badParam("aggregate_type", "the aggregate type is in the path"))
		return
	}
	s.subscribe(w, r, aggType)
}

// subscribe streams the log (or one aggregate type of it) as Server-Sent
// Events: one event per envelope, "id:" the log cursor after it (on a
// store of one shard: its position), "data:" the stored line. It starts
// after Last-Event-ID (a reconnecting EventSource sends the id it saw
// last), else after the cursor parameter, else at from_position (one
// shard), else at the current head (one shard) or the log's tail
// (several); it catches up page by page, then waits for commit
// notifications (and polls, so a missed notification only delays). Every
// position up to what it sent is final, in every shard
// (eventstore.LogPage.Next), so resuming from the last id misses nothing
// and repeats nothing.
//
// When the server begins to shut down (drain.Signal), the stream ends at
// once with a "shutting down" comment and the client reconnects with its
// Last-Event-ID, to another instance or to this one restarted; a
// subscription asked for during the shutdown is refused with 503 and
// Retry-After (docs/api.md, "Subscriptions").
func (s *server) subscribe(w http.ResponseWriter, r *http.Request, aggType string) {
	ctx := r.Context()
	stopping := drain.Signal(ctx)
	if drain.Stopping(ctx) {
		writeError(w, subscribeShuttingDown()) // expected during a restart: not logged as a failure
		return
	}
	after, fromHead, e := s.subscribeAfter(r)
	if e != nil {
		s.fail(w, r, e)
		return
	}
	latest, e := parseAs(r.URL.Query())
	if e != nil {
		s.fail(w, r, e)
		return
	}
	var wake <-chan struct{}
	if s.opts.Commits != nil {
		ch, stop := s.opts.Commits.Subscribe() // before the first read: no commit slips between
		defer stop()
		wake = ch
	}
	if fromHead {
		var err error
		after, err = s.subscribeStart(ctx)
		if err != nil {
			s.fail(w, r, fromRead(err))
			return
		}
	}
	startEventStream(w)
	st := &sseWriter{w: w, rc: http.NewResponseController(w), writeTimeout: s.opts.SSEHeartbeat + 30*time.Second}
	what := "position "
	if after.Shards() > 1 {
		what = "cursor "
	}
	st.buf.WriteString("retry: 1000\n: subscribed after " + what + after.String() + "\n\n")
	if !st.flush() {
		return
	}
	p := principalOf(r)
	poll := time.NewTicker(s.opts.SSEPollInterval)
	defer poll.Stop()
	beat := time.NewTicker(s.opts.SSEHeartbeat)
	defer beat.Stop()
	// shutdown ends the stream with a comment the client can act on; its
	// Last-Event-ID stays the id of the last event it received, which is
	// where it resumes.
	shutdown := func() {
		s.log.Debug("api: subscription ended: shutting down", "after", after.String())
		st.buf.WriteString(shutdownComment)
		st.flush()
	}
	for {
		if drain.Stopping(ctx) { // between pages of a catch-up
			shutdown()
			return
		}
		page, err := s.opts.Events.Log(ctx, eventstore.LogQuery{Cursor: after, Limit: ssePageSize, AggregateType: aggType})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("api: subscription read failed; closing the stream (the client resumes from its last id)", "err", err)
			st.closeWith(fromRead(err))
			return
		}
		if !s.writePage(ctx, st, after, page.Events, p, latest) {
			return
		}
		after = page.Next
		if st.buf.Len() > 0 {
			if !st.flush() {
				return
			}
			beat.Reset(s.opts.SSEHeartbeat)
		}
		if len(page.Events) == ssePageSize {
			continue // catching up
		}
		select {
		case <-ctx.Done():
			return
		case <-stopping:
			shutdown()
			return
		case <-wake:
		case <-poll.C:
		case <-beat.C:
			st.buf.WriteString(": keep-alive\n\n")
			if !st.flush() {
				return
			}
		}
	}
}

// writePage buffers the events of a page the principal may read, each as
// presented (upcast with ?as=latest), as "id: <cursor>" and "data:
// <line>", where the cursor is the page's start (from) advanced over the
// page's events up to this one (on a store of one shard: the event's
// position). It returns false when an event cannot be presented: the
// stream is then closed with the error (the client resumes from its last
// id).
func (s *server) writePage(ctx context.Context, st *sseWriter, from eventstore.Cursor, evs []eventstore.Event, p *auth.Principal, latest bool) bool {
	cur := from
	for _, ev := range evs {
		cur = cur.With(ev.Shard, ev.Envelope.Position)
		if !mayRead(p, auth.OpSubscribe, ev) {
			continue // another tenant's: never sent (docs/security.md)
		}
		line, ae := s.present(ctx, ev, latest) // one line: JSON without newlines
		if ae != nil {
			s.log.Error("api: subscription cannot upcast an event; closing the stream (the client resumes from its last id)", "position", ev.Envelope.Position, "err", ae.cause)
			st.closeWith(ae)
			return false
		}
		st.buf.WriteString("id: ")
		st.buf.WriteString(cur.String())
		st.buf.WriteString("\ndata: ")
		st.buf.Write(line)
		st.buf.WriteString("\n\n")
	}
	return true
}

// sseWriter is the writing side of one subscription: what is buffered is
// sent and flushed at once, each write bounded by writeTimeout.
type sseWriter struct {
	w            http.ResponseWriter
	rc           *http.ResponseController
	buf          bytes.Buffer
	writeTimeout time.Duration
}

// flush sends the buffer; false when the client is gone.
func (st *sseWriter) flush() bool {
	_ = st.rc.SetWriteDeadline(time.Now().Add(st.writeTimeout))
	if _, err := st.w.Write(st.buf.Bytes()); err != nil {
		return false
	}
	st.buf.Reset()
	return st.rc.Flush() == nil
}

// closeWith ends the stream with an error event (what was sent before it
// stands: the client resumes from its last id).
func (st *sseWriter) closeWith(ae *Error) {
	b, _ := marshalNoEscape(ae)
	st.buf.WriteString("event: error\ndata: ")
	st.buf.Write(b)
	st.buf.WriteString("\n\n")
	st.flush()
}

// subscribeShuttingDown is the refusal of a subscription asked for while
// the server shuts down: 503 with Retry-After.
func subscribeShuttingDown() *Error {
	e := newError(http.StatusServiceUnavailable, CodeUnavailable, "",
		"the API is shutting down; subscribe again after Retry-After with your Last-Event-ID")
	e.retryAfter = defaultRetryAfter
	return e
}

// subscribeAfter returns the cursor a subscription starts after: the
// Last-Event-ID a reconnecting client sends, else the cursor parameter,
// else (one shard) from_position - 1; fromHead when none is given (start
// at the current head).
func (s *server) subscribeAfter(r *http.Request) (after eventstore.Cursor, fromHead bool, e *Error) {
	q := r.URL.Query()
	if vals := r.Header.Values("Last-Event-ID"); len(vals) > 1 {
		return eventstore.Cursor{}, false, badParam("Last-Event-ID", "Last-Event-ID must be given once, got %d", len(vals))
	}
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		c, e := s.parseCursor("Last-Event-ID", strings.TrimSpace(v))
		return c, false, e
	}
	if q.Has("cursor") {
		if q.Has("from_position") {
			return eventstore.Cursor{}, false, badParam("cursor", "give cursor or from_position, not both")
		}
		c, e := s.parseCursor("cursor", q.Get("cursor"))
		return c, false, e
	}
	if q.Has("from_position") {
		if shards := s.opts.Events.Shards(); shards > 1 {
			return eventstore.Cursor{}, false, fromPositionSharded(shards)
		}
		n, ok := parseSeq(q.Get("from_position"))
		if !ok || n < 1 {
			return eventstore.Cursor{}, false, badParam("from_position", "from_position must be an integer >= 1, got %q", q.Get("from_position"))
		}
		return eventstore.CursorOf(n - 1), false, nil
	}
	return eventstore.Cursor{}, true, nil
}

// subscribeStart is where a subscription without a start begins: after
// the head on a store of one shard (as before shards), after the log's
// tail on one of several (eventstore.Store.LogTail: nothing committed
// from now on is missed, in any shard).
func (s *server) subscribeStart(ctx context.Context) (eventstore.Cursor, error) {
	if s.opts.Events.Shards() > 1 {
		return s.opts.Events.LogTail(ctx)
	}
	head, err := s.opts.Events.Head(ctx)
	if err != nil {
		return eventstore.Cursor{}, err
	}
	return eventstore.CursorOf(head), nil
}

// startEventStream writes the status and headers of a Server-Sent Events
// stream (no caching, no buffering by a proxy).
func startEventStream(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", mediaEventStream)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
}
