package envelope

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Kind says whether an envelope carries a command or a domain event.
type Kind string

const (
	// KindCommand marks a command (a request to change an aggregate).
	KindCommand Kind = "command"
	// KindDomain marks a domain event (a fact that happened to an aggregate).
	KindDomain Kind = "domain"
)

// Valid reports whether k is one of the defined kinds.
func (k Kind) Valid() bool { return k == KindCommand || k == KindDomain }

// AggregateTypeInstance is the aggregate_type of instances (docs/architecture.md#aggregate-identity); their
// aggregate_id has the form {db}:{class}:{instance_id}.
const AggregateTypeInstance = "Instance"

// DefaultSchemaVersion is the schema_version of an envelope that names none.
const DefaultSchemaVersion = 1

// Envelope is one command or domain event as stored in the event store and
// published to Kafka (docs/architecture.md#the-envelope). The zero values of SequenceNumber and
// Position mean "not assigned yet"; a nil ExpectedSeq means "no OCC
// precondition". Use Parse for bytes from the wire, Prepare (or Normalize,
// FillDefaults and Validate) for envelopes built in Go, and Marshal to encode.
type Envelope struct {
	// EventID is the unique id of the event: a UUID in canonical lower-case
	// form, for domain events of commands the DomainEventID.
	EventID string `json:"event_id"`
	// EventType names the event, EventTypePattern
	// ([A-Za-z0-9][A-Za-z0-9._-]{0,127}), stored exactly as given.
	EventType string `json:"event_type"`
	// Kind is KindCommand or KindDomain.
	Kind Kind `json:"kind"`
	// AggregateType names the aggregate's type, [A-Za-z][A-Za-z0-9_]{0,63}.
	AggregateType string `json:"aggregate_type"`
	// AggregateID identifies the aggregate, normalised per docs/architecture.md#aggregate-identity.
	AggregateID string `json:"aggregate_id"`
	// SequenceNumber is the per-aggregate sequence assigned by the store
	// (≥ 1); 0 means not assigned.
	SequenceNumber int64 `json:"sequence_number,omitempty"`
	// Position is the global append position assigned by the store (≥ 1);
	// 0 means not assigned.
	Position int64 `json:"position,omitempty"`
	// ExpectedSeq is the optional OCC precondition of a command (≥ 0).
	ExpectedSeq *int64 `json:"expected_seq,omitempty"`
	// OccurredAt is when the event occurred, UTC with millisecond precision.
	OccurredAt Timestamp `json:"occurred_at,omitzero"`
	// Actor optionally names who caused the event.
	Actor string `json:"actor,omitempty"`
	// Data is the payload, a JSON object. For domain events of instances it
	// is the full new state.
	Data json.RawMessage `json:"data"`
	// Metadata holds command_id, correlation_id, causation_id, kafka_topic,
	// ordering_key, traceparent, tracestate and free keys.
	Metadata Metadata `json:"metadata,omitempty"`
	// SchemaVersion is the version of the data schema (≥ 1, default 1).
	SchemaVersion int `json:"schema_version"`
}

// Marshal encodes e as the store writes it: compact JSON, fields in
// declaration order, metadata keys sorted, no HTML escaping, no trailing
// newline. It does not validate e. The bytes (and the error for data or
// metadata that is not valid JSON) are EncodeJSON(e)'s, written without
// reflection (encode.go).
func Marshal(e Envelope) ([]byte, error) {
	return appendEnvelope(make([]byte, 0, sizeHint(&e)), &e, false, nil, nil)
}

// EncodeJSON encodes v as the store writes JSON: compact, no HTML escaping
// ('<', '>' and '&' stay one byte each instead of six), no trailing
// newline. It is the module's one such encoder (metadata, the API's
// replies and problem documents, declarative projections' documents);
// Marshal writes the same bytes for an Envelope without reflection.
func EncodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// timestampLayout is RFC 3339 in UTC with exactly three fractional digits.
const timestampLayout = "2006-01-02T15:04:05.000Z"

// Timestamp is an instant with millisecond precision that encodes as RFC 3339
// UTC with three fractional digits, e.g. "2026-11-21T10:00:00.123Z". The zero
// Timestamp means "not set" and is omitted from envelopes.
type Timestamp struct {
	t time.Time
}

// NewTimestamp returns t converted to UTC and truncated to milliseconds.
func NewTimestamp(t time.Time) Timestamp {
	if t.IsZero() {
		return Timestamp{}
	}
	return Timestamp{t: t.UTC().Truncate(time.Millisecond)}
}

// ParseTimestamp parses an RFC 3339 time (any offset, any number of
// fractional digits; "t" and "z" in lower case, as RFC 3339 section 5.6
// allows) and normalises it to UTC milliseconds.
func ParseTimestamp(s string) (Timestamp, error) {
	// time.Parse wants the upper-case letters; RFC 3339 allows both. A
	// refusal quotes s as sent.
	sent := s
	if len(s) > 10 && s[10] == 't' || strings.HasSuffix(s, "z") {
		b := []byte(s)
		if len(b) > 10 && b[10] == 't' {
			b[10] = 'T'
		}
		if b[len(b)-1] == 'z' {
			b[len(b)-1] = 'Z'
		}
		s = string(b)
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return Timestamp{}, fmt.Errorf("not an RFC 3339 time: %q", sent)
	}
	ts := NewTimestamp(t)
	if y := ts.t.Year(); y < 1 || y > 9999 {
		return Timestamp{}, fmt.Errorf("year %d out of range 0001..9999 in UTC", y)
	}
	return ts, nil
}

// Time returns the instant as a UTC time.Time (the zero time if unset).
func (ts Timestamp) Time() time.Time { return ts.t }

// IsZero reports whether the timestamp is unset.
func (ts Timestamp) IsZero() bool { return ts.t.IsZero() }

// String returns the RFC 3339 UTC millisecond form, or "" if unset.
func (ts Timestamp) String() string {
	if ts.t.IsZero() {
		return ""
	}
	return ts.t.Format(timestampLayout)
}

// MarshalJSON encodes the timestamp as a JSON string ("null" if unset).
func (ts Timestamp) MarshalJSON() ([]byte, error) {
	if ts.t.IsZero() {
		return []byte("null"), nil
	}
	return ts.appendJSON(make([]byte, 0, len(timestampLayout)+2))
}

// appendJSON appends the JSON string of a set timestamp.
func (ts Timestamp) appendJSON(dst []byte) ([]byte, error) {
	if y := ts.t.Year(); y < 1 || y > 9999 {
		return nil, fmt.Errorf("envelope: timestamp year %d out of range", y)
	}
	dst = append(dst, '"')
	dst = ts.t.AppendFormat(dst, timestampLayout)
	return append(dst, '"'), nil
}

// UnmarshalJSON decodes a JSON string in RFC 3339 form (null leaves the
// timestamp unset).
func (ts *Timestamp) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*ts = Timestamp{}
		return nil
	}
	var s string
	if p, ok := plainString(b); ok {
		// Every stored line's occurred_at (the relay decodes each line it
		// publishes).
		s = p
	} else if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("timestamp must be a JSON string")
	}
	v, err := ParseTimestamp(s)
	if err != nil {
		return err
	}
	*ts = v
	return nil
}

// Well-known metadata keys (docs/architecture.md#the-envelope).
const (
	// MetaCommandID is the id of the command an envelope is or stems from.
	MetaCommandID = "command_id"
	// MetaCorrelationID groups the envelopes of one business flow.
	MetaCorrelationID = "correlation_id"
	// MetaCausationID is the event_id of the envelope that caused this one.
	MetaCausationID = "causation_id"
	// MetaKafkaTopic overrides the topic the relay publishes to (transport).
	MetaKafkaTopic = "kafka_topic"
	// MetaOrderingKey overrides the Kafka record key (see KafkaKey).
	MetaOrderingKey = "ordering_key"
	// MetaTraceparent is the W3C trace context traceparent (transport).
	MetaTraceparent = "traceparent"
	// MetaTracestate is the W3C trace context tracestate (transport).
	MetaTracestate = "tracestate"
	// MetaBaggage is the W3C baggage header (transport).
	MetaBaggage = "baggage"
	// MetaTraceID is a trace id (transport).
	MetaTraceID = "trace_id"
	// MetaSpanID is a span id (transport).
	MetaSpanID = "span_id"
	// MetaRequestID is an HTTP request id (transport).
	MetaRequestID = "request_id"
	// MetaPrincipal names who appended the envelope (or the command it
	// stems from): set by the API from the request's credentials, never
	// taken from the client (docs/security.md, "Who did it").
	MetaPrincipal = "principal"
)

// IsTransportMetadataKey reports whether key is transport metadata, which the
// canonical form leaves out: kafka_topic, traceparent, tracestate, baggage,
// trace_id, span_id and request_id.
func IsTransportMetadataKey(key string) bool {
	switch key {
	case MetaKafkaTopic, MetaTraceparent, MetaTracestate, MetaBaggage,
		MetaTraceID, MetaSpanID, MetaRequestID:
		return true
	}
	return false
}

// stringMetadataKeys are the well-known keys whose values must be JSON
// strings.
var stringMetadataKeys = [...]string{
	MetaCommandID, MetaCorrelationID, MetaCausationID, MetaKafkaTopic,
	MetaOrderingKey, MetaTraceparent, MetaTracestate, MetaBaggage,
	MetaTraceID, MetaSpanID, MetaRequestID,
}

// Metadata is the envelope's metadata object. Values are kept as raw JSON so
// free keys of any type (including large numbers) round-trip exactly; the
// well-known keys hold strings and have typed accessors.
type Metadata map[string]json.RawMessage

// String returns the value of key if it is present and a JSON string.
func (m Metadata) String(key string) (string, bool) {
	raw, ok := m[key]
	if !ok {
		return "", false
	}
	if p, ok := plainString(raw); ok {
		// The ids and trace headers the pipeline reads on every append
		// and round.
		return p, true
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

// SetString sets key to the JSON string value, allocating the map if needed.
func (m *Metadata) SetString(key, value string) {
	if *m == nil {
		*m = Metadata{}
	}
	if plainASCII(value) {
		// Exactly json.Marshal's bytes for a string that needs no escape.
		b := make([]byte, len(value)+2)
		b[0], b[len(b)-1] = '"', '"'
		copy(b[1:], value)
		(*m)[key] = b
		return
	}
	b, _ := json.Marshal(value) // a Go string always encodes
	(*m)[key] = b
}

// plainASCII reports whether b is printable ASCII that json.Marshal
// writes as it is inside a string: no quote, backslash or control byte, and
// none of the bytes it escapes for HTML (<, >, &).
func plainASCII[T ~string | ~[]byte](b T) bool {
	for i := 0; i < len(b); i++ {
		if c := b[i]; c < ' ' || c > '~' || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// plainString returns the string the JSON text b holds when b is a
// quoted string of plainASCII text: no escape, so the text between the
// quotes is the value, as json.Unmarshal would decode it. ok is false for
// any other text (decode it with json.Unmarshal).
func plainString(b []byte) (s string, ok bool) {
	n := len(b)
	if n < 2 || b[0] != '"' || b[n-1] != '"' || !plainASCII(b[1:n-1]) {
		return "", false
	}
	return string(b[1 : n-1]), true
}

func (m Metadata) str(key string) string {
	s, _ := m.String(key)
	return s
}

// CommandID returns metadata.command_id, or "".
func (m Metadata) CommandID() string { return m.str(MetaCommandID) }

// CorrelationID returns metadata.correlation_id, or "".
func (m Metadata) CorrelationID() string { return m.str(MetaCorrelationID) }

// CausationID returns metadata.causation_id, or "".
func (m Metadata) CausationID() string { return m.str(MetaCausationID) }

// KafkaTopic returns metadata.kafka_topic, or "".
func (m Metadata) KafkaTopic() string { return m.str(MetaKafkaTopic) }

// OrderingKey returns metadata.ordering_key, or "".
func (m Metadata) OrderingKey() string { return m.str(MetaOrderingKey) }

// Traceparent returns metadata.traceparent, or "".
func (m Metadata) Traceparent() string { return m.str(MetaTraceparent) }

// Tracestate returns metadata.tracestate, or "".
func (m Metadata) Tracestate() string { return m.str(MetaTracestate) }
