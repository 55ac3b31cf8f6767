package envelope

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"unicode/utf8"
)

// CanonicalJSON returns the canonical form of e used for the idempotency
// comparison (docs/architecture.md#the-envelope, docs/eventstore.md#append-protocol-group-commit): e is normalised (Normalize), then encoded
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
	enc, err := canonicalInput(e)
	if err != nil {
		return nil, err
	}
	return canonicalBytes(make([]byte, 0, len(enc)), enc)
}

// canonicalBytes appends the canonical form of enc, canonicalInput's
// bytes, to dst.
func canonicalBytes(dst, enc []byte) ([]byte, error) {
	out, next, err := appendCanonical(dst, enc, skipSpace(enc, 0), 0)
	if err == nil && skipSpace(enc, next) != len(enc) {
		err = errors.New("data after the top-level value")
	}
	if err != nil {
		return nil, fmt.Errorf("envelope: canonical form: %w", err)
	}
	return out, nil
}

// canonicalInput is Marshal of what the canonical form covers: e
// normalised, without sequence_number, position and the transport metadata
// keys (metadata omitted when nothing is left in it).
func canonicalInput(e Envelope) ([]byte, error) {
	enc, _, err := canonicalInputAt(nil, e)
	return enc, err
}

// canonicalInputAt appends canonicalInput(e) to dst (a new buffer when dst
// is nil) and returns the bounds of data's encoding in the result.
func canonicalInputAt(dst []byte, e Envelope) ([]byte, [2]int, error) {
	var dataAt [2]int
	e, err := Normalize(e)
	if err != nil {
		return nil, dataAt, err
	}
	// appendEnvelope's canonical variant leaves out sequence_number,
	// position and the transport keys (no copy of the metadata).
	if dst == nil {
		dst = make([]byte, 0, sizeHint(&e))
	}
	enc, err := appendEnvelope(dst, &e, true, nil, &dataAt)
	if err != nil {
		return nil, dataAt, fmt.Errorf("envelope: canonical form: %w", err)
	}
	return enc, dataAt, nil
}

// CanonicalHash returns the SHA-256 of CanonicalJSON(e).
func CanonicalHash(e Envelope) ([32]byte, error) {
	in, form := scratch.Get().(*[]byte), scratch.Get().(*[]byte)
	defer putScratch(in)
	defer putScratch(form)
	enc, _, err := canonicalInputAt((*in)[:0], e)
	if err != nil {
		return [32]byte{}, err
	}
	*in = enc
	b, err := canonicalBytes((*form)[:0], enc)
	if err != nil {
		return [32]byte{}, err
	}
	*form = b
	return sha256.Sum256(b), nil
}

// scratch recycles the buffers of the canonical hash: the canonical input
// and the canonical form are only hashed, never returned.
var scratch = sync.Pool{New: func() any { return new([]byte) }}

// putScratch returns b to scratch unless it grew beyond the size of a
// typical envelope (kept for the next hash, a large one would hold its
// memory).
func putScratch(b *[]byte) {
	if cap(*b) > 64<<10 {
		*b = nil
	}
	scratch.Put(b)
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

// maxCanonicalDepth is encoding/json's nesting limit, which the canonical
// form has always had (it was computed by decoding with encoding/json).
const maxCanonicalDepth = 10000

// member is one name/value pair of an object being canonicalised: its
// decoded name and the bounds of its canonical value in the object's
// scratch buffer.
type member struct {
	// name is the decoded name; quoted, when not nil, its bytes in the
	// input, already canonical (a plain name: no copy, no decoding).
	name, quoted []byte
	start, end   int
}

// appendCanonical appends the canonical form of the JSON value starting at
// src[i] (valid JSON, as Marshal writes it) to dst and returns the index
// after the value. It works on the bytes, without decoding into Go values:
// strings without escapes, control or non-UTF-8 bytes are copied as they
// are (already minimal), other strings are decoded by encoding/json and
// re-encoded (appendCanonicalString); numbers and literals are copied;
// object members are sorted by name, the last of duplicate names kept.
func appendCanonical(dst, src []byte, i, depth int) ([]byte, int, error) {
	if i >= len(src) {
		return dst, i, errors.New("unexpected end of JSON")
	}
	if c := src[i]; (c == '{' || c == '[') && depth >= maxCanonicalDepth {
		return dst, i, errors.New("exceeded max depth")
	}
	switch c := src[i]; {
	case c == '"':
		s, end, plain, err := readString(src, i)
		if err != nil {
			return dst, i, err
		}
		if plain {
			return append(dst, src[i:end]...), end, nil
		}
		return appendCanonicalString(dst, s), end, nil
	case c == '{':
		return appendCanonicalObject(dst, src, i, depth)
	case c == '[':
		return appendCanonicalArray(dst, src, i, depth)
	default:
		// a number, true, false or null: kept exactly as written
		end := i
		for end < len(src) && !isDelimiter(src[end]) {
			end++
		}
		if end == i {
			return dst, i, fmt.Errorf("unexpected %q", c)
		}
		return append(dst, src[i:end]...), end, nil
	}
}

// appendCanonicalObject appends the canonical form of the object at src[i]
// (its members sorted by name, the last of equal names kept).
func appendCanonicalObject(dst, src []byte, i, depth int) ([]byte, int, error) {
	// Room for a typical object's members on the stack (they are
	// only read below). The members' canonical values go to dst's
	// end first, at base; the sorted object is appended after them
	// and then moved down to base: no buffer of its own.
	var msBuf [16]member
	ms := msBuf[:0]
	base := len(dst)
	i = skipSpace(src, i+1)
	if i < len(src) && src[i] == '}' {
		return append(dst, "{}"...), i + 1, nil
	}
	for {
		if i >= len(src) || src[i] != '"' {
			return dst, i, errors.New("object member name expected")
		}
		s, end, plain, err := readString(src, i)
		if err != nil {
			return dst, i, err
		}
		m := member{start: len(dst)}
		if plain {
			m.name, m.quoted = src[i+1:end-1], src[i:end]
		} else {
			m.name = []byte(s)
		}
		i = skipSpace(src, end)
		if i >= len(src) || src[i] != ':' {
			return dst, i, errors.New("':' expected after an object member name")
		}
		if dst, i, err = appendCanonical(dst, src, skipSpace(src, i+1), depth+1); err != nil {
			return dst, i, err
		}
		m.end = len(dst)
		ms = append(ms, m)
		i = skipSpace(src, i)
		if i < len(src) && src[i] == ',' {
			i = skipSpace(src, i+1)
			continue
		}
		if i < len(src) && src[i] == '}' {
			i++
			break
		}
		return dst, i, errors.New("',' or '}' expected in an object")
	}
	// Sort by name keeping input order among equal names, so the
	// last of a run is the one encoding/json would keep.
	slices.SortStableFunc(ms, func(a, b member) int { return bytes.Compare(a.name, b.name) })
	out := len(dst)
	dst = append(dst, '{')
	first := true
	for k, m := range ms {
		if k+1 < len(ms) && bytes.Equal(ms[k+1].name, m.name) {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		if m.quoted != nil {
			dst = append(dst, m.quoted...)
		} else {
			dst = appendCanonicalString(dst, string(m.name))
		}
		dst = append(dst, ':')
		dst = append(dst, dst[m.start:m.end]...)
	}
	dst = append(dst, '}')
	n := copy(dst[base:], dst[out:])
	return dst[:base+n], i, nil
}

// appendCanonicalArray appends the canonical form of the array at src[i].
func appendCanonicalArray(dst, src []byte, i, depth int) ([]byte, int, error) {
	dst = append(dst, '[')
	i = skipSpace(src, i+1)
	if i < len(src) && src[i] == ']' {
		return append(dst, ']'), i + 1, nil
	}
	for {
		var err error
		if dst, i, err = appendCanonical(dst, src, i, depth+1); err != nil {
			return dst, i, err
		}
		i = skipSpace(src, i)
		if i < len(src) && src[i] == ',' {
			dst = append(dst, ',')
			i = skipSpace(src, i+1)
			continue
		}
		if i < len(src) && src[i] == ']' {
			return append(dst, ']'), i + 1, nil
		}
		return dst, i, errors.New("',' or ']' expected in an array")
	}
}

// readString reads the JSON string starting at src[i]: the index after
// it, whether its bytes are already canonical (scanString), and, when they
// are not, its value as encoding/json decodes it (s is empty otherwise:
// the caller takes the bytes as they are).
func readString(src []byte, i int) (s string, end int, plain bool, err error) {
	end, plain, err = scanString(src, i)
	if err != nil || plain {
		return "", end, plain, err
	}
	var v string // declared here: only strings that need decoding allocate it
	err = json.Unmarshal(src[i:end], &v)
	return v, end, false, err
}

// scanString returns the index after the JSON string starting at src[i]
// (a '"') and whether its bytes are already canonical: no escape, no
// control byte, valid UTF-8.
func scanString(src []byte, i int) (end int, plain bool, err error) {
	plain = true
	ascii := true
	for j := i + 1; j < len(src); j++ {
		switch c := src[j]; {
		case c == '"':
			if !ascii && !utf8.Valid(src[i+1:j]) {
				plain = false
			}
			return j + 1, plain, nil
		case c == '\\':
			plain = false
			j++ // the escaped byte (a '"' or '\\' must not end the scan)
		case c < 0x20:
			plain = false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return len(src), false, errors.New("unterminated string")
}

func skipSpace(src []byte, i int) int {
	for i < len(src) && (src[i] == ' ' || src[i] == '\t' || src[i] == '\n' || src[i] == '\r') {
		i++
	}
	return i
}

func isDelimiter(c byte) bool {
	switch c {
	case ',', '}', ']', ':', ' ', '\t', '\n', '\r', '"', '{', '[':
		return true
	}
	return false
}

const lowerHex = "0123456789abcdef"

// appendCanonicalString appends s as a minimal JSON string: only '"', '\\'
// and control characters are escaped; bytes that are not UTF-8 become
// \ufffd.
func appendCanonicalString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				dst = append(dst, `\ufffd`...)
			} else {
				dst = append(dst, s[i:i+size]...)
			}
			i += size
			continue
		}
		switch {
		case c == '"':
			dst = append(dst, `\"`...)
		case c == '\\':
			dst = append(dst, `\\`...)
		case c == '\n':
			dst = append(dst, `\n`...)
		case c == '\r':
			dst = append(dst, `\r`...)
		case c == '\t':
			dst = append(dst, `\t`...)
		case c == '\b':
			dst = append(dst, `\b`...)
		case c == '\f':
			dst = append(dst, `\f`...)
		case c < 0x20:
			dst = append(dst, `\u00`...)
			dst = append(dst, lowerHex[c>>4], lowerHex[c&0x0f])
		default:
			dst = append(dst, c)
		}
		i++
	}
	return append(dst, '"')
}
