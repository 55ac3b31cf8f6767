package envelope

// The reference implementation of Parse: Parse and the helpers it used as
// they were before the single-pass scanner (commit "envelope: reference
// Parse ..."), kept verbatim but renamed (refParse, refScanObject, ...).
// FuzzParseDifferential compares Parse with it: the same envelope or the
// same refusal (code, field, reason) for every input.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
)

func refParse(b []byte, limits Limits) (Envelope, error) {
	l := limits.WithDefaults()
	if len(b) > l.MaxEnvelopeBytes {
		return Envelope{}, limitExceeded("", fmt.Sprintf("%d bytes", l.MaxEnvelopeBytes),
			"envelope of %d bytes exceeds the limit of %d bytes", len(b), l.MaxEnvelopeBytes)
	}
	raw := make(map[string]json.RawMessage, len(envelopeFields))
	err := refWalkObject(b, "", l.MaxDataDepth, true, func(key string) error {
		if !knownField(key) {
			return invalid(key, "known fields", "unknown field; the envelope admits only %s",
				strings.Join(envelopeFields[:], ", "))
		}
		return nil
	}, func(key string, v []byte) { raw[key] = v })
	if err != nil {
		return Envelope{}, err
	}
	// raw holds each field's bytes as json.Unmarshal into a
	// map[string]json.RawMessage would (FuzzParseEnvelope compares them),
	// without a second pass over the envelope.
	e, err := refDecodeFields(raw)
	if err != nil {
		return Envelope{}, err
	}
	if e, err = Normalize(e); err != nil {
		return Envelope{}, err
	}
	// data and metadata were scanned above (depth, duplicate keys).
	if err := refValidate(e, l, len(b), false); err != nil {
		return Envelope{}, err
	}
	return e, nil
}

func refUnquote(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' {
		return "", false
	}
	if bytes.IndexByte(v, '\\') < 0 {
		return string(v[1 : len(v)-1]), true
	}
	// With escapes: the tokenizer, as walkObject read it (the text was
	// checked by ScanObject: no lone surrogate escape is left to replace).
	tok, err := jsontext.NewDecoder(bytes.NewBuffer(v), jsontext.AllowInvalidUTF8(true)).ReadToken()
	if err != nil || tok.Kind() != '"' {
		return "", false
	}
	return tok.String(), true
}

func refDecodeFields(raw map[string]json.RawMessage) (Envelope, error) {
	var e Envelope
	str := func(field string, dst *string) error {
		v, ok := raw[field]
		if !ok || isNull(v) {
			return nil
		}
		u, ok := refUnquote(v)
		if !ok {
			return invalid(field, "string", "must be a JSON string")
		}
		*dst = u
		return nil
	}
	integer := func(field string) (int64, bool, error) {
		v, ok := raw[field]
		if !ok || isNull(v) {
			return 0, false, nil
		}
		if len(v) == 0 || (v[0] != '-' && (v[0] < '0' || v[0] > '9')) {
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
	var kind string
	for _, s := range []struct {
		field string
		dst   *string
	}{
		{"event_id", &e.EventID},
		{"event_type", &e.EventType},
		{"kind", &kind},
		{"aggregate_type", &e.AggregateType},
		{"aggregate_id", &e.AggregateID},
	} {
		if err := str(s.field, s.dst); err != nil {
			return Envelope{}, err
		}
	}
	e.Kind = Kind(kind)

	for _, f := range []struct {
		field string
		dst   *int64
	}{
		{"sequence_number", &e.SequenceNumber},
		{"position", &e.Position},
	} {
		n, ok, err := integer(f.field)
		if err != nil {
			return Envelope{}, err
		}
		if ok && n < 1 {
			return Envelope{}, invalid(f.field, ">= 1", "must be >= 1 when present, got %d", n)
		}
		*f.dst = n
	}
	if n, ok, err := integer("expected_seq"); err != nil {
		return Envelope{}, err
	} else if ok {
		e.ExpectedSeq = &n
	}
	var occurred string
	if v, ok := raw["occurred_at"]; ok && !isNull(v) {
		var ok bool
		if occurred, ok = refUnquote(v); !ok {
			return Envelope{}, invalid("occurred_at", "RFC 3339", "must be a JSON string in RFC 3339 form")
		}
		ts, err := ParseTimestamp(occurred)
		if err != nil {
			return Envelope{}, invalid("occurred_at", "RFC 3339", "must be an RFC 3339 time such as 2026-11-21T10:00:00.123Z: %v", err)
		}
		e.OccurredAt = ts
	}
	if err := str("actor", &e.Actor); err != nil {
		return Envelope{}, err
	}
	if v, ok := raw["data"]; ok && !isNull(v) {
		if v[0] != '{' {
			return Envelope{}, invalid("data", "object", "must be a JSON object")
		}
		e.Data = bytes.Clone(v) // v may alias the caller's buffer
	}
	if v, ok := raw["metadata"]; ok && !isNull(v) {
		if v[0] != '{' {
			return Envelope{}, invalid("metadata", "object", "must be a JSON object")
		}
		if err := json.Unmarshal(v, &e.Metadata); err != nil {
			return Envelope{}, malformed("metadata", "object", "must be a JSON object: %v", err)
		}
	}
	if n, ok, err := integer("schema_version"); err != nil {
		return Envelope{}, err
	} else if ok {
		if n < 1 || n > 1<<31-1 {
			return Envelope{}, invalid("schema_version", ">= 1", "must be an integer in 1..2147483647 when present, got %d", n)
		}
		e.SchemaVersion = int(n)
	}
	return e, nil
}

func refValidate(e Envelope, l Limits, wire int, dataChecked bool) error {
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
		if err := refCheckObject("data", e.Data, l.MaxDataDepth); err != nil {
			return err
		}
	}
	if e.SchemaVersion < 1 {
		return invalid("schema_version", ">= 1", "must be >= 1, got %d", e.SchemaVersion)
	}
	if err := refValidateMetadata(e.Metadata, l, scanned); err != nil {
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

func refCheckObject(field string, b []byte, maxDepth int) error {
	return refWalkObject(b, field, maxDepth, false, nil, nil)
}

func refValidateMetadata(m Metadata, l Limits, scanned bool) error {
	if len(m) == 0 {
		return nil
	}
	// scalars: every value is a string, number, boolean or null (as the
	// ids and trace headers are), so the object nests one level and has
	// no keys but m's; bound bounds its encoding as EncodedBound does.
	scalars, bound := true, 2
	for k, v := range m {
		if err := CheckText(k, "metadata"); err != nil {
			return err
		}
		if !scanned {
			// Parse checked the whole envelope's text already.
			if err := CheckJSONText(v, "metadata."+k); err != nil {
				return err
			}
		}
		if len(v) == 0 || !json.Valid(v) {
			return malformed("metadata."+k, "JSON", "is not a valid JSON value")
		}
		if c := bytes.TrimLeft(v, " \t\r\n")[0]; c == '{' || c == '[' {
			scalars = false
		}
		bound += 6 * (len(k) + len(v) + 1)
	}
	for _, k := range stringMetadataKeys {
		if _, ok := m[k]; !ok {
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
	return refWalkObject(b, "metadata", l.MaxDataDepth, false, nil, nil)
}

func refWalkObject(b []byte, field string, maxDepth int, envelope bool, onTopKey func(string) error, onTopValue func(string, []byte)) error {
	rule := ObjectRule{Field: field, MaxDepth: maxDepth, OnValue: onTopValue}
	if envelope {
		rule.Offset, rule.OnKey = 1, onTopKey
	}
	err := refScanObject(b, rule)
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

func refScanObject(b []byte, rule ObjectRule) error {
	if err := CheckJSONText(b, rule.Field); err != nil {
		return err
	}
	// A *bytes.Buffer is read in place, without a copy. The text was
	// checked above, so AllowInvalidUTF8 only spares the tokenizer a
	// second check; duplicate names are refused by default.
	dec := jsontext.NewDecoder(bytes.NewBuffer(b), jsontext.AllowInvalidUTF8(true))
	switch dec.PeekKind() {
	case '{':
	case 0:
		if _, err := dec.ReadToken(); err != nil && err != io.EOF {
			return refObjectSyntaxError(err)
		}
		return &ObjectError{Fault: ObjectEmpty}
	default:
		if _, err := dec.ReadToken(); err != nil {
			return refObjectSyntaxError(err)
		}
		return &ObjectError{Fault: ObjectNotAnObject}
	}
	member := ""
	valStart := 0 // where the current top-level value starts (OnValue)
	closed := false
	for {
		tok, err := dec.ReadToken()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return refObjectSyntaxError(err)
		}
		if closed {
			// the decoder reads a stream of values; b must hold one
			return &ObjectError{Fault: ObjectTrailingData}
		}
		depth := dec.StackDepth()
		closed = depth == 0
		if k := tok.Kind(); (k == '{' || k == '[') && depth-rule.Offset > rule.MaxDepth {
			return &ObjectError{Fault: ObjectTooDeep, Member: member, MaxDepth: rule.MaxDepth}
		}
		if depth != 1 {
			continue
		}
		// Inside the object: a name (odd count) starts a member, a value
		// (even count) completes one.
		if _, n := dec.StackIndex(1); n%2 == 1 {
			member = tok.String()
			if rule.OnKey != nil {
				if err := rule.OnKey(member); err != nil {
					return err
				}
			}
			valStart = refValueStart(b, int(dec.InputOffset()))
		} else if n > 0 && rule.OnValue != nil {
			end := int(dec.InputOffset())
			rule.OnValue(member, b[valStart:end:end])
		}
	}
}

func refObjectSyntaxError(err error) *ObjectError {
	var se *jsontext.SyntacticError
	if !errors.As(err, &se) {
		return &ObjectError{Fault: ObjectSyntax, Err: err}
	}
	member := ""
	for tok := range se.JSONPointer.Tokens() {
		member = tok
		break
	}
	switch {
	case errors.Is(err, jsontext.ErrDuplicateName):
		if se.JSONPointer.Parent() == "" {
			member = ""
		}
		return &ObjectError{Fault: ObjectDuplicateKey, Member: member, Key: se.JSONPointer.LastToken()}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &ObjectError{Fault: ObjectTruncated, Member: member, Err: se.Err}
	default:
		return &ObjectError{Fault: ObjectSyntax, Member: member, Err: se.Err}
	}
}

func refValueStart(b []byte, i int) int {
	skip := func() {
		for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
			i++
		}
	}
	skip()
	if i < len(b) && b[i] == ':' {
		i++
	}
	skip()
	return i
}

func knownField(k string) bool {
	for _, f := range envelopeFields {
		if f == k {
			return true
		}
	}
	return false
}
