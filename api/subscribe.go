package api

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
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
// Events: one event per envelope, "id:" its position, "data:" the stored
// line. It starts after Last-Event-ID (a reconnecting EventSource sends
// the id it saw last), else at from_position, else at the current head;
// it catches up page by page, then waits for commit notifications (and
// polls, so a missed notification only delays). Every position up to what
// it sent is final (eventstore.LogPage.Through), so resuming from the
// last id misses nothing and repeats nothing.
//
// When the server begins to shut down (drain.Signal), the stream ends at
// once with a "shutting down" comment and the client reconnects with its
// Last-Event-ID, to another instance or to this one restarted; a
// subscription asked for during the shutdown is refused with 503 and
// Retry-After (docs/api.md, "Subscriptions").
func (s *server) subscribe(w http.ResponseWriter, r *http.Request, aggType string) {
	if err := s.opts.Events.RequireOneShard("the log subscriptions (" + r.URL.Path + ")"); err != nil {
		s.fail(w, r, fromRead(err))
		return
	}
	ctx := r.Context()
	stopping := drain.Signal(ctx)
	if drain.Stopping(ctx) {
		writeError(w, subscribeShuttingDown()) // expected during a restart: not logged as a failure
		return
	}
	after, e := subscribeAfter(r)
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
	if after < 0 {
		head, err := s.opts.Events.Head(ctx)
		if err != nil {
			s.fail(w, r, fromRead(err))
			return
		}
		after = head
	}
	startEventStream(w)
	st := &sseWriter{w: w, rc: http.NewResponseController(w), writeTimeout: s.opts.SSEHeartbeat + 30*time.Second}
	st.buf.WriteString("retry: 1000\n: subscribed after position " + strconv.FormatInt(after, 10) + "\n\n")
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
		s.log.Debug("api: subscription ended: shutting down", "after", after)
		st.buf.WriteString(shutdownComment)
		st.flush()
	}
	for {
		if drain.Stopping(ctx) { // between pages of a catch-up
			shutdown()
			return
		}
		page, err := s.opts.Events.Log(ctx, eventstore.LogQuery{After: after, Limit: ssePageSize, AggregateType: aggType})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("api: subscription read failed; closing the stream (the client resumes from its last id)", "err", err)
			st.closeWith(fromRead(err))
			return
		}
		if !s.writePage(ctx, st, page.Events, p, latest) {
			return
		}
		after = max(after, page.Through)
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
// presented (upcast with ?as=latest), as "id: <position>" and "data:
// <line>". It returns false when an event cannot be presented: the stream
// is then closed with the error (the client resumes from its last id).
func (s *server) writePage(ctx context.Context, st *sseWriter, evs []eventstore.Event, p *auth.Principal, latest bool) bool {
	for _, ev := range evs {
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
		st.buf.WriteString(strconv.FormatInt(ev.Envelope.Position, 10))
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

// subscribeAfter returns the position a subscription starts after: the
// Last-Event-ID a reconnecting client sends, else from_position - 1, else
// -1 for the current head.
func subscribeAfter(r *http.Request) (int64, *Error) {
	q := r.URL.Query()
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		n, ok := parseSeq(strings.TrimSpace(v))
		if !ok {
			return 0, badParam("Last-Event-ID", "Last-Event-ID must be a log position (an integer >= 0), got %q", v)
		}
		return n, nil
	}
	if q.Has("from_position") {
		n, ok := parseSeq(q.Get("from_position"))
		if !ok || n < 1 {
			return 0, badParam("from_position", "from_position must be an integer >= 1, got %q", q.Get("from_position"))
		}
		return n - 1, nil
	}
	return -1, nil
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
