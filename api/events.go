package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/sluicehq/sluice/auth"
	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/schema"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/httpcheck"
)

// EventLog is what the event API (/v1/streams, /v1/log) needs of the event
// store (*eventstore.Store): atomic batches, stream and log reads, the
// store's number of shards (which form of cursor the log reads take), and
// where a subscription without a start begins: after the head (one
// shard) or the log's tail (several).
type EventLog interface {
	AppendBatch(ctx context.Context, expect eventstore.Expectation, envs ...envelope.Envelope) ([]eventstore.Result, error)
	Stream(ctx context.Context, aggregateType, aggregateID string, fromSeq, toSeq int64, kind envelope.Kind) ([]eventstore.Event, error)
	Log(ctx context.Context, q eventstore.LogQuery) (eventstore.LogPage, error)
	Head(ctx context.Context) (int64, error)
	LogTail(ctx context.Context) (eventstore.Cursor, error)
	Shards() int
}

// Event API error codes (in addition to the command API's).
const (
	CodeEventIDReused  = "event_id_reused"  // 409
	CodePartialBatch   = "partial_batch"    // 409
	CodeStreamNotFound = "stream_not_found" // 404
)

func init() {
	problemTitles[CodeEventIDReused] = "Event id reused"
	problemTitles[CodePartialBatch] = "Partial batch"
	problemTitles[CodeStreamNotFound] = "Stream not found"
}

// Media types of the event API's inputs and outputs.
const (
	mediaCloudEvent      = "application/cloudevents+json"
	mediaCloudEventBatch = "application/cloudevents-batch+json"
	mediaEventStream     = "text/event-stream"
)

// mountEvents adds the event API's routes.
func (s *server) mountEvents(mux *http.ServeMux) {
	const stream = "/v1/streams/{aggregate_type}/{aggregate_id}/events"
	mux.HandleFunc("POST "+stream, s.handleAppendEvents)
	mux.HandleFunc("GET "+stream, s.handleReadStream)
	mux.HandleFunc("GET /v1/log", s.handleReadLog)
	mux.HandleFunc("GET /v1/log/subscribe", s.handleSubscribeLog)
	mux.HandleFunc("GET /v1/streams/{aggregate_type}/subscribe", s.handleSubscribeType)
}

// SchemaValidator is what the event API needs of the schema registry
// (*schema.Registry): the version of eventType's schema data validates
// against — the one the producer named, or the latest when version is 0 —
// (0: none named and the type has none, in open mode), or why not
// (*schema.DataError, *schema.NotRegisteredError); and for reads with
// as=latest, the event upcast to its type's latest version
// (*schema.UpcastError, *schema.UnavailableError). It answers from memory.
type SchemaValidator interface {
	ValidateVersion(ctx context.Context, eventType string, version int, data []byte) (int, error)
	Latest(ctx context.Context, e envelope.Envelope) (envelope.Envelope, error)
}

// eventInput is one event of an append request, before it becomes an
// envelope.
type eventInput struct {
	field      string // "events[i]" (or "" for a single CloudEvent)
	eventID    string
	eventType  string
	data       json.RawMessage
	metadata   envelope.Metadata
	occurredAt envelope.Timestamp
	// schemaVersion is the schema version the producer names (0: none,
	// the latest registered one is checked).
	schemaVersion int
	// typeField is where the request gave the event type when it is not
	// field + ".event_type": "type" of a CloudEvent, "ce-type" of a
	// binary one; refusals of the type name it.
	typeField string
	// idField likewise names where the request gave the event's id when
	// it is not field + ".event_id": "id" ("[i].id") of a CloudEvent,
	// "ce-id" of a binary one; an id reused or repeated is refused on it.
	idField string
}

// eventIDField is where the request gave in's event id.
func (in eventInput) eventIDField() string {
	if in.idField != "" {
		return in.idField
	}
	return strings.TrimPrefix(in.field+".event_id", ".")
}

// AppendedEvent is one stored event of an append reply.
type AppendedEvent struct {
	EventID        string `json:"event_id"`
	SequenceNumber int64  `json:"sequence_number"`
	Position       int64  `json:"position"`
}

// AppendReply is the body of a successful append: 201 when stored, 200
// when the request repeated a stored batch (Replayed).
type AppendReply struct {
	AggregateType string          `json:"aggregate_type"`
	AggregateID   string          `json:"aggregate_id"`
	FirstSequence int64           `json:"first_sequence"`
	LastSequence  int64           `json:"last_sequence"`
	Replayed      bool            `json:"replayed"`
	Events        []AppendedEvent `json:"events"`
}

// streamPath reads and checks the aggregate of a /v1/streams path.
func streamPath(r *http.Request) (aggType, aggID string, e *Error) {
	aggType, aggID = pathValue(r, "aggregate_type"), pathValue(r, "aggregate_id")
	if e := checkAggregateType(aggType); e != nil {
		return "", "", e
	}
	id, err := envelope.NormalizeAggregateID(aggID)
	if err != nil {
		return "", "", validationAs(err, "aggregate_id")
	}
	return aggType, id, nil
}

// checkAggregateType applies the envelope's aggregate_type rule, and keeps
// instances to the command API: their streams follow the slot rule of
// commands and their domain events (docs/eventstore.md), which only the instance
// worker writes.
func checkAggregateType(t string) *Error {
	if err := envelope.CheckText(t, "aggregate_type"); err != nil {
		return validationAs(err, "aggregate_type")
	}
	if !aggregateTypeRule.MatchString(t) {
		e := unprocessable("aggregate_type", "aggregate_type must match %s, got %q", envelope.AggregateTypePattern, t)
		e.Limit = envelope.AggregateTypePattern
		return e
	}
	if t == envelope.AggregateTypeInstance {
		return unprocessable("aggregate_type", "instances are written through the command API (/v1/dbs/{db}/classes/{class}/instances), not as events")
	}
	return nil
}

// aggregateTypeRule is envelope.AggregateTypePattern, anchored.
var aggregateTypeRule = regexp.MustCompile(`^` + envelope.AggregateTypePattern + `$`)

// parseExpectation reads expected_sequence: "any", "no_stream", "exists"
// or a sequence number >= 0 (JSON string or number; a query value).
func parseExpectation(v string, field string) (eventstore.Expectation, *Error) {
	switch v {
	case "", "any":
		return eventstore.Expectation{Kind: eventstore.ExpectAny}, nil
	case "no_stream":
		return eventstore.Expectation{Kind: eventstore.ExpectNoStream}, nil
	case "exists":
		return eventstore.Expectation{Kind: eventstore.ExpectExists}, nil
	}
	n, ok := parseSeq(v)
	if !ok {
		return eventstore.Expectation{}, unprocessable(field, `expected_sequence must be "any", "no_stream", "exists" or a sequence number >= 0, got %q`, v)
	}
	return eventstore.Expectation{Kind: eventstore.ExpectSequence, Seq: n}, nil
}

// handleAppendEvents serves POST /v1/streams/{aggregate_type}/{aggregate_id}/events.
func (s *server) handleAppendEvents(w http.ResponseWriter, r *http.Request) {
	aggType, aggID, e := streamPath(r)
	// A CloudEvent without data in the binary content mode has no
	// Content-Type: the header is its datacontenttype (the HTTP binding,
	// 3.1.1), which such an event does not have. Its body must be empty.
	dataless := r.Header.Get("Content-Type") == "" && isBinaryCloudEvent(r.Header)
	if e == nil && !dataless {
		e = checkMediaType(r, mediaJSON, mediaCloudEvent, mediaCloudEventBatch)
	}
	var b []byte
	if e == nil {
		b, e = readBody(w, r, s.opts.MaxBatchBodyBytes)
	}
	if e == nil && dataless && len(b) > 0 {
		e = checkMediaType(r, mediaJSON, mediaCloudEvent, mediaCloudEventBatch) // data needs its media type
	}
	var expect eventstore.Expectation
	var inputs []eventInput
	if e == nil {
		mt := mediaTypeOf(r)
		q := r.URL.Query()
		binary := (mt == mediaJSON || dataless) && isBinaryCloudEvent(r.Header)
		switch {
		case mt == mediaJSON && !binary:
			if q.Has("expected_sequence") {
				e = badParam("expected_sequence", "a JSON append names expected_sequence in its body")
				break
			}
			expect, inputs, e = s.parseAppendBody(b)
		default:
			if vals := q["expected_sequence"]; len(vals) > 1 {
				e = badParam("expected_sequence", "expected_sequence must be given once")
				break
			}
			// A query parameter that does not parse is 400
			// invalid_parameter, as every other one (docs/api.md#errors);
			// the body's expected_sequence stays 422.
			if expect, e = parseExpectation(q.Get("expected_sequence"), "expected_sequence"); e != nil {
				e = badParam(e.Field, "%s", e.Message)
			}
			switch {
			case e == nil && binary:
				var in eventInput
				if in, e = s.parseBinaryCloudEvent(r.Header, b); e == nil {
					inputs = []eventInput{in}
				}
			case e == nil:
				inputs, e = s.parseCloudEvents(b, mt == mediaCloudEventBatch)
			}
		}
	}
	if e == nil && len(inputs) == 0 {
		f := "events"
		if mediaTypeOf(r) == mediaCloudEventBatch {
			f = fieldBody // a CloudEvents batch is the array itself
		}
		e = unprocessable(f, "events must not be empty")
	}
	if e == nil && len(inputs) > s.opts.MaxBatchItems {
		e = newError(http.StatusRequestEntityTooLarge, CodeLimitExceeded, "events", "a batch holds at most %d events, got %d", s.opts.MaxBatchItems, len(inputs))
		e.Limit = strconv.Itoa(s.opts.MaxBatchItems) + " events"
	}
	var envs []envelope.Envelope
	for i := 0; e == nil && i < len(inputs); i++ {
		var env envelope.Envelope
		env, e = s.buildEvent(r, aggType, aggID, inputs[i])
		if e == nil {
			env.SchemaVersion, e = s.checkSchema(r.Context(), env, inputs[i])
		}
		envs = append(envs, env)
	}
	if e == nil {
		e = repeatedEventID(envs, inputs)
	}
	if e == nil {
		e = mixedOrderingKeys(envs, inputs)
	}
	if e != nil {
		s.metrics.command("event", "invalid")
		s.fail(w, r, e)
		return
	}
	res, err := s.opts.Events.AppendBatch(r.Context(), expect, envs...)
	if err == nil {
		for i := range res {
			if res[i].Err != nil {
				err = res[i].Err
				var ba *eventstore.BatchAbortedError
				if !errors.As(err, &ba) || ba.Index == i {
					break // the failing envelope's own error
				}
			}
		}
	}
	if err != nil {
		ae := s.fromEventAppend(err, envs, inputs, expect)
		s.metrics.command("event", resultLabel(ae))
		s.fail(w, r, ae)
		return
	}
	reply := AppendReply{AggregateType: aggType, AggregateID: aggID, Replayed: true, Events: make([]AppendedEvent, len(res))}
	for i, rs := range res {
		ev := rs.Event.Envelope
		reply.Events[i] = AppendedEvent{EventID: ev.EventID, SequenceNumber: ev.SequenceNumber, Position: ev.Position}
		reply.Replayed = reply.Replayed && rs.Duplicate
	}
	reply.FirstSequence, reply.LastSequence = reply.Events[0].SequenceNumber, reply.Events[len(res)-1].SequenceNumber
	w.Header().Set("Location", streamURL(aggType, aggID)+"?from_sequence="+strconv.FormatInt(reply.FirstSequence, 10))
	status := http.StatusCreated
	if reply.Replayed {
		status = http.StatusOK
		w.Header().Set("Idempotent-Replayed", "true")
		s.metrics.command("event", "replayed")
	} else {
		s.metrics.command("event", "accepted")
	}
	writeJSON(w, status, reply)
}

// repeatedEventID refuses one event id given twice in a request (a
// CloudEvent's source and id, or an event_id), naming where the second
// one was given; envs[i] is inputs[i]'s envelope.
func repeatedEventID(envs []envelope.Envelope, inputs []eventInput) *Error {
	first := make(map[string]int, len(envs)) // event id -> its first item
	for i, env := range envs {
		j, seen := first[env.EventID]
		if !seen {
			first[env.EventID] = i
			continue
		}
		e := unprocessable(inputs[i].eventIDField(), "the event id of %s repeats that of %s (event_id %s): an event is given once in a request",
			inputs[i].eventIDField(), inputs[j].eventIDField(), env.EventID)
		e.Limit = "distinct in a batch"
		return e
	}
	return nil
}

// mixedOrderingKeys refuses a request whose events do not share one
// metadata.ordering_key (given or left out alike): the key is the Kafka
// record key, and an aggregate's events must share it to land in one
// partition, in order (docs/architecture.md#aggregate-identity). Across
// appends the store does not compare keys (docs/kafka.md).
func mixedOrderingKeys(envs []envelope.Envelope, inputs []eventInput) *Error {
	for i := 1; i < len(envs); i++ {
		first, this := envs[0].Metadata.OrderingKey(), envs[i].Metadata.OrderingKey()
		if first == this {
			continue
		}
		f := strings.TrimPrefix(inputs[i].field+".metadata.ordering_key", ".")
		e := unprocessable(f, "%s is %q where the request's first event has %q: the ordering key is the Kafka record key, and every event of one stream must have the same one (or none) to stay in one partition, in order",
			f, this, first)
		e.Limit = "one ordering key per stream"
		return e
	}
	return nil
}

// streamURL is the path of a stream, each segment escaped so that ids
// "." and ".." name the stream, not a dot segment (httpcheck.PathSegment).
func streamURL(aggType, aggID string) string {
	return "/v1/streams/" + httpcheck.PathSegment(aggType) + "/" + httpcheck.PathSegment(aggID) + "/events"
}

func mediaTypeOf(r *http.Request) string {
	mt, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";")
	return strings.ToLower(strings.TrimSpace(mt))
}

// parseAppendBody reads {"expected_sequence": …, "events": [event, …]}
// where an event is {"event_id", "event_type", "data", "metadata",
// "occurred_at", "schema_version"}.
func (s *server) parseAppendBody(b []byte) (eventstore.Expectation, []eventInput, *Error) {
	var expect eventstore.Expectation
	// events[i].data sits three levels below the document.
	members, order, e := scanBody(b, depthRule{offset: 3, maxData: s.opts.Limits.MaxDataDepth})
	if e != nil {
		return expect, nil, e
	}
	if e := onlyFields(order, "expected_sequence", "events"); e != nil {
		return expect, nil, e
	}
	if v, ok := members["expected_sequence"]; ok && !isNull(v) {
		str := strings.TrimSpace(string(v))
		if len(v) > 0 && v[0] == '"' {
			var err error
			if str, err = strconv.Unquote(str); err != nil {
				return expect, nil, unprocessable("expected_sequence", "must be a string or a number")
			}
			if _, isNum := parseSeq(str); isNum {
				return expect, nil, unprocessable("expected_sequence", `a sequence number is given as a JSON number, got the string %q`, str)
			}
		}
		if expect, e = parseExpectation(str, "expected_sequence"); e != nil {
			return expect, nil, e
		}
	}
	var items []json.RawMessage
	v, ok := members["events"]
	if !ok || len(v) == 0 || v[0] != '[' || json.Unmarshal(v, &items) != nil {
		return expect, nil, unprocessable("events", "events must be a JSON array of event objects")
	}
	inputs := make([]eventInput, 0, len(items))
	for i, raw := range items {
		field := "events[" + strconv.Itoa(i) + "]"
		m, order, e := scanObject(raw, depthRule{offset: 1, maxData: s.opts.Limits.MaxDataDepth}, field)
		if e != nil {
			return expect, nil, e
		}
		for j := range order {
			if e := onlyFields(order[j:j+1], "event_id", "event_type", "data", "metadata", "occurred_at", "schema_version"); e != nil {
				e.Field = field + "." + e.Field
				return expect, nil, e
			}
		}
		in := eventInput{field: field}
		if v, ok := m["event_id"]; ok && !isNull(v) {
			if in.eventID, e = stringMember(v, field+".event_id"); e != nil {
				return expect, nil, e
			}
		}
		v, ok := m["event_type"]
		if !ok || isNull(v) {
			return expect, nil, unprocessable(field+".event_type", "event_type is required")
		}
		if in.eventType, e = stringMember(v, field+".event_type"); e != nil {
			return expect, nil, e
		}
		if v, ok := m["data"]; ok && !isNull(v) {
			if !isObject(v) {
				return expect, nil, unprocessable(field+".data", "must be a JSON object")
			}
			in.data = v
		}
		if v, ok := m["metadata"]; ok && !isNull(v) {
			if !isObject(v) || json.Unmarshal(v, &in.metadata) != nil {
				return expect, nil, unprocessable(field+".metadata", "must be a JSON object")
			}
		}
		if v, ok := m["occurred_at"]; ok && !isNull(v) {
			if err := json.Unmarshal(v, &in.occurredAt); err != nil {
				return expect, nil, unprocessable(field+".occurred_at", "must be an RFC 3339 time: %v", err)
			}
		}
		if v, ok := m["schema_version"]; ok && !isNull(v) {
			n, err := strconv.ParseInt(string(v), 10, 32)
			if err != nil || n < 1 {
				return expect, nil, unprocessable(field+".schema_version", "schema_version must be an integer >= 1, got %s", v)
			}
			in.schemaVersion = int(n)
		}
		inputs = append(inputs, in)
	}
	return expect, inputs, nil
}

// buildEvent turns one input into a domain envelope of the aggregate,
// checking every rule the store and the consumers apply: the envelope's
// (ids, event type, metadata, limits), the read model's data keys
// (readmodel.ValidateData, as for instance data: projections index event
// data) and the one size budget (envelope.CheckStoredSize against
// EVENT_STORE_MAX_ENVELOPE_BYTES; the relay's Kafka budget,
// topics.MessageBudget, is derived from it).
func (s *server) buildEvent(r *http.Request, aggType, aggID string, in eventInput) (envelope.Envelope, *Error) {
	at := func(f string) string {
		if in.field == "" {
			return f
		}
		if f == "" {
			return in.field
		}
		return in.field + "." + f
	}
	if in.eventID == "" {
		in.eventID = uuid.NewString()
	} else if !envelope.IsCanonicalUUID(strings.ToLower(in.eventID)) {
		return envelope.Envelope{}, unprocessable(at("event_id"), "event_id must be a UUID (%s), got %q", envelope.UUIDPattern, in.eventID)
	} else if in.eventID == uuid.Nil.String() {
		return envelope.Envelope{}, unprocessable(at("event_id"), "event_id must not be the nil UUID")
	}
	for k := range in.metadata {
		if k == envelope.MetaKafkaTopic {
			return envelope.Envelope{}, unprocessable(at("metadata.kafka_topic"), "events of the event API go to the events topic; metadata.kafka_topic is not accepted")
		}
	}
	if in.data != nil {
		if err := readmodel.ValidateData(in.data); err != nil {
			ae := fromDataError(err)
			ae.Field = at(ae.Field)
			return envelope.Envelope{}, ae
		}
	}
	env := envelope.Envelope{EventID: in.eventID, EventType: in.eventType, Kind: envelope.KindDomain,
		AggregateType: aggType, AggregateID: aggID, Data: in.data, Metadata: in.metadata, OccurredAt: in.occurredAt}
	if _, ok := env.Metadata[envelope.MetaTraceparent]; !ok {
		copyTraceHeaders(r, &env.Metadata) // an event's own traceparent wins, with its own tracestate
	}
	stampPrincipal(r, &env.Metadata)
	if in.data != nil {
		var compact bytes.Buffer
		if json.Compact(&compact, in.data) == nil {
			env.Data = compact.Bytes()
		}
	}
	norm, err := envelope.Normalize(env)
	if err == nil {
		err = envelope.Validate(norm, s.opts.Limits)
	}
	if err == nil {
		probe := norm
		if probe.OccurredAt.IsZero() {
			probe.OccurredAt = envelope.NewTimestamp(time.Now()) // the store sets it; same width
		}
		err = envelope.CheckStoredSize(probe, s.opts.Limits.MaxEnvelopeBytes)
	}
	if err != nil {
		var ve *envelope.ValidationError
		if errors.As(err, &ve) {
			ae := fromValidation(ve, "")
			ae.Field = at(ae.Field)
			return envelope.Envelope{}, ae
		}
		return envelope.Envelope{}, asError(err)
	}
	return norm, nil
}

// checkSchema validates env's data against its type's registered schema
// (docs/schemas.md) and returns the schema_version to record: the version
// checked, or envelope.DefaultSchemaVersion for a type without a schema.
// Any refusal refuses the whole batch before anything is appended.
func (s *server) checkSchema(ctx context.Context, env envelope.Envelope, in eventInput) (int, *Error) {
	if s.opts.Schemas == nil {
		if in.schemaVersion > 0 {
			return in.schemaVersion, nil
		}
		return env.SchemaVersion, nil
	}
	at := func(f string) string {
		if in.field == "" {
			return f
		}
		return in.field + "." + f
	}
	v, err := s.opts.Schemas.ValidateVersion(ctx, env.EventType, in.schemaVersion, env.Data)
	var de *schema.DataError
	var nr *schema.NotRegisteredError
	switch {
	case err == nil && v == 0:
		return env.SchemaVersion, nil
	case err == nil:
		return v, nil
	case errors.As(err, &de):
		return 0, &Error{Status: http.StatusUnprocessableEntity, Code: CodeSchemaInvalid, Field: at("data"),
			SchemaVersion: de.Version, Keyword: de.Keyword, Pointer: de.Pointer, Limit: fmt.Sprintf("%s v%d", env.EventType, de.Version),
			Message: de.Error() + "; nothing of the request was written"}
	case errors.As(err, &nr):
		field := at("event_type")
		if in.typeField != "" {
			field = in.typeField
		}
		if nr.Version > 0 {
			field = at("schema_version")
		}
		return 0, &Error{Status: http.StatusUnprocessableEntity, Code: CodeSchemaNotRegistered, Field: field,
			Message: nr.Error() + " (see sluice schema list); nothing of the request was written"}
	}
	return 0, &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "the schema registry could not be read; retry", cause: err, retryAfter: time.Second}
}

// fromEventAppend maps a failed atomic append to the API's error.
func (s *server) fromEventAppend(err error, envs []envelope.Envelope, inputs []eventInput, expect eventstore.Expectation) *Error {
	var bc *eventstore.BatchConflictError
	var me *eventstore.IdempotencyMismatchError
	var pe *eventstore.PartialBatchError
	field := func(eventID string) string {
		for i, env := range envs {
			if env.EventID == eventID {
				return inputs[i].eventIDField()
			}
		}
		return "event_id"
	}
	switch {
	case errors.As(err, &bc):
		act := bc.ActualSeq
		ae := &Error{Status: http.StatusConflict, Code: CodeConflict, Field: "expected_sequence", ActualSeq: &act,
			Message: fmt.Sprintf("expected_sequence %s does not hold: the stream's last sequence is %d; nothing was written", expect, act)}
		if expect.Kind == eventstore.ExpectSequence {
			exp := expect.Seq
			ae.ExpectedSeq = &exp
		}
		return ae
	case errors.As(err, &me):
		return &Error{Status: http.StatusConflict, Code: CodeEventIDReused, Field: strings.TrimPrefix(field(me.EventID), "."),
			Message: fmt.Sprintf("event_id %s is already stored with different content (stored %.12s…, this %.12s…); nothing of the batch was written", me.EventID, me.StoredHash, me.NewHash)}
	case errors.As(err, &pe):
		f := "events"
		if len(pe.StoredEventIDs) > 0 {
			f = field(pe.StoredEventIDs[0])
		}
		return &Error{Status: http.StatusConflict, Code: CodePartialBatch, Field: strings.TrimPrefix(f, "."),
			Message: fmt.Sprintf("events %v are stored already and the others are not: a retry repeats the whole batch, a new batch takes new event_ids; nothing was written", pe.StoredEventIDs)}
	}
	ae := fromAppend(err, "")
	if ae.Status == http.StatusServiceUnavailable {
		ae.Message = "the event store could not acknowledge the batch; it may or may not be stored: retry the same request (same event_ids)"
	}
	return ae
}

// StreamPage is the body of GET /v1/streams/{aggregate_type}/{aggregate_id}/events.
type StreamPage struct {
	AggregateType string `json:"aggregate_type"`
	AggregateID   string `json:"aggregate_id"`
	Direction     string `json:"direction"`
	// LastSequence is the stream's last sequence.
	LastSequence int64 `json:"last_sequence"`
	// Events are the stored envelopes byte for byte (with as=latest: each
	// upcast to its type's latest schema version), in the direction's
	// order.
	Events []json.RawMessage `json:"events"`
	// NextFromSequence is where the next page starts, when there is one.
	NextFromSequence *int64 `json:"next_from_sequence,omitempty"`
}

// handleReadStream serves GET …/events?from_sequence=&direction=forward|backward&limit=&as=
// (limit counts sequence numbers; a page may hold fewer events when
// sequences are empty).
func (s *server) handleReadStream(w http.ResponseWriter, r *http.Request) {
	aggType, aggID, e := streamPath(r)
	if e != nil {
		s.fail(w, r, e)
		return
	}
	q := r.URL.Query()
	dir := q.Get("direction")
	switch dir {
	case "":
		dir = "forward"
	case "forward", "backward":
	default:
		s.fail(w, r, badParam("direction", `direction must be "forward" or "backward", got %q`, dir))
		return
	}
	limit, e := s.pageLimit(q)
	if e != nil {
		s.fail(w, r, e)
		return
	}
	latest, e := parseAs(q)
	if e != nil {
		s.fail(w, r, e)
		return
	}
	var from int64
	if q.Has("from_sequence") {
		n, ok := parseSeq(q.Get("from_sequence"))
		if !ok || n < 1 {
			s.fail(w, r, badParam("from_sequence", "from_sequence must be an integer >= 1, got %q", q.Get("from_sequence")))
			return
		}
		from = n
	}
	head, err := s.opts.Sequences.LastSequence(r.Context(), aggType, aggID)
	if err != nil {
		s.fail(w, r, fromRead(err))
		return
	}
	if head == 0 {
		zero := int64(0)
		ae := newError(http.StatusNotFound, CodeStreamNotFound, "aggregate_id", "no events in stream %s %q", aggType, aggID)
		ae.SequenceNumber = &zero
		s.fail(w, r, ae)
		return
	}
	page := StreamPage{AggregateType: aggType, AggregateID: aggID, Direction: dir, LastSequence: head, Events: []json.RawMessage{}}
	var lo, hi int64
	if dir == "forward" {
		lo = max(from, 1)
		// hi is min(lo+limit-1, head), computed without lo+limit
		// overflowing when from_sequence is near the int64 maximum.
		hi = head
		if head-lo > limit-1 {
			hi = lo + limit - 1
		}
		if hi < head {
			n := hi + 1
			page.NextFromSequence = &n
		}
	} else {
		hi = head
		if from > 0 {
			hi = min(from, head)
		}
		lo = max(hi-limit+1, 1)
		if lo > 1 {
			n := lo - 1
			page.NextFromSequence = &n
		}
	}
	if lo <= hi {
		evs, err := s.opts.Events.Stream(r.Context(), aggType, aggID, lo, hi, "")
		if err != nil {
			s.fail(w, r, fromRead(err))
			return
		}
		for _, ev := range evs {
			b, e := s.present(r.Context(), ev, latest)
			if e != nil {
				s.fail(w, r, e)
				return
			}
			page.Events = append(page.Events, json.RawMessage(b))
		}
		if dir == "backward" {
			for i, j := 0, len(page.Events)-1; i < j; i, j = i+1, j-1 {
				page.Events[i], page.Events[j] = page.Events[j], page.Events[i]
			}
		}
	}
	writeJSON(w, http.StatusOK, page)
}

func (s *server) pageLimit(q url.Values) (int64, *Error) {
	limit := int64(defaultEventsPageSize)
	if q.Has("limit") {
		n, ok := parseSeq(q.Get("limit"))
		if !ok || n < 1 || n > int64(s.opts.MaxEventsPage) {
			return 0, badParam("limit", "limit must be an integer in 1..%d, got %q", s.opts.MaxEventsPage, q.Get("limit"))
		}
		limit = n
	}
	return limit, nil
}

// LogPageReply is the body of GET /v1/log.
type LogPageReply struct {
	// Events are committed envelopes byte for byte (with as=latest: each
	// upcast to its type's latest schema version): in position order on a
	// store of one shard; on a store of several, each shard's in position
	// order (so each aggregate's in its order), the shards merged by when
	// each event became readable (docs/api.md#the-log-cursor).
	Events []json.RawMessage `json:"events"`
	// NextFromPosition is, on a store of one shard, where to continue:
	// every position before it is final (committed or abandoned), so
	// polling from it misses nothing. Absent on a store of several shards.
	NextFromPosition int64 `json:"next_from_position,omitempty"`
	// NextCursor is the cursor to continue after (the cursor parameter of
	// the next page, or a subscription's Last-Event-ID): on a store of
	// one shard the position before NextFromPosition.
	NextCursor string `json:"next_cursor"`
}

// handleReadLog serves GET /v1/log?from_position=1&cursor=&limit=100&aggregate_type=&as=.
func (s *server) handleReadLog(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, e := s.pageLimit(q)
	if e != nil {
		s.fail(w, r, e)
		return
	}
	latest, e := parseAs(q)
	if e != nil {
		s.fail(w, r, e)
		return
	}
	from, e := s.logStart(q)
	if e != nil {
		s.fail(w, r, e)
		return
	}
	aggType := q.Get("aggregate_type")
	if aggType != "" {
		if e := checkTypeFilter(aggType); e != nil {
			s.fail(w, r, e)
			return
		}
	}
	page, err := s.opts.Events.Log(r.Context(), eventstore.LogQuery{Cursor: from, Limit: int(limit), AggregateType: aggType})
	if err != nil {
		s.fail(w, r, fromRead(err))
		return
	}
	reply := LogPageReply{Events: make([]json.RawMessage, 0, len(page.Events)), NextCursor: page.Next.String()}
	if page.Next.Shards() == 1 {
		reply.NextFromPosition = page.Through + 1
	}
	p := principalOf(r)
	for _, ev := range page.Events {
		if !mayRead(p, auth.OpRead, ev) {
			continue
		}
		b, e := s.present(r.Context(), ev, latest)
		if e != nil {
			s.fail(w, r, e)
			return
		}
		reply.Events = append(reply.Events, json.RawMessage(b))
	}
	writeJSON(w, http.StatusOK, reply)
}

// logStart is where GET /v1/log starts: after the cursor parameter, or
// (a store of one shard) before from_position, or at the beginning.
func (s *server) logStart(q url.Values) (eventstore.Cursor, *Error) {
	shards := s.opts.Events.Shards()
	if q.Has("cursor") && q.Has("from_position") {
		return eventstore.Cursor{}, badParam("cursor", "give cursor or from_position, not both")
	}
	if q.Has("cursor") {
		return s.parseCursor("cursor", q.Get("cursor"))
	}
	if !q.Has("from_position") {
		return eventstore.StartCursor(shards), nil
	}
	if shards > 1 {
		return eventstore.Cursor{}, fromPositionSharded(shards)
	}
	n, ok := parseSeq(q.Get("from_position"))
	if !ok || n < 1 {
		return eventstore.Cursor{}, badParam("from_position", "from_position must be an integer >= 1, got %q", q.Get("from_position"))
	}
	return eventstore.CursorOf(n - 1), nil
}

// fromPositionSharded refuses from_position on a store of several shards.
func fromPositionSharded(shards int) *Error {
	return badParam("from_position", "the store has %d shards, each with its own positions: read the log by cursor "+
		"(leave it out to start at the beginning; then pass the next_cursor or the last event id you received; docs/api.md#the-log-cursor)", shards)
}

// parseCursor reads a log cursor given as param (a query parameter or
// Last-Event-ID) for the store's number of shards. On a store of one
// shard it is a position, read as before shards (leading zeros allowed).
func (s *server) parseCursor(param, v string) (eventstore.Cursor, *Error) {
	shards := s.opts.Events.Shards()
	if shards <= 1 {
		if n, ok := parseSeq(v); ok {
			if n == math.MaxInt64 {
				// No position follows it: the reply's next_from_position
				// (cursor + 1) would overflow.
				return eventstore.Cursor{}, badParam(param, "%s must be a log position below %d, got %q", param, int64(math.MaxInt64), v)
			}
			return eventstore.CursorOf(n), nil
		}
	}
	c, err := eventstore.ParseCursor(v)
	if err == nil {
		c, err = c.ForStore(shards)
	}
	var se *eventstore.CursorShardsError
	var ce *eventstore.CursorError
	switch {
	case err == nil:
		return c, nil
	case errors.As(err, &se):
		return eventstore.Cursor{}, badParam(param, "%s names %d shard(s) but the store has %d: a cursor is valid only for the store it came from (docs/api.md#the-log-cursor)",
			param, se.Cursor, se.Store)
	case shards <= 1:
		return eventstore.Cursor{}, badParam(param, "%s must be a log position (an integer >= 0), got %q", param, v)
	case errors.As(err, &ce):
		return eventstore.Cursor{}, badParam(param, "%s is not a log cursor: %s (v1.%d. then %d positions separated by dots; docs/api.md#the-log-cursor)",
			param, ce.Reason, shards, shards)
	default:
		return eventstore.Cursor{}, badParam(param, "%s: %v", param, err)
	}
}

// checkTypeFilter checks an aggregate_type used as a filter (instances
// may be read).
func checkTypeFilter(t string) *Error {
	if err := envelope.CheckText(t, "aggregate_type"); err != nil {
		return validationAs(err, "aggregate_type")
	}
	if t == envelope.AggregateTypeInstance {
		return nil
	}
	if e := checkAggregateType(t); e != nil {
		e.Status, e.Code = http.StatusBadRequest, CodeInvalidParameter
		return e
	}
	return nil
}
