package envelope

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"reflect"
	"slices"
	"strconv"

	"github.com/go-json-experiment/json/jsontext"
)

// The encoding of an envelope without reflection (issue 34: encoding
// each appended envelope twice by reflection was a sixth of the API's
// CPU). appendEnvelope writes exactly the bytes EncodeJSON (encoding/json's
// Encoder, HTML escaping off) writes for an Envelope, which older versions
// stored and hashed: fields in declaration order, omitempty and omitzero
// as the struct tags say, Timestamp in its MarshalJSON form, metadata keys
// sorted, strings escaped by encoding/json unless they are plain ASCII,
// raw JSON (data, metadata values) compacted by json.Compact, which
// rejects what is not valid JSON with the error EncodeJSON returned.
// FuzzMarshalMatchesReflection compares the two, and the canonical form
// with its former computation, on arbitrary envelopes.

var (
	rawMessageType = reflect.TypeFor[json.RawMessage]()
	timestampType  = reflect.TypeFor[Timestamp]()
)

// appendEnvelope appends Marshal's encoding of e to dst. canonical selects
// canonicalInput's variant instead: no sequence_number and position, no
// transport metadata keys, metadata omitted when nothing is left in it.
// data, when not nil, is the encoding of e.Data already computed
// (appendRaw) by the caller; it is not checked again. dataAt, when not
// nil, is set to the bounds of data's encoding in the result.
func appendEnvelope(dst []byte, e *Envelope, canonical bool, data []byte, dataAt *[2]int) ([]byte, error) {
	dst = append(dst, `{"event_id":`...)
	dst = appendString(dst, e.EventID)
	dst = append(dst, `,"event_type":`...)
	dst = appendString(dst, e.EventType)
	dst = append(dst, `,"kind":`...)
	dst = appendString(dst, string(e.Kind))
	dst = append(dst, `,"aggregate_type":`...)
	dst = appendString(dst, e.AggregateType)
	dst = append(dst, `,"aggregate_id":`...)
	dst = appendString(dst, e.AggregateID)
	if e.SequenceNumber != 0 && !canonical {
		dst = append(dst, `,"sequence_number":`...)
		dst = strconv.AppendInt(dst, e.SequenceNumber, 10)
	}
	if e.Position != 0 && !canonical {
		dst = append(dst, `,"position":`...)
		dst = strconv.AppendInt(dst, e.Position, 10)
	}
	if e.ExpectedSeq != nil {
		dst = append(dst, `,"expected_seq":`...)
		dst = strconv.AppendInt(dst, *e.ExpectedSeq, 10)
	}
	var err error
	if !e.OccurredAt.IsZero() {
		dst = append(dst, `,"occurred_at":`...)
		if dst, err = e.OccurredAt.appendJSON(dst); err != nil {
			return nil, &json.MarshalerError{Type: timestampType, Err: err}
		}
	}
	if e.Actor != "" {
		dst = append(dst, `,"actor":`...)
		dst = appendString(dst, e.Actor)
	}
	dst = append(dst, `,"data":`...)
	start := len(dst)
	if data != nil {
		dst = append(dst, data...)
	} else if dst, err = appendRaw(dst, e.Data); err != nil {
		return nil, err
	}
	if dataAt != nil {
		*dataAt = [2]int{start, len(dst)}
	}
	if dst, err = appendMetadata(dst, e.Metadata, canonical); err != nil {
		return nil, err
	}
	dst = append(dst, `,"schema_version":`...)
	dst = strconv.AppendInt(dst, int64(e.SchemaVersion), 10)
	return append(dst, '}'), nil
}

// sizeHint is the length of e's encoding when no string needs an escape
// and data and metadata are compact: the capacity to encode e into
// without growing the buffer (json.Compact grows it to fit the raw value
// whole before compacting it).
func sizeHint(e *Envelope) int {
	n := len(e.EventID) + len(e.EventType) + len(e.Kind) + len(e.AggregateType) + len(e.AggregateID) + len(e.Actor) + len(e.Data)
	for k, v := range e.Metadata {
		n += len(k) + len(v) + 4
	}
	// field names, quotes and punctuation (150), three int64, occurred_at
	return n + 256
}

// appendMetadata appends `,"metadata":{...}` with the keys sorted (as
// encoding/json sorts a map's keys), nothing when m has no key to write.
// canonical leaves out the transport keys.
func appendMetadata(dst []byte, m Metadata, canonical bool) ([]byte, error) {
	var keysBuf [16]string
	keys := keysBuf[:0]
	for k := range m {
		if !canonical || !IsTransportMetadataKey(k) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return dst, nil
	}
	slices.Sort(keys)
	dst = append(dst, `,"metadata":{`...)
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, k)
		dst = append(dst, ':')
		var err error
		if dst, err = appendRaw(dst, m[k]); err != nil {
			return nil, err
		}
	}
	return append(dst, '}'), nil
}

// appendRaw appends what encoding/json writes for the json.RawMessage
// raw: null for nil, else raw compacted by json.Compact, or the
// *json.MarshalerError encoding/json returns when raw is not valid JSON.
// A quoted string of plain ASCII (the metadata ids) is valid and compact
// as it is.
func appendRaw(dst []byte, raw json.RawMessage) ([]byte, error) {
	if raw == nil {
		return append(dst, "null"...), nil
	}
	if n := len(raw); n >= 2 && raw[0] == '"' && raw[n-1] == '"' && plainASCII(raw[1:n-1]) {
		return append(dst, raw...), nil
	}
	if compactText(raw) && jsontext.Value(raw).IsValid(jsontext.AllowDuplicateNames(true)) {
		// Already compact, and valid by jsontext's rules (valid UTF-8,
		// no escaped lone surrogate), which encoding/json's scanner
		// accepts: json.Compact would return raw unchanged. jsontext
		// checks it in a fraction of the scanner's time; anything it
		// refuses takes json.Compact, for its error or its result.
		return append(dst, raw...), nil
	}
	buf := bytes.NewBuffer(dst)
	if err := json.Compact(buf, raw); err != nil {
		return nil, &json.MarshalerError{Type: rawMessageType, Err: err}
	}
	return buf.Bytes(), nil
}

// compactText reports whether the JSON text b has no white space outside
// its strings (b is not checked to be valid).
func compactText(b []byte) bool {
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			return false
		case '"':
			// skip the string: its end is the next '"' not escaped
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		}
	}
	return true
}

// appendString appends s as encoding/json encodes a string with HTML
// escaping off. Printable ASCII without '"' and '\\' is copied between
// quotes; any other string is encoded by encoding/json itself (escapes of
// control bytes, U+2028 and U+2029, \ufffd for bytes that are not UTF-8).
func appendString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c > '~' || c == '"' || c == '\\' {
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			_ = enc.Encode(s) // a Go string always encodes
			return append(dst, bytes.TrimSuffix(buf.Bytes(), []byte{'\n'})...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// MarshalHash returns Marshal(e) and CanonicalHash(e), computed together:
// e.Data is compacted (and checked) once for both. err is CanonicalHash's
// error when that fails, else Marshal's. The store calls it once per
// appended envelope (its line and its idempotency hash).
func MarshalHash(e Envelope) ([]byte, [32]byte, error) {
	inBuf, form := scratch.Get().(*[]byte), scratch.Get().(*[]byte)
	defer putScratch(inBuf)
	defer putScratch(form)
	in, dataAt, err := canonicalInputAt((*inBuf)[:0], e)
	if err != nil {
		return nil, [32]byte{}, err
	}
	*inBuf = in
	canon, err := canonicalBytes((*form)[:0], in)
	if err != nil {
		return nil, [32]byte{}, err
	}
	*form = canon
	hash := sha256.Sum256(canon)
	var data []byte
	if len(e.Data) > 0 {
		// Normalize left e.Data as it was (it sets only an absent one).
		data = in[dataAt[0]:dataAt[1]]
	}
	enc, err := appendEnvelope(make([]byte, 0, sizeHint(&e)), &e, false, data, nil)
	if err != nil {
		return nil, [32]byte{}, err
	}
	return enc, hash, nil
}
