package client

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/google/uuid"
)

// ExpectedSequence is an append's precondition on the stream
// (expected_sequence): AnySequence, NoStream, StreamExists or the last
// sequence read, AtSequence(n).
type ExpectedSequence string

// The expectations that name no number. The zero value is AnySequence.
const (
	// AnySequence appends whatever the stream holds.
	AnySequence ExpectedSequence = "any"
	// NoStream appends only to a stream without events.
	NoStream ExpectedSequence = "no_stream"
	// StreamExists appends only to a stream with at least one event.
	StreamExists ExpectedSequence = "exists"
)

// AtSequence appends only when the stream's last sequence is n (0: the
// stream is empty).
func AtSequence(n int64) ExpectedSequence { return ExpectedSequence(strconv.FormatInt(n, 10)) }

// MarshalJSON writes a sequence number as a JSON number and the other
// forms as strings, as the API wants them.
func (e ExpectedSequence) MarshalJSON() ([]byte, error) {
	if e == "" {
		return []byte(`"any"`), nil
	}
	if _, err := strconv.ParseInt(string(e), 10, 64); err == nil {
		return []byte(e), nil
	}
	return json.Marshal(string(e))
}

// EventData is one event to append.
type EventData struct {
	// EventID is the event's UUID, its idempotency key: a repeated append
	// of the same event (same id, same content) returns the stored one.
	// Empty: the client generates one (a random UUID) before the first
	// attempt and keeps it for the retries.
	EventID string `json:"event_id"`
	// EventType matches [A-Z][A-Z0-9_]{0,127}.
	EventType string `json:"event_type"`
	// Data is the payload, a JSON object: a json.RawMessage or a value
	// encoding/json encodes as an object. nil sends none.
	Data any `json:"data,omitempty"`
	// Metadata are the event's metadata (correlation_id, causation_id,
	// free keys).
	Metadata map[string]any `json:"metadata,omitempty"`
	// OccurredAt, when set, is when the event happened (else the store's
	// clock).
	OccurredAt time.Time `json:"occurred_at,omitzero"`
}

// AppendedEvent is where one appended event was stored.
type AppendedEvent struct {
	EventID        string `json:"event_id"`
	SequenceNumber int64  `json:"sequence_number"`
	Position       int64  `json:"position"`
}

// AppendResult is the reply to an append.
type AppendResult struct {
	AggregateType string `json:"aggregate_type"`
	AggregateID   string `json:"aggregate_id"`
	FirstSequence int64  `json:"first_sequence"`
	LastSequence  int64  `json:"last_sequence"`
	// Replayed is true when the batch was stored already (by an earlier
	// attempt whose reply was lost, or an earlier call with the same
	// event ids): nothing new was written.
	Replayed bool            `json:"replayed"`
	Events   []AppendedEvent `json:"events"`
}

// Append appends events to the stream of one aggregate, atomically: all
// of them at consecutive sequences, or none. expected is checked by the
// store ("" is AnySequence); a mismatch is a *ConflictError carrying the
// stream's actual sequence. Events without an EventID get one, so the
// append is retried safely: a lost reply or a 503 is repeated and answered
// with the stored result (AppendResult.Replayed).
func (c *Client) Append(ctx context.Context, aggregateType, aggregateID string, expected ExpectedSequence, events ...EventData) (*AppendResult, error) {
	if len(events) == 0 {
		return nil, fmt.Errorf("sluice client: append to %s %q: no events", aggregateType, aggregateID)
	}
	evs := make([]EventData, len(events))
	for i, ev := range events {
		if ev.EventID == "" {
			ev.EventID = uuid.NewString()
		}
		if raw, ok := ev.Data.(json.RawMessage); ok && raw == nil {
			ev.Data = nil
		}
		evs[i] = ev
	}
	if expected == "" {
		expected = AnySequence
	}
	body, err := jsonBody(struct {
		Expected ExpectedSequence `json:"expected_sequence"`
		Events   []EventData      `json:"events"`
	}{expected, evs})
	if err != nil {
		return nil, err
	}
	res, err := c.do(ctx, request{method: http.MethodPost, path: streamPath(aggregateType, aggregateID) + "/events",
		body: body, ctype: "application/json", idempotent: true})
	if err != nil {
		return nil, err
	}
	var out AppendResult
	if err := decode(res, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func streamPath(aggregateType, aggregateID string) string {
	return "/v1/streams/" + seg(aggregateType) + "/" + seg(aggregateID)
}

// Event is one stored event (an envelope) as the API returns it.
type Event struct {
	EventID       string `json:"event_id"`
	EventType     string `json:"event_type"`
	Kind          string `json:"kind"`
	AggregateType string `json:"aggregate_type"`
	AggregateID   string `json:"aggregate_id"`
	// SequenceNumber is the event's place in its aggregate's stream,
	// Position its place in the global log.
	SequenceNumber int64                      `json:"sequence_number"`
	Position       int64                      `json:"position"`
	OccurredAt     time.Time                  `json:"occurred_at"`
	Data           json.RawMessage            `json:"data"`
	Metadata       map[string]json.RawMessage `json:"metadata,omitempty"`
	// SchemaVersion is the version of its event type's schema that Data
	// follows: as validated at append, or the latest one when the read
	// asked for Latest (docs/schemas.md#upcasting-on-read).
	SchemaVersion int `json:"schema_version,omitempty"`
	// Raw is the envelope byte for byte as the API sent it (the stored
	// line, unless Latest upcast it).
	Raw json.RawMessage `json:"-"`
	// Cursor is the log cursor after this event, where the server gives
	// one: on every event a subscription delivers (its SSE id) and on the
	// last event of each log page (the page's NextCursor); empty on the
	// other events of a log page and on stream reads. Store it once the
	// event is handled and pass it back as SubscribeOptions.Cursor or
	// LogOptions.Cursor: the read resumes after this event, missing
	// nothing and repeating nothing, on a store of any number of shards.
	// It is opaque (docs/api.md#the-log-cursor): keep it as the API
	// spelt it; it is valid only for the store it came from.
	Cursor string `json:"-"`
}

func parseEvents(raws []json.RawMessage) ([]Event, error) {
	out := make([]Event, len(raws))
	for i, raw := range raws {
		if err := json.Unmarshal(raw, &out[i]); err != nil {
			return nil, fmt.Errorf("sluice client: decode event %d: %w", i, err)
		}
		out[i].Raw = raw
	}
	return out, nil
}

// StreamOptions select a page (or, for ReadStream, the start) of a
// stream.
type StreamOptions struct {
	// FromSequence is the first sequence to read (forward) or the last
	// (backward); 0 is the start (forward) or the end (backward).
	FromSequence int64
	// Backward reads newest first.
	Backward bool
	// Limit is the page size in sequence numbers (1..1000; 0: the API's
	// default, 100).
	Limit int
	// Latest asks for each event upcast to its type's latest registered
	// schema version (as=latest; docs/schemas.md#upcasting-on-read).
	// Stored events are never rewritten.
	Latest bool
}

// StreamPage is one page of a stream.
type StreamPage struct {
	AggregateType string
	AggregateID   string
	// LastSequence is the stream's last sequence when the page was read.
	LastSequence int64
	Events       []Event
	// NextFromSequence is where the next page starts; 0 on the last page.
	NextFromSequence int64
}

// ReadStreamPage reads one page of an aggregate's stream. A stream
// without events is a *NotFoundError (stream_not_found).
func (c *Client) ReadStreamPage(ctx context.Context, aggregateType, aggregateID string, o StreamOptions) (*StreamPage, error) {
	q := url.Values{}
	if o.FromSequence > 0 {
		q.Set("from_sequence", strconv.FormatInt(o.FromSequence, 10))
	}
	if o.Backward {
		q.Set("direction", "backward")
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	setLatest(q, o.Latest)
	res, err := c.do(ctx, request{method: http.MethodGet, path: streamPath(aggregateType, aggregateID) + "/events", query: q, idempotent: true})
	if err != nil {
		return nil, err
	}
	var page struct {
		AggregateType    string            `json:"aggregate_type"`
		AggregateID      string            `json:"aggregate_id"`
		LastSequence     int64             `json:"last_sequence"`
		Events           []json.RawMessage `json:"events"`
		NextFromSequence *int64            `json:"next_from_sequence"`
	}
	if err := decode(res, &page); err != nil {
		return nil, err
	}
	evs, err := parseEvents(page.Events)
	if err != nil {
		return nil, err
	}
	out := &StreamPage{AggregateType: page.AggregateType, AggregateID: page.AggregateID, LastSequence: page.LastSequence, Events: evs}
	if page.NextFromSequence != nil {
		out.NextFromSequence = *page.NextFromSequence
	}
	return out, nil
}

// ReadStream iterates over an aggregate's stream from o.FromSequence to
// its end (or, backward, to its start), page by page. The iteration stops
// at the first error, which it yields (a stream without events: a
// *NotFoundError).
func (c *Client) ReadStream(ctx context.Context, aggregateType, aggregateID string, o StreamOptions) iter.Seq2[Event, error] {
	var next int64
	return pagedEvents(func() ([]Event, error) {
		page, err := c.ReadStreamPage(ctx, aggregateType, aggregateID, o)
		if err != nil {
			return nil, err
		}
		next = page.NextFromSequence
		return page.Events, nil
	}, func() bool {
		if next == 0 {
			return false
		}
		o.FromSequence = next
		return true
	})
}

// pagedEvents is the iteration of ReadStream and ReadLog: it yields the
// events of the page read returns, then asks more whether another page
// follows (more moves the read on past the page), until the consumer
// stops; it stops at the first error, which it yields.
func pagedEvents(read func() ([]Event, error), more func() bool) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		for {
			evs, err := read()
			if err != nil {
				yield(Event{}, err)
				return
			}
			for _, ev := range evs {
				if !yield(ev, nil) {
					return
				}
			}
			if !more() {
				return
			}
		}
	}
}

// LogOptions select a page (or, for ReadLog, the start) of the global
// log.
type LogOptions struct {
	// Cursor, when set, reads after it: a LogPage.NextCursor or an
	// Event.Cursor this API gave, sent back as it was (the client never
	// interprets it; docs/api.md#the-log-cursor). It works on a store of
	// any number of shards. Empty (and no FromPosition): from the start
	// of the log. A cursor of another store, or of another number of
	// shards, is a *ValidationError (Field "cursor").
	Cursor string
	// FromPosition is the first position to read (0: the start). It
	// serves a store of one shard only: a store of several shards has no
	// global position and answers it 400 invalid_parameter, returned as a
	// *ValidationError with Field "from_position"; read such a store by
	// Cursor. Cursor and FromPosition together are refused likewise
	// (Field "cursor").
	FromPosition int64
	// Limit is the page size (1..1000; 0: the API's default, 100).
	Limit int
	// AggregateType, when set, reads only that type's events.
	AggregateType string
	// Latest asks for each event upcast to its type's latest registered
	// schema version (as=latest; docs/schemas.md#upcasting-on-read).
	// Stored events are never rewritten.
	Latest bool
}

// LogPage is one page of the log.
type LogPage struct {
	Events []Event
	// NextCursor is where to continue, on a store of any number of
	// shards: pass it as LogOptions.Cursor (or SubscribeOptions.Cursor).
	// Every shard's positions up to it are final, so reading on from it
	// misses nothing and repeats nothing. The last event of the page
	// carries it too (Event.Cursor). Empty from a server that does not
	// read by cursor.
	NextCursor string
	// NextFromPosition is, on a store of one shard, where to continue by
	// position: every position before it is final. 0 on a store of
	// several shards, whose API sends no global position (use
	// NextCursor).
	NextFromPosition int64
}

// ReadLogPage reads one page of the global log: after o.Cursor, else
// from o.FromPosition (a store of one shard only; a store of several
// shards answers a *ValidationError on Field "from_position"), else from
// the start.
func (c *Client) ReadLogPage(ctx context.Context, o LogOptions) (*LogPage, error) {
	q := url.Values{}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	if o.FromPosition > 0 {
		q.Set("from_position", strconv.FormatInt(o.FromPosition, 10))
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.AggregateType != "" {
		q.Set("aggregate_type", o.AggregateType)
	}
	setLatest(q, o.Latest)
	res, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/log", query: q, idempotent: true})
	if err != nil {
		return nil, err
	}
	var page struct {
		Events           []json.RawMessage `json:"events"`
		NextFromPosition int64             `json:"next_from_position"`
		NextCursor       string            `json:"next_cursor"`
	}
	if err := decode(res, &page); err != nil {
		return nil, err
	}
	evs, err := parseEvents(page.Events)
	if err != nil {
		return nil, err
	}
	if n := len(evs); n > 0 {
		evs[n-1].Cursor = page.NextCursor
	}
	return &LogPage{Events: evs, NextCursor: page.NextCursor, NextFromPosition: page.NextFromPosition}, nil
}

// ReadLog iterates over the global log from where o says (see
// ReadLogPage) to what is final now, page by page, and stops when a page
// brings no progress (to follow the log as it grows, use Subscribe). It
// continues each page after the previous page's NextCursor, so it reads
// a store of any number of shards (from a server that does not read by
// cursor, by NextFromPosition). The last event of each page carries the
// cursor to resume after it (Event.Cursor). The iteration stops at the
// first error, which it yields.
func (c *Client) ReadLog(ctx context.Context, o LogOptions) iter.Seq2[Event, error] {
	var page *LogPage
	return pagedEvents(func() (evs []Event, err error) {
		if page, err = c.ReadLogPage(ctx, o); err != nil {
			return nil, err
		}
		return page.Events, nil
	}, func() bool {
		switch {
		case page.NextCursor != "":
			if page.NextCursor == o.Cursor {
				return false
			}
			o.Cursor, o.FromPosition = page.NextCursor, 0
		case page.NextFromPosition > max(o.FromPosition, 1) && o.Cursor == "":
			o.FromPosition = page.NextFromPosition
		default:
			return false
		}
		return true
	})
}

// setLatest asks a read for the latest schema version of each event.
func setLatest(q url.Values, latest bool) {
	if latest {
		q.Set("as", "latest")
	}
}
