package recordformat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"mime"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/shared/envelope"
)

// The CloudEvents headers (docs/kafka.md#the-cloudevents-format): "ce_" and
// the attribute's name, lower-case letters and digits, at most 20
// characters (CloudEvents 1.0, "Naming conventions").
const (
	cePrefix      = "ce_"
	ceSpecVersion = "ce_specversion"
	ceID          = "ce_id"
	ceSource      = "ce_source"
	ceType        = "ce_type"
	ceTime        = "ce_time"
	ceSubject     = "ce_subject"
	ceDataSchema  = "ce_dataschema"
	// sluice's extension attributes.
	ceKind           = "ce_kind"
	ceAggregateType  = "ce_aggregatetype"
	ceSequenceNumber = "ce_sequencenumber"
	cePosition       = "ce_position"
	ceExpectedSeq    = "ce_expectedseq"
	ceActor          = "ce_actor"
	ceActorJSON      = "ce_actorjson"
	ceSchemaVersion  = "ce_schemaversion"
	ceMetadata       = "ce_metadata"
)

// SpecVersion is the CloudEvents version of the records (ce_specversion).
const SpecVersion = "1.0"

// SourcePrefix starts the source of an event that did not come in as a
// CloudEvent: "urn:sluice:" + aggregate_type.
const SourcePrefix = "urn:sluice:"

// DataSchemaPrefix starts every dataschema: "urn:sluice:schema:" +
// event_type + ":" + schema_version (the registry's version,
// GET /admin/v1/schemas/{type}/versions/{n}; docs/schemas.md).
const DataSchemaPrefix = "urn:sluice:schema:"

// metaAttrs are the well-known metadata keys with an extension attribute of
// their own, in header order; every other key is in ce_metadata.
var metaAttrs = [...]struct{ key, header string }{
	{envelope.MetaCommandID, "ce_commandid"},
	{envelope.MetaCorrelationID, "ce_correlationid"},
	{envelope.MetaCausationID, "ce_causationid"},
	{envelope.MetaPrincipal, "ce_principal"},
	{envelope.MetaTraceparent, "ce_traceparent"},
	{envelope.MetaTracestate, "ce_tracestate"},
}

// metaKeyOf maps the header of a well-known metadata key to the key.
func metaKeyOf(header string) (string, bool) {
	for _, m := range metaAttrs {
		if m.header == header {
			return m.key, true
		}
	}
	return "", false
}

// DataSchema is the dataschema of an event of type eventType recorded
// with schema version version.
func DataSchema(eventType string, version int) string {
	return DataSchemaPrefix + eventType + ":" + strconv.Itoa(version)
}

// identity is the (source, id) of e's CloudEvent: the producer's, kept in
// metadata ce_source and ce_id by the API, when they are what e's event_id
// was derived from (docs/api.md#cloudevents-input); else sluice's
// (urn:sluice:<aggregate_type>, event_id). Either way
// envelope.CloudEventID(source, id) is e's event_id.
func identity(e envelope.Envelope) (source, id string) {
	src, okSrc := e.Metadata.String("ce_source")
	pid, okID := e.Metadata.String("ce_id")
	if okSrc && okID && src != "" && pid != "" && isCEString(src) && isCEString(pid) &&
		envelope.CloudEventID(src, pid) == e.EventID {
		return src, pid
	}
	return SourcePrefix + e.AggregateType, e.EventID
}

// cloudEventsHeaders are the headers of a CloudEvents record of e.
func cloudEventsHeaders(e envelope.Envelope) []kgo.RecordHeader {
	h := make([]kgo.RecordHeader, 0, 24)
	add := func(k, v string) { h = append(h, kgo.RecordHeader{Key: k, Value: []byte(v)}) }
	source, id := identity(e)
	add(ceSpecVersion, SpecVersion)
	add(ceID, id)
	add(ceSource, source)
	add(ceType, e.EventType)
	if !e.OccurredAt.IsZero() {
		add(ceTime, e.OccurredAt.String())
	}
	add(ceSubject, e.AggregateID)
	add(ceDataSchema, DataSchema(e.EventType, e.SchemaVersion))
	add(HeaderContentType, ContentType)
	add(ceKind, string(e.Kind))
	add(ceAggregateType, e.AggregateType)
	if e.SequenceNumber > 0 {
		add(ceSequenceNumber, strconv.FormatInt(e.SequenceNumber, 10))
	}
	if e.Position > 0 {
		add(cePosition, strconv.FormatInt(e.Position, 10))
	}
	if e.ExpectedSeq != nil {
		add(ceExpectedSeq, strconv.FormatInt(*e.ExpectedSeq, 10))
	}
	switch {
	case e.Actor == "":
	case isCEString(e.Actor):
		add(ceActor, e.Actor)
	default:
		// A control character or a noncharacter: not a CloudEvents
		// String, so the actor travels JSON-encoded (escaped).
		add(ceActorJSON, string(ceSafe(quote(e.Actor))))
	}
	add(ceSchemaVersion, strconv.Itoa(e.SchemaVersion))
	rest := maps.Clone(e.Metadata)
	for _, m := range metaAttrs {
		if s, ok := attrString(e.Metadata[m.key]); ok {
			add(m.header, s)
			delete(rest, m.key)
		}
	}
	// The producer's own extension attributes, kept by the API as
	// metadata ce_<name>, go out as the attributes they came in as.
	for _, k := range slices.Sorted(maps.Keys(rest)) {
		if !isExtensionHeader(k) {
			continue
		}
		if s, ok := attrString(rest[k]); ok {
			add(k, s)
			delete(rest, k)
		}
	}
	if len(rest) > 0 {
		add(ceMetadata, string(encodeMetadata(rest)))
	}
	// The W3C trace context for sluice's tracing, as in the envelope
	// format (the relay replaces it with its publish span).
	if tp := e.Metadata.Traceparent(); tp != "" {
		add(HeaderTraceparent, tp)
	}
	if ts := e.Metadata.Tracestate(); ts != "" {
		add(HeaderTracestate, ts)
	}
	return h
}

// attrString returns the string a metadata value stands for when it can
// be an attribute of its own and come back byte for byte: a JSON string,
// a CloudEvents String, whose encoding (quote) is raw. Any other value stays
// in ce_metadata.
func attrString(raw json.RawMessage) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil || s == "" || !isCEString(s) || !bytes.Equal(quote(s), raw) {
		return "", false
	}
	return s, true
}

// quote is the JSON string of s as the store writes it: no HTML escaping
// (envelope.EncodeJSON).
func quote(s string) []byte {
	b, _ := envelope.EncodeJSON(s) // a Go string always encodes
	return b
}

// encodeMetadata is the ce_metadata attribute: the JSON object of m,
// compact, keys sorted, values as stored, every character a CloudEvents
// String may not hold escaped (ceSafe).
func encodeMetadata(m envelope.Metadata) []byte {
	b := []byte{'{'}
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, quote(k)...)
		b = append(b, ':')
		b = append(b, m[k]...)
	}
	b = append(b, '}')
	var c bytes.Buffer
	if json.Compact(&c, b) == nil { // stored values are valid JSON
		b = c.Bytes()
	}
	return ceSafe(b)
}

// ceDisallowed reports whether a CloudEvents String may not hold r: a
// control character (U+0000–U+001F, U+007F–U+009F) or a Unicode
// noncharacter (CloudEvents 1.0, "Type System").
func ceDisallowed(r rune) bool {
	switch {
	case r <= 0x1f, r >= 0x7f && r <= 0x9f:
		return true
	case r >= 0xfdd0 && r <= 0xfdef:
		return true
	case r&0xfffe == 0xfffe:
		return true
	}
	return false
}

// isCEString reports whether s is a CloudEvents String: valid UTF-8
// without a disallowed character.
func isCEString(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if ceDisallowed(r) {
			return false
		}
	}
	return true
}

// ceSafe escapes, in compact JSON text b, every character a CloudEvents
// String may not hold as \uXXXX (a surrogate pair above U+FFFF). In compact
// JSON such characters stand only inside strings (encoding/json already
// escapes U+0000–U+001F there), so the result is the same JSON value.
func ceSafe(b []byte) []byte {
	if isCEString(string(b)) {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 || !ceDisallowed(r) {
			out = append(out, b[i:i+n]...)
			i += n
			continue
		}
		if r > 0xffff {
			r -= 0x10000
			out = fmt.Appendf(out, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
		} else {
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		i += n
	}
	return out
}

// isStructuredContentType reports whether ct is a CloudEvents media type
// (application/cloudevents, +json, -batch…): the structured content mode.
func isStructuredContentType(ct string) bool {
	return strings.HasPrefix(strings.ToLower(strings.TrimSpace(ct)), "application/cloudevents")
}

// isJSONMediaType reports whether ct is application/json or a +json type,
// parameters (charset) allowed.
func isJSONMediaType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == ContentType || strings.HasSuffix(mt, "+json"))
}

// AttributeError is a CloudEvents record Decode refuses: Attribute names
// the header at fault ("ce_type", "content-type"; "data" for the value),
// Reason says why; Err is the envelope's *envelope.ValidationError when its
// contract refused the value.
type AttributeError struct {
	Attribute string
	Reason    string
	Err       error
}

func (e *AttributeError) Error() string {
	return "cloudevents record: " + e.Attribute + ": " + e.Reason
}

func (e *AttributeError) Unwrap() error { return e.Err }

func attrErr(attr, format string, args ...any) *AttributeError {
	return &AttributeError{Attribute: attr, Reason: fmt.Sprintf(format, args...)}
}

// fieldHeaders maps an envelope field to the header it comes from, for
// the errors of the envelope's validation.
var fieldHeaders = map[string]string{
	"event_id": ceID, "event_type": ceType, "kind": ceKind, "aggregate_type": ceAggregateType,
	"aggregate_id": ceSubject, "sequence_number": ceSequenceNumber, "position": cePosition,
	"expected_seq": ceExpectedSeq, "occurred_at": ceTime, "actor": ceActor, "data": "data",
	"schema_version": ceSchemaVersion, "metadata": ceMetadata, "": "record",
}

// headerOfField returns the header of the envelope field f (a dotted path:
// "data.items[2]", "metadata.command_id").
func headerOfField(f string) string {
	top, rest, _ := strings.Cut(f, ".")
	if top == "metadata" && rest != "" {
		for _, m := range metaAttrs {
			if m.key == rest {
				return m.header + " (metadata." + rest + ")"
			}
		}
		return ceMetadata + " (metadata." + rest + ")"
	}
	if i := strings.IndexAny(top, "[."); i >= 0 {
		top = top[:i]
	}
	if h, ok := fieldHeaders[top]; ok {
		if h == "data" && f != "" && f != "data" {
			return "data (" + f + ")"
		}
		return h
	}
	return f
}

// decodeCloudEvents reads the envelope of a CloudEvents record.
func decodeCloudEvents(r *kgo.Record, limits envelope.Limits) (envelope.Envelope, error) {
	hs := map[string]string{}
	for _, h := range r.Headers {
		if h.Key != HeaderContentType && !strings.HasPrefix(h.Key, cePrefix) {
			continue // traceparent, tracestate, anything else: not attributes
		}
		if _, dup := hs[h.Key]; dup {
			return envelope.Envelope{}, attrErr(h.Key, "the header appears more than once")
		}
		if !utf8.Valid(h.Value) {
			return envelope.Envelope{}, attrErr(h.Key, "is not valid UTF-8 (a CloudEvents header value is a UTF-8 string)")
		}
		hs[h.Key] = string(h.Value)
	}
	if ct, ok := hs[HeaderContentType]; ok && isStructuredContentType(ct) {
		return envelope.Envelope{}, attrErr(HeaderContentType, "%q is the structured content mode; sluice reads the binary content mode only", ct)
	}
	if v, ok := hs[ceSpecVersion]; !ok || v != SpecVersion {
		return envelope.Envelope{}, attrErr(ceSpecVersion, "must be %q, got %q", SpecVersion, v)
	}
	for _, k := range []string{ceID, ceSource, ceType} {
		if hs[k] == "" {
			return envelope.Envelope{}, attrErr(k, "the required CloudEvents attribute %s is missing or empty", strings.TrimPrefix(k, cePrefix))
		}
	}
	ct, ok := hs[HeaderContentType]
	if !ok {
		return envelope.Envelope{}, attrErr(HeaderContentType, "missing: the datacontenttype of sluice's events is %s", ContentType)
	}
	if !isJSONMediaType(ct) {
		return envelope.Envelope{}, attrErr(HeaderContentType, "data must be JSON (%s or a +json type), got %q", ContentType, ct)
	}
	if len(r.Value) == 0 || r.Value[0] != '{' || !json.Valid(r.Value) {
		return envelope.Envelope{}, attrErr("data", "the record value (the event's data) must be a JSON object")
	}
	e := envelope.Envelope{
		EventID:       envelope.CloudEventID(hs[ceSource], hs[ceID]),
		EventType:     hs[ceType],
		Kind:          envelope.Kind(hs[ceKind]),
		AggregateType: hs[ceAggregateType],
		AggregateID:   hs[ceSubject],
		Data:          bytes.Clone(r.Value),
	}
	var err error
	integer := func(k string, lo, hi int64) (int64, bool) {
		v, ok := hs[k]
		if !ok || err != nil {
			return 0, false
		}
		n, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil || n < lo || n > hi {
			err = attrErr(k, "must be an integer in %d..%d, got %q", lo, hi, v)
			return 0, false
		}
		return n, true
	}
	e.SequenceNumber, _ = integer(ceSequenceNumber, 1, 1<<63-1)
	e.Position, _ = integer(cePosition, 1, 1<<63-1)
	if n, ok := integer(ceExpectedSeq, 0, 1<<63-1); ok {
		e.ExpectedSeq = &n
	}
	if n, ok := integer(ceSchemaVersion, 1, 1<<31-1); ok {
		e.SchemaVersion = int(n)
	}
	if err != nil {
		return envelope.Envelope{}, err
	}
	if v, ok := hs[ceTime]; ok {
		ts, terr := envelope.ParseTimestamp(v)
		if terr != nil {
			return envelope.Envelope{}, attrErr(ceTime, "must be an RFC 3339 time: %v", terr)
		}
		e.OccurredAt = ts
	}
	if e.Actor, err = actor(hs); err != nil {
		return envelope.Envelope{}, err
	}
	if e.Metadata, err = metadata(hs); err != nil {
		return envelope.Envelope{}, err
	}
	if e, err = envelope.Normalize(e); err == nil {
		err = envelope.Validate(e, limits)
	}
	if err != nil {
		attr, reason := "record", err.Error()
		var ve *envelope.ValidationError
		if errors.As(err, &ve) {
			attr, reason = headerOfField(ve.Field), ve.Reason
		}
		return envelope.Envelope{}, &AttributeError{Attribute: attr, Reason: reason, Err: err}
	}
	// dataschema follows from type and schema version; one that names
	// another version contradicts ce_schemaversion.
	if v, ok := hs[ceSchemaVersion]; ok && hs[ceDataSchema] != "" && hs[ceDataSchema] != DataSchema(e.EventType, e.SchemaVersion) {
		return envelope.Envelope{}, attrErr(ceDataSchema, "%q does not name version %s of %s (%s)", hs[ceDataSchema], v, e.EventType,
			DataSchema(e.EventType, e.SchemaVersion))
	}
	return e, nil
}

// actor reads ce_actor or ce_actorjson.
func actor(hs map[string]string) (string, error) {
	a, okA := hs[ceActor]
	j, okJ := hs[ceActorJSON]
	switch {
	case okA && okJ:
		return "", attrErr(ceActorJSON, "both %s and %s are present", ceActor, ceActorJSON)
	case okJ:
		var s string
		if err := json.Unmarshal([]byte(j), &s); err != nil {
			return "", attrErr(ceActorJSON, "must be a JSON string: %v", err)
		}
		return s, nil
	}
	return a, nil
}

// metadata reads ce_metadata, the well-known keys' attributes and any
// other extension attribute (as metadata "ce_<name>", like the API's
// CloudEvents input); a key given twice is refused.
func metadata(hs map[string]string) (envelope.Metadata, error) {
	m := envelope.Metadata{}
	if v, ok := hs[ceMetadata]; ok {
		if err := envelope.CheckJSONText([]byte(v), "metadata"); err != nil {
			return nil, &AttributeError{Attribute: ceMetadata, Reason: err.Error(), Err: err}
		}
		var raw map[string]jsontext.Value
		if err := jsonv2.Unmarshal([]byte(v), &raw); err != nil || raw == nil {
			return nil, attrErr(ceMetadata, "must be a JSON object without duplicate keys: %v", err)
		}
		for k, val := range raw {
			m[k] = json.RawMessage(val)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(hs)) {
		name, ok := strings.CutPrefix(k, cePrefix)
		if !ok {
			continue
		}
		key, ok := metaKeyOf(k)
		switch {
		case ok:
		case isCoreOrSluice(k):
			continue
		case !isAttrName(name):
			return nil, attrErr(k, "%q is not a CloudEvents attribute name (lower-case letters and digits)", name)
		default:
			key = "ce_" + name
		}
		if _, dup := m[key]; dup {
			return nil, attrErr(k, "metadata key %q is also in %s", key, ceMetadata)
		}
		m[key] = quote(hs[k])
	}
	if len(m) == 0 {
		return nil, nil
	}
	return m, nil
}

// isCoreOrSluice reports whether header k is a CloudEvents attribute or
// sluice extension that maps to a field of its own (not to metadata).
func isCoreOrSluice(k string) bool {
	switch k {
	case ceSpecVersion, ceID, ceSource, ceType, ceTime, ceSubject, ceDataSchema,
		ceKind, ceAggregateType, ceSequenceNumber, cePosition, ceExpectedSeq,
		ceActor, ceActorJSON, ceSchemaVersion, ceMetadata:
		return true
	}
	return false
}

// maxExtensionName is the longest extension attribute name sluice
// writes: CloudEvents 1.0 "SHOULD NOT exceed 20 characters".
const maxExtensionName = 20

// isExtensionHeader reports whether metadata key k, "ce_<name>", is an
// extension attribute of the producer that goes out as header k: name is
// a CloudEvents attribute name of at most 20 characters, and neither a
// context attribute of CloudEvents 1.0 (datacontenttype and data
// included) nor one sluice writes or reads as a field of its own. Such a
// key reads back from header k as itself (metadata).
func isExtensionHeader(k string) bool {
	name, ok := strings.CutPrefix(k, cePrefix)
	if !ok || len(name) > maxExtensionName || !isAttrName(name) {
		return false
	}
	if _, wellKnown := metaKeyOf(k); wellKnown || isCoreOrSluice(k) {
		return false
	}
	switch name {
	case "datacontenttype", "data":
		return false
	}
	return true
}

// isAttrName reports whether s is a CloudEvents attribute name: lower-case
// ASCII letters and digits, 1 to 64 characters (the API's rule for
// extension names).
func isAttrName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}
