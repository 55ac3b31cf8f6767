package eventstore

import (
	"bytes"
	"io"
	"strconv"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/sluicehq/sluice/shared/envelope"
)

// storedLine is the state of lineDecoder's fast path (decodeStored): a
// jsontext decoder kept across the lines of the decoder's reads, reading
// each line in place.
type storedLine struct {
	dec jsontext.Decoder
	in  bytes.Buffer
}

// Indexes of the string fields decodeStored sets (lineTexts).
const (
	lineEventID = iota
	lineEventType
	lineAggregateType
	lineAggregateID
	lineActor
	lineTextFields
)

// lineTexts are the string fields of a line being decoded, set at once by
// envelope.SetTextFields (one allocation, not one per field).
type lineTexts [lineTextFields][]byte

func (t *lineTexts) set(e *envelope.Envelope) {
	envelope.SetTextFields(e, t[lineEventID], t[lineEventType], t[lineAggregateType], t[lineAggregateID], t[lineActor])
}

// decodeStored decodes raw in one token pass without reflection when it
// is in the form the store writes (envelope.Marshal): one object whose
// top-level names are exactly the envelope's JSON names, each at most
// once; strings, metadata keys included, in valid UTF-8 without a lone
// surrogate escape; integers where the envelope has integers; no null but inside
// data; metadata an object with distinct keys. Data and the metadata
// values are capacity-limited slices of raw, as decode's general path
// makes them. For such a line it decodes exactly what encoding/json does
// (FuzzLineDecoder); ok is false for any other line, which decode reads
// with the general decoder (which also words its refusal).
func (d *lineDecoder) decodeStored(raw []byte) (e envelope.Envelope, ok bool) {
	s := &d.stored
	s.in = *bytes.NewBuffer(raw)
	// Names and duplicates are checked below; invalid UTF-8 is taken
	// verbatim only inside data and metadata values, as encoding/json
	// keeps a json.RawMessage.
	s.dec.Reset(&s.in, jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	defer func() {
		s.in = bytes.Buffer{}
		s.dec.Reset(&s.in)
	}()
	dec := &s.dec
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return envelope.Envelope{}, false
	}
	var texts lineTexts
	var seen uint16
	for dec.PeekKind() == '"' {
		name, ok := plainToken(dec, raw)
		if !ok {
			return envelope.Envelope{}, false
		}
		f := storedField(name)
		if f < 0 || seen&(1<<f) != 0 {
			return envelope.Envelope{}, false
		}
		seen |= 1 << f
		if !storedValue(dec, raw, f, &e, &texts) {
			return envelope.Envelope{}, false
		}
	}
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '}' {
		return envelope.Envelope{}, false
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		return envelope.Envelope{}, false // trailing data (or a syntax error)
	}
	texts.set(&e)
	return e, true
}

// storedFields are the envelope's JSON names, as Marshal writes them; the
// constants below index it.
var storedFields = [...]string{
	"event_id", "event_type", "aggregate_type", "aggregate_id", "actor",
	"kind", "sequence_number", "position", "expected_seq", "occurred_at",
	"data", "metadata", "schema_version",
}

// Indexes of storedFields past the string fields (lineEventID..lineActor).
const (
	lineKind = lineTextFields + iota
	lineSequenceNumber
	linePosition
	lineExpectedSeq
	lineOccurredAt
	lineData
	lineMetadata
	lineSchemaVersion
)

// storedField returns the index in storedFields of name, -1 for any other.
func storedField(name []byte) int {
	for i, f := range storedFields {
		if f == string(name) {
			return i
		}
	}
	return -1
}

// storedValue reads the value of the field storedFields[f] of the line raw
// into e (its strings into texts); false: not a value decodeStored takes.
func storedValue(dec *jsontext.Decoder, raw []byte, f int, e *envelope.Envelope, texts *lineTexts) bool {
	switch k := dec.PeekKind(); {
	case f < lineTextFields || f == lineKind:
		if k != '"' {
			return false
		}
		v, ok := plainToken(dec, raw)
		switch {
		case !ok:
			return false
		case f < lineTextFields:
			texts[f] = v
		case string(v) == string(envelope.KindDomain):
			e.Kind = envelope.KindDomain
		case string(v) == string(envelope.KindCommand):
			e.Kind = envelope.KindCommand
		default:
			e.Kind = envelope.Kind(v)
		}
		return true
	case f == lineData:
		if k == 'n' {
			return false
		}
		v, ok := rawValue(dec, raw)
		e.Data = v
		return ok
	case f == lineMetadata:
		m, ok := storedMetadata(dec, raw)
		e.Metadata = m
		return ok
	case f == lineOccurredAt:
		if k != '"' {
			return false
		}
		v, ok := rawValue(dec, raw)
		if !ok {
			return false
		}
		if ts, ok := envelope.ParseStoredTimestamp(v[1 : len(v)-1]); ok {
			e.OccurredAt = ts // the form the store writes, without a copy
			return true
		}
		// What encoding/json calls: the value's bytes.
		return e.OccurredAt.UnmarshalJSON(v) == nil
	}
	// The integers.
	if dec.PeekKind() != '0' {
		return false
	}
	v, ok := rawValue(dec, raw)
	if !ok {
		return false
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return false // a fraction, an exponent, out of range
	}
	switch f {
	case lineSequenceNumber:
		e.SequenceNumber = n
	case linePosition:
		e.Position = n
	case lineExpectedSeq:
		p := new(int64)
		*p = n
		e.ExpectedSeq = p
	case lineSchemaVersion:
		if int64(int(n)) != n {
			return false
		}
		e.SchemaVersion = int(n)
	}
	return true
}

// storedMetadata reads a metadata object of distinct plain keys and
// values other than null; false: any other value.
func storedMetadata(dec *jsontext.Decoder, raw []byte) (envelope.Metadata, bool) {
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return nil, false
	}
	m := envelope.Metadata{}
	for dec.PeekKind() == '"' {
		name, ok := plainToken(dec, raw)
		if !ok {
			return nil, false
		}
		key := metadataKey(name)
		if _, dup := m[key]; dup || dec.PeekKind() == 'n' {
			return nil, false
		}
		v, ok := rawValue(dec, raw)
		if !ok {
			return nil, false
		}
		m[key] = v
	}
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '}' {
		return nil, false
	}
	return m, true
}

// metadataKey returns name as a string, the well-known keys of stored
// lines without an allocation.
func metadataKey(name []byte) string {
	for _, k := range [...]string{envelope.MetaCommandID, envelope.MetaCorrelationID, envelope.MetaCausationID,
		envelope.MetaKafkaTopic, envelope.MetaOrderingKey, envelope.MetaTraceparent, envelope.MetaTracestate,
		envelope.MetaPrincipal} {
		if k == string(name) {
			return k
		}
	}
	return string(name)
}

// plainToken reads a string token (a name or a value) of raw and returns
// the string it stands for: the bytes between its quotes (a sub-slice of
// raw) when it has no escape, else its unquoted copy; false when it is not
// valid UTF-8 or holds a lone surrogate escape (which encoding/json
// replaces), or is not a string.
func plainToken(dec *jsontext.Decoder, raw []byte) ([]byte, bool) {
	v, ok := rawValue(dec, raw)
	if !ok || len(v) < 2 || v[0] != '"' || !utf8.Valid(v) {
		return nil, false
	}
	if bytes.IndexByte(v, '\\') < 0 {
		return v[1 : len(v)-1], true
	}
	u, err := jsontext.AppendUnquote(nil, v)
	if err != nil {
		return nil, false
	}
	return u, true
}

// rawValue reads the next value (or name) and returns its bytes as a
// capacity-limited slice of raw.
func rawValue(dec *jsontext.Decoder, raw []byte) ([]byte, bool) {
	v, err := dec.ReadValue()
	if err != nil {
		return nil, false
	}
	end := int(dec.InputOffset())
	start := end - len(v)
	if len(v) == 0 || start < 0 || end > len(raw) || &raw[start] != &v[0] {
		// not read in place: cannot happen, the decoder reads raw
		return nil, false
	}
	return raw[start:end:end], true
}
