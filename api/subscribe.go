package api

import (
	"bytes"
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
	ctx := r.Context()
	stopping := drain.Signal(ctx)
	if drain.Stopping(ctx) {
		e := newError(http.StatusServiceUnavailable, CodeUnavailable, "",
			"the API is shutting down; subscribe again after Retry-After with your Last-Event-ID")
		e.retryAfter = defaultRetryAfter
		writeError(w, e) // expected during a restart: not logged as a failure
		return
	}
	q := r.URL.Query()
	after := int64(-1)
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		n, ok := parseSeq(strings.TrimSpace(v))
		if !ok {
			s.fail(w, r, badParam("Last-Event-ID", "Last-Event-ID must be a log position (an integer >= 0), got %q", v))
			return
		}
		after = n
	} else if q.Has("from_position") {
		n, ok := parseSeq(q.Get("from_position"))
		if !ok || n < 1 {
			s.fail(w, r, badParam("from_position", "from_position must be an integer >= 1, got %q", q.Get("from_position")))
			return
		}
		after = n - 1
	}
	latest, e := parseAs(q)
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
	h := w.Header()
	h.Set("Content-Type", mediaEventStream)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	var buf bytes.Buffer
	flush := func() bool {
		_ = rc.SetWriteDeadline(time.Now().Add(s.opts.SSEHeartbeat + 30*time.Second))
		if _, err := w.Write(buf.Bytes()); err != nil {
			return false
		}
		buf.Reset()
		return rc.Flush() == nil
	}
	buf.WriteString("retry: 1000\n: subscribed after position " + strconv.FormatInt(after, 10) + "\n\n")
	if !flush() {
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
		buf.WriteString(shutdownComment)
		flush()
	}
	// closeWith ends the stream with an error event (what was sent before
	// it stands: the client resumes from its last id).
	closeWith := func(ae *Error) {
		b, _ := marshalNoEscape(ae)
		buf.WriteString("event: error\ndata: ")
		buf.Write(b)
		buf.WriteString("\n\n")
		flush()
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
			closeWith(fromRead(err))
			return
		}
		for _, ev := range page.Events {
			if !mayRead(p, auth.OpSubscribe, ev) {
				continue // another tenant's: never sent (docs/security.md)
			}
			line, ae := s.present(ctx, ev, latest) // one line: JSON without newlines
			if ae != nil {
				s.log.Error("api: subscription cannot upcast an event; closing the stream (the client resumes from its last id)", "position", ev.Envelope.Position, "err", ae.cause)
				closeWith(ae)
				return
			}
			buf.WriteString("id: ")
			buf.WriteString(strconv.FormatInt(ev.Envelope.Position, 10))
			buf.WriteString("\ndata: ")
			buf.Write(line)
			buf.WriteString("\n\n")
		}
		after = max(after, page.Through)
		if buf.Len() > 0 {
			if !flush() {
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
			buf.WriteString(": keep-alive\n\n")
			if !flush() {
				return
			}
		}
	}
}
