package envelope

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"unicode/utf8"
)

// CanonicalJSON returns the canonical form of e used for the idempotency
// comparison (SPEC §3, §5.4): e is normalised (Normalize), then encoded
// without sequence_number, position and the transport metadata keys (see
// IsTransportMetadataKey), with object keys sorted by their UTF-8 bytes at
// every level, no insignificant white space, and metadata omitted when
// nothing is left in it. Numbers are kept exactly as written (1 and 1.0
// differ; large integers are never rounded); strings are re-encoded
// minimally (only '"', '\\' and control characters escaped). Duplicate keys
// inside data keep the last value, as encoding/json does; Parse rejects them
// anyway.
//
// occurred_at is part of the canonical form. A store that fills an absent
// occurred_at should, on an idempotency hit, compare against the stored
// envelope's occurred_at rather than the fresh default.
func CanonicalJSON(e Envelope) ([]byte, error) {
	e, err := Normalize(e)
	if err != nil {
		return nil, err
	}
	e.SequenceNumber = 0
	e.Position = 0
	if len(e.Metadata) > 0 {
		m := make(Metadata, len(e.Metadata))
		for k, v := range e.Metadata {
			if !IsTransportMetadataKey(k) {
				m[k] = v
			}
		}
		if len(m) == 0 {
			m = nil
		}
		e.Metadata = m
	}
	enc, err := Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("envelope: canonical form: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(enc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("envelope: canonical form: %w", err)
	}
	var buf bytes.Buffer
	buf.Grow(len(enc))
	writeCanonical(&buf, v)
	return buf.Bytes(), nil
}

// CanonicalHash returns the SHA-256 of CanonicalJSON(e).
func CanonicalHash(e Envelope) ([32]byte, error) {
	b, err := CanonicalJSON(e)
	if err != nil {
		return [32]byte{}, err
	}
	return sha256.Sum256(b), nil
}

// CanonicalHashHex returns CanonicalHash(e) as lower-case hex, the form used
// in idempotency-mismatch errors.
func CanonicalHashHex(e Envelope) (string, error) {
	h, err := CanonicalHash(e)
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h[:]), nil
}

// writeCanonical writes v, a value decoded by encoding/json with UseNumber,
// in canonical form. Its recursion is bounded by encoding/json's own nesting
// limit and, for validated envelopes, by Limits.MaxDataDepth.
func writeCanonical(buf *bytes.Buffer, v any) {
	switch t := v.(type) {
	case nil:
		buf.WriteString("null")
	case bool:
		if t {
			buf.WriteString("true")
		} else {
			buf.WriteString("false")
		}
	case json.Number:
		buf.WriteString(string(t))
	case string:
		writeCanonicalString(buf, t)
	case []any:
		buf.WriteByte('[')
		for i, x := range t {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeCanonical(buf, x)
		}
		buf.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		buf.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeCanonicalString(buf, k)
			buf.WriteByte(':')
			writeCanonical(buf, t[k])
		}
		buf.WriteByte('}')
	}
}

const lowerHex = "0123456789abcdef"

func writeCanonicalString(buf *bytes.Buffer, s string) {
	buf.WriteByte('"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				buf.WriteString(`\ufffd`)
			} else {
				buf.WriteString(s[i : i+size])
			}
			i += size
			continue
		}
		switch {
		case c == '"':
			buf.WriteString(`\"`)
		case c == '\\':
			buf.WriteString(`\\`)
		case c == '\n':
			buf.WriteString(`\n`)
		case c == '\r':
			buf.WriteString(`\r`)
		case c == '\t':
			buf.WriteString(`\t`)
		case c == '\b':
			buf.WriteString(`\b`)
		case c == '\f':
			buf.WriteString(`\f`)
		case c < 0x20:
			buf.WriteString(`\u00`)
			buf.WriteByte(lowerHex[c>>4])
			buf.WriteByte(lowerHex[c&0x0f])
		default:
			buf.WriteByte(c)
		}
		i++
	}
	buf.WriteByte('"')
}
