package recordformat

import (
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/shared/envelope"
)

// Format is a Kafka record format: Envelope or CloudEvents
// (KAFKA_RECORD_FORMAT, kafka.Config).
type Format string

const (
	// Envelope: the value is the stored envelope line (docs/kafka.md).
	Envelope Format = "envelope"
	// CloudEvents: the binary content mode of the CloudEvents Kafka
	// protocol binding (docs/kafka.md).
	CloudEvents Format = "cloudevents"
)

// Formats are the formats, as KAFKA_RECORD_FORMAT names them.
var Formats = []string{string(Envelope), string(CloudEvents)}

// Parse returns the format s names; "" is Envelope (a configuration built
// in Go without the setting).
func Parse(s string) (Format, error) {
	switch Format(s) {
	case "", Envelope:
		return Envelope, nil
	case CloudEvents:
		return CloudEvents, nil
	}
	return "", fmt.Errorf("record format %q: want %s or %s", s, Envelope, CloudEvents)
}

// Header keys of the envelope format (docs/kafka.md#the-envelope-format).
const (
	HeaderEventID        = "event_id"
	HeaderEventType      = "event_type"
	HeaderKind           = "kind"
	HeaderAggregateType  = "aggregate_type"
	HeaderAggregateID    = "aggregate_id"
	HeaderSequenceNumber = "sequence_number"
	HeaderPosition       = "position"
	HeaderPrincipal      = "principal"
	// HeaderContentType is the content-type of both formats: the
	// envelope's, or the CloudEvents datacontenttype.
	HeaderContentType = "content-type"
	// HeaderTraceparent and HeaderTracestate are the W3C trace context
	// of both formats: the event's own (metadata) as the relay hands the
	// record over, the publish span's once the relay traced it
	// (docs/tracing.md).
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"
)

// ContentType is the content-type of both formats: the envelope is JSON,
// and so is the data of a CloudEvent (its datacontenttype).
const ContentType = "application/json"

// Encode returns the Kafka record of the stored event e in format f, its
// topic left for the caller to set: the key of
// docs/architecture.md#aggregate-identity (envelope.KafkaKey, the same in
// both formats), and the value and headers of the format. line is the
// stored line of e, byte for byte the value of an envelope record. Encode
// expects a stored, valid envelope (as the event store reads it back); it
// cannot fail.
func Encode(f Format, e envelope.Envelope, line []byte) *kgo.Record {
	if f == CloudEvents {
		r := &kgo.Record{Key: envelope.KafkaKey(e)}
		// What envelope.Normalize gives a field left unset: data {},
		// schema_version 1.
		if len(e.Data) == 0 {
			e.Data = []byte("{}")
		}
		if e.SchemaVersion == 0 {
			e.SchemaVersion = envelope.DefaultSchemaVersion
		}
		r.Value, r.Headers = []byte(e.Data), cloudEventsHeaders(e)
		return r
	}
	return encodeEnvelope(e, line)
}

// maxEnvelopeHeaders is the most headers an envelope record has.
const maxEnvelopeHeaders = 11

// envelopeRecord is a record of the envelope format with room for its
// headers: the relay builds one per event, and one allocation for both
// (and one for every header value and the key, encodeEnvelope) instead of
// one per header value cut its allocations per event by a third
// (BenchmarkRelayEvent, docs/benchmarks.md).
type envelopeRecord struct {
	rec kgo.Record
	hdr [maxEnvelopeHeaders]kgo.RecordHeader
}

// encodeEnvelope is Encode's envelope record: line as value, the key and
// the headers of docs/kafka.md#the-envelope-format, whose values (and the
// key) share one byte array, each its own capacity-limited slice of it (an
// append to one reallocates rather than write over the next).
func encodeEnvelope(e envelope.Envelope, line []byte) *kgo.Record {
	key, ordered := e.Metadata.String(envelope.MetaOrderingKey)
	ordered = ordered && key != ""
	tp, ts := e.Metadata.Traceparent(), e.Metadata.Tracestate()
	principal, _ := e.Metadata.String(envelope.MetaPrincipal)
	size := len(e.EventID) + len(e.EventType) + len(e.Kind) + len(e.AggregateType) + len(e.AggregateID) +
		2*20 + len(ContentType) + len(tp) + len(ts) + len(principal)
	if ordered {
		size += len(key)
	} else {
		size += len(e.AggregateType) + 1 + len(e.AggregateID)
	}
	buf := make([]byte, 0, size)
	cut := func(from int) []byte { return buf[from:len(buf):len(buf)] }
	er := &envelopeRecord{}
	r := &er.rec
	h := er.hdr[:0]
	add := func(k, v string) {
		from := len(buf)
		buf = append(buf, v...)
		h = append(h, kgo.RecordHeader{Key: k, Value: cut(from)})
	}
	addInt := func(k string, v int64) {
		from := len(buf)
		buf = strconv.AppendInt(buf, v, 10)
		h = append(h, kgo.RecordHeader{Key: k, Value: cut(from)})
	}
	if ordered {
		buf = append(buf, key...)
	} else {
		// envelope.KafkaKey without an ordering key.
		buf = append(append(append(buf, e.AggregateType...), ':'), e.AggregateID...)
	}
	r.Key = cut(0)
	add(HeaderEventID, e.EventID)
	add(HeaderEventType, e.EventType)
	add(HeaderKind, string(e.Kind))
	add(HeaderAggregateType, e.AggregateType)
	add(HeaderAggregateID, e.AggregateID)
	addInt(HeaderSequenceNumber, e.SequenceNumber)
	addInt(HeaderPosition, e.Position)
	add(HeaderContentType, ContentType)
	if tp != "" {
		add(HeaderTraceparent, tp)
	}
	if ts != "" {
		add(HeaderTracestate, ts)
	}
	if principal != "" {
		add(HeaderPrincipal, principal)
	}
	r.Value, r.Headers = line, h
	return r
}

// Detect returns the format of a record from its headers: CloudEvents when
// it has a ce_specversion header or a CloudEvents content-type
// (application/cloudevents…, the structured content mode, which Decode
// refuses by name), else Envelope.
func Detect(hs []kgo.RecordHeader) Format {
	for _, h := range hs {
		switch h.Key {
		case ceSpecVersion:
			return CloudEvents
		case HeaderContentType:
			if isStructuredContentType(string(h.Value)) {
				return CloudEvents
			}
		}
	}
	return Envelope
}

// Decode returns the envelope a record carries, in the format Detect finds
// (whatever the deployment's KAFKA_RECORD_FORMAT), normalised and
// validated under limits like envelope.Parse. A record it refuses is a
// *AttributeError naming the header at fault (CloudEvents) or an
// *envelope.ValidationError (both formats).
func Decode(r *kgo.Record, limits envelope.Limits) (envelope.Envelope, error) {
	if Detect(r.Headers) == CloudEvents {
		return decodeCloudEvents(r, limits)
	}
	return envelope.Parse(r.Value, limits)
}

// header returns the value of the first header key of hs.
func header(hs []kgo.RecordHeader, key string) (string, bool) {
	for _, h := range hs {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// EventID returns the event_id a record's headers name, in either
// format ("" when they name none): the event_id header, or for a
// CloudEvents record envelope.CloudEventID(ce_source, ce_id).
func EventID(hs []kgo.RecordHeader) string {
	if Detect(hs) == CloudEvents {
		id, okID := header(hs, ceID)
		src, okSrc := header(hs, ceSource)
		if !okID || !okSrc || id == "" {
			return ""
		}
		return envelope.CloudEventID(src, id)
	}
	v, _ := header(hs, HeaderEventID)
	return v
}

// EventType returns the event type a record's headers name, in
// either format (event_type or ce_type; "" when none).
func EventType(hs []kgo.RecordHeader) string {
	key := HeaderEventType
	if Detect(hs) == CloudEvents {
		key = ceType
	}
	v, _ := header(hs, key)
	return v
}

// Position returns the store position a record's headers name, in
// either format (position or ce_position); ok is false when they name none.
func Position(hs []kgo.RecordHeader) (int64, bool) {
	key := HeaderPosition
	if Detect(hs) == CloudEvents {
		key = cePosition
	}
	v, ok := header(hs, key)
	if !ok {
		return 0, false
	}
	p, err := strconv.ParseInt(v, 10, 64)
	return p, err == nil && p > 0
}
