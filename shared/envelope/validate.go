package envelope

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/sluicehq/sluice/shared/config"
)

// Limits bounds envelope sizes (docs/architecture.md#the-envelope). A zero
// or negative field means the default. They are the EVENT_STORE_MAX_*
// settings: eventstore.Config embeds Limits, whose tags declare the
// variables and their defaults.
type Limits struct {
	// MaxEnvelopeBytes bounds the encoded envelope (the input of Parse and
	// the output of Marshal).
	MaxEnvelopeBytes int `env:"EVENT_STORE_MAX_ENVELOPE_BYTES" envDefault:"1048576" doc:"Largest accepted envelope, encoded."`
	// MaxDataDepth bounds JSON nesting depth inside data and inside metadata;
	// the object itself is depth 1, so {"a":{}} has depth 2.
	MaxDataDepth int `env:"EVENT_STORE_MAX_DATA_DEPTH" envDefault:"64" doc:"Deepest accepted nesting of the data object."`
	// MaxMetadataBytes bounds the encoded (compact) metadata object.
	MaxMetadataBytes int `env:"EVENT_STORE_MAX_METADATA_BYTES" envDefault:"16384" doc:"Largest accepted metadata object, encoded."`
}

// defaultLimits are the defaults of Limits' tags (1 MiB envelope, depth 64,
// 16 KiB metadata), read once: Parse applies them to every envelope.
var defaultLimits = func() Limits {
	var l Limits
	config.Defaults(&l)
	return l
}()

// DefaultLimits returns the default limits, those of Limits' tags.
func DefaultLimits() Limits { return defaultLimits }

// WithDefaults returns l with each zero or negative field set to its
// default (DefaultLimits), as Parse and Validate apply them.
func (l Limits) WithDefaults() Limits {
	if l.MaxEnvelopeBytes <= 0 {
		l.MaxEnvelopeBytes = defaultLimits.MaxEnvelopeBytes
	}
	if l.MaxDataDepth <= 0 {
		l.MaxDataDepth = defaultLimits.MaxDataDepth
	}
	if l.MaxMetadataBytes <= 0 {
		l.MaxMetadataBytes = defaultLimits.MaxMetadataBytes
	}
	return l
}

// Patterns of the contract, as reported in errors.
const (
	// EventTypePattern is the rule for event_type: the names producers
	// use (OrderPlaced, ORDER_PLACED, order.placed.v1, a CloudEvents type
	// such as com.example.order-placed) within a character set that needs
	// no escaping in a Kafka header, an Elasticsearch keyword, a URL path
	// segment, a log line or a YAML list (docs/architecture.md#event-types).
	EventTypePattern = "[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
	// MaxEventTypeBytes is the longest event_type.
	MaxEventTypeBytes = 128
	// AggregateTypePattern is the rule for aggregate_type.
	AggregateTypePattern = "[A-Za-z][A-Za-z0-9_]{0,63}"
	// UUIDPattern is the rule for event_id (canonical, lower case, not nil).
	UUIDPattern = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
	// CommandIDPattern is the rule for command ids: printable ASCII without
	// ':' or space, 1..255 bytes.
	CommandIDPattern = "[!-9;-~]{1,255}"
	// KafkaTopicPattern is the rule for metadata.kafka_topic.
	KafkaTopicPattern = "[A-Za-z0-9._-]{1,249}, not \".\" or \"..\""
)

// envelopeFields lists the top-level fields in the order they are checked;
// the constants below index it.
var envelopeFields = [...]string{
	"event_id", "event_type", "kind", "aggregate_type", "aggregate_id",
	"sequence_number", "position", "expected_seq", "occurred_at", "actor",
	"data", "metadata", "schema_version",
}

// Indexes of envelopeFields (wireFields).
const (
	fEventID = iota
	fEventType
	fKind
	fAggregateType
	fAggregateID
	fSequenceNumber
	fPosition
	fExpectedSeq
	fOccurredAt
	fActor
	fData
	fMetadata
	fSchemaVersion
)

// fieldIndex returns the index in envelopeFields of the unquoted name, -1
// for an unknown name. It does not allocate.
func fieldIndex(name []byte) int {
	for i, f := range envelopeFields {
		if f == string(name) {
			return i
		}
	}
	return -1
}

// wireFields holds each top-level field's bytes as json.Unmarshal into a
// map[string]json.RawMessage would, by envelopeFields index; nil: absent
// (a JSON value is never empty).
type wireFields [len(envelopeFields)][]byte

// Parse decodes one envelope from the wire, normalises it (Normalize) and
// validates it (Validate). It is strict: the input must be valid UTF-8, one
// JSON object with no duplicate keys at any level and no unknown top-level
// fields; explicit 0 for sequence_number, position or schema_version is
// rejected. An absent occurred_at stays unset (see FillDefaults). Errors are
// *ValidationError; the first fault in the input's order is reported, and
// among the metadata rules Validate applies after the scan, the rule of
// Validate (the first key at fault in byte order), so the same bytes always
// get the same error.
//
// After the text check (CheckJSONText, a byte scan), the envelope is
// tokenized once, data and metadata with it (depth, duplicate keys), by a
// pooled decoder; of the fields, only metadata is read a second time, to
// split its members. Data is a copy: the envelope never aliases b.
func Parse(b []byte, limits Limits) (Envelope, error) {
	l := limits.WithDefaults()
	if len(b) > l.MaxEnvelopeBytes {
		return Envelope{}, limitExceeded("", fmt.Sprintf("%d bytes", l.MaxEnvelopeBytes),
			"envelope of %d bytes exceeds the limit of %d bytes", len(b), l.MaxEnvelopeBytes)
	}
	if err := CheckJSONText(b, ""); err != nil {
		return Envelope{}, err
	}
	var raw wireFields
	cur := 0
	s := getScanner()
	err := s.scan(b, 1, l.MaxDataDepth, func(name []byte) (string, error) {
		if cur = fieldIndex(name); cur < 0 {
			return string(name), invalid(string(name), "known fields", "unknown field; the envelope admits only %s",
				strings.Join(envelopeFields[:], ", "))
		}
		return envelopeFields[cur], nil
	}, func(_ string, v []byte) { raw[cur] = v })
	if err != nil {
		s.release()
		return Envelope{}, envelopeError(err, l.MaxDataDepth)
	}
	e, err := decodeFields(s, &raw)
	s.release()
	if err != nil {
		return Envelope{}, err
	}
	if e, err = Normalize(e); err != nil {
		return Envelope{}, err
	}
	// data and metadata were scanned above (depth, duplicate keys).
	if err := validate(e, l, len(b), false); err != nil {
		return Envelope{}, err
	}
	return e, nil
}

func isNull(v []byte) bool { return string(v) == "null" }

// unquote returns the string a JSON string value (already validated by
// the scan) stands for; ok is false when v is not a string.
func unquote(v []byte) (string, bool) {
	u, ok := unquoteBytes(v)
	return string(u), ok
}

// unquoteBytes is unquote as bytes: those between the quotes when v has no
// escape (no copy).
func unquoteBytes(v []byte) ([]byte, bool) {
	if len(v) < 2 || v[0] != '"' {
		return nil, false
	}
	if bytes.IndexByte(v, '\\') < 0 {
		return v[1 : len(v)-1], true
	}
	// With escapes: the tokenizer's unquoting, as the scan read it (the
	// text was checked by CheckJSONText: no lone surrogate escape is left
	// to replace).
	u, err := jsontext.AppendUnquote(nil, v)
	if err != nil {
		return nil, false
	}
	return u, true
}

// SetTextFields sets e's string fields (event_id, event_type,
// aggregate_type, aggregate_id, actor) to the given bytes as substrings of
// one string: one allocation for all of them, not one per field. Parse and
// the event store's line decoder set a decoded envelope's fields with it.
func SetTextFields(e *Envelope, eventID, eventType, aggregateType, aggregateID, actor []byte) {
	parts := [...][]byte{eventID, eventType, aggregateType, aggregateID, actor}
	n := 0
	for _, b := range parts {
		n += len(b)
	}
	var sb strings.Builder
	sb.Grow(n)
	for _, b := range parts {
		sb.Write(b)
	}
	all, at := sb.String(), 0
	for i, dst := range [...]*string{&e.EventID, &e.EventType, &e.AggregateType, &e.AggregateID, &e.Actor} {
		*dst = all[at : at+len(parts[i])]
		at += len(parts[i])
	}
}

// decodeKind decodes kind's value v (nil: absent); the two valid kinds
// without a copy.
func decodeKind(v []byte) (Kind, error) {
	switch string(v) {
	case `"` + string(KindDomain) + `"`:
		return KindDomain, nil
	case `"` + string(KindCommand) + `"`:
		return KindCommand, nil
	}
	if v == nil || isNull(v) {
		return "", nil
	}
	kind, ok := unquote(v)
	if !ok {
		return "", invalid("kind", "string", "must be a JSON string")
	}
	return Kind(kind), nil
}

// decodeFields decodes the fields the scan found (raw), with s to split
// metadata's members.
func decodeFields(s *objectScanner, raw *wireFields) (Envelope, error) {
	var e Envelope
	var texts wireFields // the string fields' unquoted bytes, set once every field is checked
	str := func(f int) error {
		v := raw[f]
		if v == nil || isNull(v) {
			return nil
		}
		u, ok := unquoteBytes(v)
		if !ok {
			return invalid(envelopeFields[f], "string", "must be a JSON string")
		}
		texts[f] = u
		return nil
	}
	integer := func(f int) (int64, bool, error) {
		v := raw[f]
		if v == nil || isNull(v) {
			return 0, false, nil
		}
		field := envelopeFields[f]
		if v[0] != '-' && (v[0] < '0' || v[0] > '9') {
			return 0, false, invalid(field, "integer", "must be a JSON integer")
		}
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			if errors.Is(err, strconv.ErrRange) {
				return 0, false, invalid(field, "int64", "integer %s is out of the int64 range", v)
			}
			return 0, false, invalid(field, "integer", "must be a JSON integer without fraction or exponent, got %s", v)
		}
		return n, true, nil
	}
	for _, f := range [...]int{fEventID, fEventType, fKind, fAggregateType, fAggregateID} {
		var err error
		if f == fKind {
			e.Kind, err = decodeKind(raw[fKind])
		} else {
			err = str(f)
		}
		if err != nil {
			return Envelope{}, err
		}
	}
	for _, f := range [...]struct {
		f   int
		dst *int64
	}{{fSequenceNumber, &e.SequenceNumber}, {fPosition, &e.Position}} {
		n, ok, err := integer(f.f)
		if err != nil {
			return Envelope{}, err
		}
		if ok && n < 1 {
			return Envelope{}, invalid(envelopeFields[f.f], ">= 1", "must be >= 1 when present, got %d", n)
		}
		*f.dst = n
	}
	if n, ok, err := integer(fExpectedSeq); err != nil {
		return Envelope{}, err
	} else if ok {
		e.ExpectedSeq = &n
	}
	if v := raw[fOccurredAt]; v != nil && !isNull(v) {
		occurred, ok := unquoteBytes(v)
		if !ok {
			return Envelope{}, invalid("occurred_at", "RFC 3339", "must be a JSON string in RFC 3339 form")
		}
		ts, ok := ParseStoredTimestamp(occurred) // the common form, no copy
		if !ok {
			var err error
			if ts, err = ParseTimestamp(string(occurred)); err != nil {
				return Envelope{}, invalid("occurred_at", "RFC 3339", "must be an RFC 3339 time such as 2026-11-21T10:00:00.123Z: %v", err)
			}
		}
		e.OccurredAt = ts
	}
	if err := str(fActor); err != nil {
		return Envelope{}, err
	}
	if v := raw[fData]; v != nil && !isNull(v) {
		if v[0] != '{' {
			return Envelope{}, invalid("data", "object", "must be a JSON object")
		}
		e.Data = bytes.Clone(v) // v aliases the caller's buffer
	}
	if v := raw[fMetadata]; v != nil && !isNull(v) {
		if v[0] != '{' {
			return Envelope{}, invalid("metadata", "object", "must be a JSON object")
		}
		m, err := s.members(v)
		if err != nil {
			return Envelope{}, malformed("metadata", "object", "must be a JSON object: %v", err)
		}
		e.Metadata = m
	}
	if n, ok, err := integer(fSchemaVersion); err != nil {
		return Envelope{}, err
	} else if ok {
		if n < 1 || n > 1<<31-1 {
			return Envelope{}, invalid("schema_version", ">= 1", "must be an integer in 1..2147483647 when present, got %d", n)
		}
		e.SchemaVersion = int(n)
	}
	SetTextFields(&e, texts[fEventID], texts[fEventType], texts[fAggregateType], texts[fAggregateID], texts[fActor])
	return e, nil
}

// Normalize applies the deterministic normalisations of the contract and
// returns the result; it does not validate the other rules. It lower-cases
// event_id, normalises aggregate_id (NormalizeAggregateID), sets an absent
// data to {} and an absent schema_version to 1, and drops empty metadata.
// The input is not modified.
func Normalize(e Envelope) (Envelope, error) {
	e.EventID = asciiLower(e.EventID)
	if e.AggregateID != "" {
		id, err := NormalizeAggregateID(e.AggregateID)
		if err != nil {
			return Envelope{}, err
		}
		e.AggregateID = id
	}
	if len(e.Data) == 0 {
		e.Data = json.RawMessage("{}")
	}
	if e.SchemaVersion == 0 {
		e.SchemaVersion = DefaultSchemaVersion
	}
	if len(e.Metadata) == 0 {
		e.Metadata = nil
	}
	return e, nil
}

// FillDefaults returns e with the defaults the store sets at append: an
// unset occurred_at becomes now() (UTC, milliseconds; time.Now if now is
// nil), an absent data {} and an absent schema_version 1.
func FillDefaults(e Envelope, now func() time.Time) Envelope {
	if e.OccurredAt.IsZero() {
		if now == nil {
			now = time.Now
		}
		e.OccurredAt = NewTimestamp(now())
	}
	if len(e.Data) == 0 {
		e.Data = json.RawMessage("{}")
	}
	if e.SchemaVersion == 0 {
		e.SchemaVersion = DefaultSchemaVersion
	}
	return e
}

// Prepare is what the store does to an incoming envelope before appending
// it (docs/eventstore.md#append-protocol-group-commit step 1): Normalize, FillDefaults, Validate.
func Prepare(e Envelope, limits Limits, now func() time.Time) (Envelope, error) {
	e, err := Normalize(e)
	if err != nil {
		return Envelope{}, err
	}
	e = FillDefaults(e, now)
	if err := Validate(e, limits); err != nil {
		return Envelope{}, err
	}
	return e, nil
}

// Validate checks e against the contract of docs/architecture.md#the-envelope, docs/architecture.md#aggregate-identity and the limits,
// and returns the first violation as a *ValidationError. It expects a
// normalised envelope (see Normalize): an aggregate_id that is not in
// normal form, an upper-case event_id, nil data or schema_version 0 are
// reported, not repaired. Store-assigned fields may be unset:
// sequence_number and position 0, occurred_at zero. When several metadata
// members are at fault, the error is that of the first in the byte order
// of their keys (the order Marshal writes them in), never one chosen by Go's
// map iteration order; the well-known keys (command_id, kafka_topic, …)
// are checked after every member, in a fixed order.
func Validate(e Envelope, limits Limits) error {
	return validate(e, limits.WithDefaults(), 0, false)
}

// ValidateBuiltData is Validate for an envelope whose data its caller
// built from JSON it checked as Validate checks data — one object of
// valid text, no duplicate key at any level, nesting within
// limits.MaxDataDepth (as the API does, with envelope.ScanObject, around a
// request's data) — so data is not walked a second time. Every other rule
// is checked as Validate does.
func ValidateBuiltData(e Envelope, limits Limits) error {
	return validate(e, limits.WithDefaults(), 0, true)
}

// validate implements Validate; scanned says data and metadata were already
// walked by Parse and need no second token scan.
// validate checks e against the rules and limits. wire is the length of the
// bytes e was parsed from (then data and metadata were already scanned for
// depth and duplicate keys), 0 when e did not come from the wire.
func validate(e Envelope, l Limits, wire int, dataChecked bool) error {
	scanned := wire > 0
	if e.EventID == "" {
		return invalid("event_id", "required", "is required")
	}
	if !IsCanonicalUUID(e.EventID) {
		return invalid("event_id", UUIDPattern, "must be a UUID in canonical lower-case form %s, got %q", UUIDPattern, e.EventID)
	}
	if e.EventID == "00000000-0000-0000-0000-000000000000" {
		return invalid("event_id", "not nil UUID", "must not be the nil UUID")
	}
	if e.EventType == "" {
		return invalid("event_type", "required", "is required")
	}
	if err := ValidateEventType(e.EventType); err != nil {
		return err
	}
	if e.Kind == "" {
		return invalid("kind", "required", "is required")
	}
	if !e.Kind.Valid() {
		return invalid("kind", "command|domain", "must be %q or %q", KindCommand, KindDomain)
	}
	if e.AggregateType == "" {
		return invalid("aggregate_type", "required", "is required")
	}
	if !isAggregateType(e.AggregateType) {
		return invalid("aggregate_type", AggregateTypePattern, "must match %s", AggregateTypePattern)
	}
	if e.AggregateID == "" {
		return invalid("aggregate_id", "required", "is required")
	}
	norm, err := NormalizeAggregateID(e.AggregateID)
	if err != nil {
		return err
	}
	if norm != e.AggregateID {
		return invalid("aggregate_id", "normalised", "is not normalised (Unicode NFC, surrounding white space trimmed)")
	}
	if e.AggregateType == AggregateTypeInstance {
		if _, _, _, err := ParseInstanceAggregateID(e.AggregateID); err != nil {
			return err
		}
	}
	if e.SequenceNumber < 0 {
		return invalid("sequence_number", ">= 1", "must be >= 1 (0 means not assigned), got %d", e.SequenceNumber)
	}
	if e.Position < 0 {
		return invalid("position", ">= 1", "must be >= 1 (0 means not assigned), got %d", e.Position)
	}
	if e.ExpectedSeq != nil {
		if e.Kind != KindCommand {
			return invalid("expected_seq", "commands only", "is allowed only on commands (kind %q)", KindCommand)
		}
		if *e.ExpectedSeq < 0 {
			return invalid("expected_seq", ">= 0", "must be >= 0, got %d", *e.ExpectedSeq)
		}
	}
	if !e.OccurredAt.IsZero() {
		if y := e.OccurredAt.Time().Year(); y < 1 || y > 9999 {
			return invalid("occurred_at", "RFC 3339", "year %d is out of the range 0001..9999", y)
		}
	}
	if err := CheckText(e.Actor, "actor"); err != nil {
		return err
	}
	if len(e.Data) == 0 {
		return invalid("data", "object", "is required (a JSON object; Normalize sets {})")
	}
	if !scanned && !dataChecked {
		if err := checkObject("data", e.Data, l.MaxDataDepth); err != nil {
			return err
		}
	}
	if e.SchemaVersion < 1 {
		return invalid("schema_version", ">= 1", "must be >= 1, got %d", e.SchemaVersion)
	}
	if err := validateMetadata(e.Metadata, l, scanned); err != nil {
		return err
	}
	if wire > 0 && maxEncodedLen(wire) <= l.MaxEnvelopeBytes {
		// Parsed from at most wire bytes, its encoding cannot exceed the
		// limit: skip the encoding (a fifth of Parse's time).
		return nil
	}
	if wire == 0 && EncodedBound(e) <= l.MaxEnvelopeBytes {
		// Built in Go, far enough under the limit that its encoding
		// cannot exceed it: skip the encoding as well. Data and metadata
		// were checked above to be valid JSON, the one way Marshal fails.
		return nil
	}
	enc, err := Marshal(e)
	if err != nil {
		return malformed("", "JSON", "envelope cannot be encoded: %v", err)
	}
	if len(enc) > l.MaxEnvelopeBytes {
		return limitExceeded("", fmt.Sprintf("%d bytes", l.MaxEnvelopeBytes),
			"encoded envelope of %d bytes exceeds the limit of %d bytes", len(enc), l.MaxEnvelopeBytes)
	}
	return nil
}

// maxEncodedLen bounds the length of Marshal's encoding of an envelope
// parsed from n bytes. Normalisation never lengthens a field by more than
// its escaping does: Marshal escapes a byte as at most 6 (\u003c for '<',
// HTML-safe), timestamps take a fixed 27 bytes whatever their input form,
// and fields absent from the input add at most their names and empty
// values (a constant, with a wide margin here).
func maxEncodedLen(n int) int { return 6*n + 4096 }

// EncodedBound bounds len(Marshal(e)) without encoding e, whatever its
// sequence_number and position: every byte of its strings, of data and of
// metadata's keys and values encodes as at most 6 (an escape such as
// \u0000; raw JSON is only compacted), and what the encoding adds — field
// names, punctuation, the numbers at their widest, occurred_at — is less
// than maxEncodedLen's margin plus a few bytes per metadata member. It lets
// a caller skip encoding an envelope that is far under a size limit.
func EncodedBound(e Envelope) int {
	n := len(e.EventID) + len(e.EventType) + len(e.Kind) + len(e.AggregateType) + len(e.AggregateID) + len(e.Actor) + len(e.Data)
	for k, v := range e.Metadata {
		n += len(k) + len(v) + 1
	}
	return maxEncodedLen(n)
}

func checkObject(field string, b []byte, maxDepth int) error {
	return walkObject(b, field, maxDepth)
}

// validateMetadata checks m's members, its well-known string keys
// (checkStringMetadata) and its encoded size and depth. When several
// members are at fault (a key that is not valid text, a value that is not
// valid text or not one valid JSON value), the error is the one of the
// first of them in the order of their keys' bytes, the order Marshal
// writes them in, whatever Go's map iteration order: the same envelope
// always gets the same error. checkStringMetadata goes through its keys in
// a fixed order as well.
func validateMetadata(m Metadata, l Limits, scanned bool) error {
	if len(m) == 0 {
		return nil
	}
	// scalars: every value is a string, number, boolean or null (as the
	// ids and trace headers are), so the object nests one level and has
	// no keys but m's; bound bounds its encoding as EncodedBound does.
	scalars, bound := true, 2
	var bad string // the least key at fault so far, badErr its fault
	var badErr error
	for k, v := range m {
		if badErr != nil && k > bad {
			continue // a later key's fault would not be reported
		}
		if err := checkMetadataMember(k, v, scanned); err != nil {
			bad, badErr = k, err
			continue
		}
		if c := bytes.TrimLeft(v, " \t\r\n")[0]; c == '{' || c == '[' {
			scalars = false
		}
		bound += 6 * (len(k) + len(v) + 1)
	}
	if badErr != nil {
		return badErr
	}
	if err := checkStringMetadata(m); err != nil {
		return err
	}
	if scalars && bound <= l.MaxMetadataBytes {
		// Under the limit whatever the encoding, and nothing in it a walk
		// could find: distinct valid keys stay distinct encoded, and
		// scalar values add no depth.
		return nil
	}
	b, err := EncodeJSON(m)
	if err != nil {
		return malformed("metadata", "JSON", "cannot be encoded: %v", err)
	}
	if len(b) > l.MaxMetadataBytes {
		return limitExceeded("metadata", fmt.Sprintf("%d bytes", l.MaxMetadataBytes),
			"encoded metadata of %d bytes exceeds the limit of %d bytes", len(b), l.MaxMetadataBytes)
	}
	if scanned {
		return nil
	}
	return walkObject(b, "metadata", l.MaxDataDepth)
}

// checkMetadataMember checks one member of metadata: its key is valid
// text and, unless Parse scanned the envelope (scanned), its value is
// valid text and one valid JSON value. A nil error means v is not empty.
func checkMetadataMember(k string, v []byte, scanned bool) error {
	if err := CheckText(k, "metadata"); err != nil {
		return err
	}
	if !scanned {
		// Parse checked the whole envelope's text already. The
		// field's name is built only for the error.
		if _, _, ok := ScanJSONText(v); !ok {
			return CheckJSONText(v, "metadata."+k)
		}
	}
	if len(v) == 0 || !scanned && !json.Valid(v) {
		// Parse split the values out of the envelope it scanned:
		// each is one valid JSON value.
		return malformed("metadata."+k, "JSON", "is not a valid JSON value")
	}
	return nil
}

// checkStringMetadata checks the well-known keys of m that hold strings
// (stringMetadataKeys): each a JSON string as m.String reads it, and
// command_id and kafka_topic well-formed. m's values are valid JSON.
func checkStringMetadata(m Metadata) error {
	for _, k := range stringMetadataKeys {
		v, ok := m[k]
		if !ok {
			continue
		}
		if k != MetaCommandID && k != MetaKafkaTopic {
			// Valid JSON (validateMetadata checked it) that m.String
			// reads: a string, or null. Nothing else is checked of these
			// keys.
			if c := bytes.TrimLeft(v, " \t\r\n")[0]; c != '"' && c != 'n' {
				return invalid("metadata."+k, "string", "must be a JSON string")
			}
			continue
		}
		if k == MetaCommandID && len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' && plainASCII(v[1:len(v)-1]) {
			// m.String's value, checked without a copy
			if err := checkCommandID(v[1 : len(v)-1]); err != nil {
				return err
			}
			continue
		}
		s, ok := m.String(k)
		if !ok {
			return invalid("metadata."+k, "string", "must be a JSON string")
		}
		switch k {
		case MetaCommandID:
			if err := ValidateCommandID(s); err != nil {
				return err
			}
		case MetaKafkaTopic:
			if err := ValidateKafkaTopic(s); err != nil {
				return err
			}
		}
	}
	return nil
}

// ValidateCommandID checks a command id (metadata.command_id, the API's
// Idempotency-Key): 1..255 bytes of printable ASCII without space and
// without ':'. Excluding ':' keeps the name of DomainEventID uniquely
// decodable, so distinct commands never share derived ids.
func ValidateCommandID(id string) error { return checkCommandID(id) }

// checkCommandID is ValidateCommandID of a string or of its bytes.
func checkCommandID[T ~string | ~[]byte](id T) error {
	const field = "metadata.command_id"
	if len(id) == 0 {
		return invalid(field, CommandIDPattern, "must not be empty")
	}
	if len(id) > 255 {
		return invalid(field, CommandIDPattern, "must be at most 255 bytes, got %d", len(id))
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if c < '!' || c > '~' || c == ':' {
			return invalid(field, CommandIDPattern, "must match %s (printable ASCII, no space, no ':')", CommandIDPattern)
		}
	}
	return nil
}

// walkObject checks b, which must hold exactly one JSON object, as
// ScanObject does, with a pooled scanner, and turns its faults into
// ValidationErrors naming field. The object b itself is depth 1.
func walkObject(b []byte, field string, maxDepth int) error {
	if err := CheckJSONText(b, field); err != nil {
		return err
	}
	s := getScanner()
	defer s.release()
	// The member names are not needed: errors name field.
	err := s.scan(b, 0, maxDepth, func([]byte) (string, error) { return "", nil }, nil)
	return objectFault(err, field, maxDepth, false)
}

// envelopeError turns a fault of Parse's scan of an envelope into a
// ValidationError: depth is counted inside each top-level field (the
// field's object is depth 1) and errors name that field.
func envelopeError(err error, maxDepth int) error {
	return objectFault(err, "", maxDepth, true)
}

// objectFault turns an *ObjectError of a scan into a ValidationError
// naming field, or with envelope set the top-level member at fault (see
// envelopeError); any other error is returned as it is.
func objectFault(err error, field string, maxDepth int, envelope bool) error {
	var oe *ObjectError
	if err == nil || !errors.As(err, &oe) {
		return err
	}
	where := field
	if envelope {
		where = oe.Member
	}
	switch oe.Fault {
	case ObjectEmpty, ObjectNotAnObject:
		if envelope {
			return malformed("", "object", "envelope must be a JSON object")
		}
		return invalid(field, "object", "must be a JSON object")
	case ObjectTrailingData:
		return malformed(field, "JSON", "has trailing data after the JSON object")
	case ObjectTooDeep:
		return limitExceeded(where, fmt.Sprintf("depth %d", maxDepth),
			"nesting depth exceeds the limit of %d levels", maxDepth)
	case ObjectDuplicateKey:
		if envelope && oe.Member == "" {
			return malformed(oe.Key, "unique keys", "appears more than once")
		}
		return malformed(where, "unique keys", "has duplicate key %q", oe.Key)
	}
	if envelope && (where == "" || oe.Fault == ObjectTruncated) {
		return malformed("", "JSON", "envelope is not valid JSON: %v", oe.Err)
	}
	return malformed(where, "JSON", "is not valid JSON: %v", oe.Err)
}

func asciiLower(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if b[j] >= 'A' && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// IsCanonicalUUID reports whether s is a UUID in its canonical text form:
// 8-4-4-4-12 lower-case hex digits (the form event_ids take, docs/architecture.md#the-envelope).
func IsCanonicalUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < 36; i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
	}
	return true
}

func isUpper(c byte) bool { return c >= 'A' && c <= 'Z' }
func isLower(c byte) bool { return c >= 'a' && c <= 'z' }
func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// IsEventType reports whether s matches EventTypePattern.
func IsEventType(s string) bool {
	if len(s) < 1 || len(s) > MaxEventTypeBytes || !isAlnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// ValidateEventType checks an event type against EventTypePattern
// (docs/architecture.md#event-types). The error is a *ValidationError of
// field event_type whose Limit is the pattern and whose reason names the
// rule and the first byte at fault.
func ValidateEventType(s string) error {
	const field = "event_type"
	switch {
	case s == "":
		return invalid(field, "required", "is required")
	case len(s) > MaxEventTypeBytes:
		return invalid(field, EventTypePattern, "must match %s: %d bytes is longer than %d", EventTypePattern, len(s), MaxEventTypeBytes)
	case !isAlnum(s[0]):
		return invalid(field, EventTypePattern, "must match %s: it must start with a letter or digit, not %q", EventTypePattern, s[:1])
	}
	if IsEventType(s) {
		return nil
	}
	i := 1
	for i < len(s) && (isAlnum(s[i]) || s[i] == '.' || s[i] == '_' || s[i] == '-') {
		i++
	}
	return invalid(field, EventTypePattern, "must match %s: byte %d (%q) is outside [A-Za-z0-9._-]", EventTypePattern, i, s[i:i+1])
}

func isAlnum(c byte) bool { return isUpper(c) || isLower(c) || isDigit(c) }

// IsAggregateType reports whether s is a well-formed aggregate_type:
// AggregateTypePattern, [A-Za-z][A-Za-z0-9_]{0,63}.
func IsAggregateType(s string) bool { return isAggregateType(s) }

// isAggregateType reports whether s matches [A-Za-z][A-Za-z0-9_]{0,63}.
func isAggregateType(s string) bool {
	if len(s) < 1 || len(s) > 64 || !(isUpper(s[0]) || isLower(s[0])) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !isUpper(c) && !isLower(c) && !isDigit(c) && c != '_' {
			return false
		}
	}
	return true
}

// ValidateKafkaTopic checks a topic name for metadata.kafka_topic: Kafka's
// rule KafkaTopicPattern (1..249 bytes of [A-Za-z0-9._-], not "." or
// ".."), so that a name the broker refuses is refused at append instead of
// reaching the relay. When configured topic names are given (the
// deployment's commands, events and DLQ topics), a name that differs from
// one of them only by '.' versus '_' is refused too: Kafka treats such names
// as colliding (their metric names are the same) and refuses to create the
// second. Errors are *ValidationError (CodeInvalid, field
// metadata.kafka_topic).
func ValidateKafkaTopic(topic string, configured ...string) error {
	const field = "metadata." + MetaKafkaTopic
	switch {
	case topic == "":
		return invalid(field, KafkaTopicPattern, "must not be empty (a Kafka topic name %s)", KafkaTopicPattern)
	case len(topic) > 249:
		return invalid(field, KafkaTopicPattern, "is %d bytes; a Kafka topic name is at most 249", len(topic))
	case topic == "." || topic == "..":
		return invalid(field, KafkaTopicPattern, "%q is not a legal Kafka topic name", topic)
	}
	if !isKafkaTopic(topic) {
		i := 0
		for i < len(topic) && isTopicByte(topic[i]) {
			i++
		}
		return invalid(field, KafkaTopicPattern, "byte %d (%q) is outside [A-Za-z0-9._-]; a Kafka topic name must match %s", i, topic[i], KafkaTopicPattern)
	}
	norm := strings.ReplaceAll(topic, ".", "_")
	for _, c := range configured {
		if c != topic && strings.ReplaceAll(c, ".", "_") == norm {
			return invalid(field, "no '.'/'_' collision", "%q collides with the configured topic %q: Kafka treats '.' and '_' alike in topic names", topic, c)
		}
	}
	return nil
}

// isKafkaTopic reports whether s is a legal Kafka topic name.
func isKafkaTopic(s string) bool {
	if len(s) < 1 || len(s) > 249 || s == "." || s == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTopicByte(s[i]) {
			return false
		}
	}
	return true
}

// isTopicByte reports whether c may appear in a Kafka topic name.
func isTopicByte(c byte) bool {
	return isUpper(c) || isLower(c) || isDigit(c) || c == '.' || c == '_' || c == '-'
}
