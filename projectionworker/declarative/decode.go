package declarative

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// decodeDoc decodes a stored document into doc as json.Unmarshal does
// into a map[string]any: the common document (an object of objects,
// arrays, plain strings, numbers, true, false and null) is parsed
// directly, without reflection; anything else — a string with an escape
// or a byte json.Unmarshal would replace, a number out of range, deep
// nesting, invalid JSON — goes through json.Unmarshal, so that values and
// errors stay the same (TestDecodeDocEqualsUnmarshal, FuzzDecodeDoc).
func decodeDoc(b []byte, doc *map[string]any) error {
	d := docDecoder{b: b}
	d.space()
	if m, ok := d.object(0); ok {
		if d.space(); d.i == len(d.b) {
			*doc = m
			return nil
		}
	}
	return json.Unmarshal(b, doc)
}

// maxFastDepth bounds the nesting the direct parser takes (json.Unmarshal
// takes the rest, with its own limit).
const maxFastDepth = 200

// docDecoder parses JSON directly; every method reports false on
// anything it does not take (the caller falls back to json.Unmarshal).
type docDecoder struct {
	b []byte
	i int
}

func (d *docDecoder) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *docDecoder) value(depth int) (any, bool) {
	if d.i >= len(d.b) {
		return nil, false
	}
	switch c := d.b[d.i]; {
	case c == '{':
		return d.object(depth + 1)
	case c == '[':
		return d.array(depth + 1)
	case c == '"':
		return d.str()
	case c == 't':
		return true, d.literal("true")
	case c == 'f':
		return false, d.literal("false")
	case c == 'n':
		return nil, d.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		return d.number()
	}
	return nil, false
}

func (d *docDecoder) literal(s string) bool {
	if len(d.b)-d.i < len(s) || string(d.b[d.i:d.i+len(s)]) != s {
		return false
	}
	d.i += len(s)
	return true
}

func (d *docDecoder) object(depth int) (map[string]any, bool) {
	if depth > maxFastDepth || d.i >= len(d.b) || d.b[d.i] != '{' {
		return nil, false
	}
	d.i++
	m := map[string]any{}
	d.space()
	if d.i < len(d.b) && d.b[d.i] == '}' {
		d.i++
		return m, true
	}
	for {
		d.space()
		if d.i >= len(d.b) || d.b[d.i] != '"' {
			return nil, false
		}
		k, ok := d.str()
		if !ok {
			return nil, false
		}
		d.space()
		if d.i >= len(d.b) || d.b[d.i] != ':' {
			return nil, false
		}
		d.i++
		d.space()
		v, ok := d.value(depth)
		if !ok {
			return nil, false
		}
		m[k] = v
		end, ok := d.separator('}')
		if !ok {
			return nil, false
		}
		if end {
			return m, true
		}
	}
}

// separator reads what follows a member or an element: a comma (end
// false) or the closer (end true); anything else is not ok.
func (d *docDecoder) separator(closer byte) (end, ok bool) {
	d.space()
	if d.i >= len(d.b) {
		return false, false
	}
	switch d.b[d.i] {
	case ',':
		d.i++
		return false, true
	case closer:
		d.i++
		return true, true
	}
	return false, false
}

func (d *docDecoder) array(depth int) (any, bool) {
	if depth > maxFastDepth {
		return nil, false
	}
	d.i++ // '['
	out := []any{}
	d.space()
	if d.i < len(d.b) && d.b[d.i] == ']' {
		d.i++
		return out, true
	}
	for {
		d.space()
		v, ok := d.value(depth)
		if !ok {
			return nil, false
		}
		out = append(out, v)
		end, ok := d.separator(']')
		if !ok {
			return nil, false
		}
		if end {
			return out, true
		}
	}
}

// str takes a string without escapes whose bytes json.Unmarshal keeps as
// they are (no control character, valid UTF-8).
func (d *docDecoder) str() (string, bool) {
	d.i++ // '"'
	start, ascii := d.i, true
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			s := d.b[start:d.i]
			d.i++
			if !ascii && !utf8.Valid(s) {
				return "", false
			}
			return string(s), true
		case c == '\\' || c < 0x20:
			return "", false
		case c >= utf8.RuneSelf:
			ascii = false
		}
		d.i++
	}
	return "", false
}

// number takes a number of JSON's grammar as a float64 (json.Unmarshal's
// strconv.ParseFloat); one out of range is not taken.
func (d *docDecoder) number() (any, bool) {
	start := d.i
	if d.b[d.i] == '-' {
		d.i++
	}
	digits := func() int {
		n := 0
		for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
			d.i++
			n++
		}
		return n
	}
	switch {
	case d.i < len(d.b) && d.b[d.i] == '0':
		d.i++
	case digits() == 0:
		return nil, false
	}
	if d.i < len(d.b) && d.b[d.i] == '.' {
		d.i++
		if digits() == 0 {
			return nil, false
		}
	}
	if d.i < len(d.b) && (d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		d.i++
		if d.i < len(d.b) && (d.b[d.i] == '+' || d.b[d.i] == '-') {
			d.i++
		}
		if digits() == 0 {
			return nil, false
		}
	}
	f, err := strconv.ParseFloat(string(d.b[start:d.i]), 64)
	if err != nil {
		return nil, false
	}
	return f, true
}
