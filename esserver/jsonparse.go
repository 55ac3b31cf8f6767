package esserver

import (
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// maxJSONDepth bounds nesting like Elasticsearch's parser does.
const maxJSONDepth = 1000

// jsonParser is a small, allocation-conscious JSON parser producing the
// same values as encoding/json with UseNumber.
//
// The strings without escapes and the numbers the parser returns are
// slices of data, so a value costs no copy of its own (one copy of the
// input instead of one per string), and the values keep all of data alive:
// parse what a value may outlive (a stored document's source) on its own.
type jsonParser struct {
	data  string
	pos   int
	depth int
}

type jsonSyntaxError struct {
	msg string
	pos int
}

func (e *jsonSyntaxError) Error() string { return e.msg }

func (p *jsonParser) errorf(format string, args ...any) error {
	return &jsonSyntaxError{msg: fmt.Sprintf(format, args...) + fmt.Sprintf(" at position [%d]", p.pos), pos: p.pos}
}

func (p *jsonParser) skipWS() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// parseJSON parses one JSON value from a copy of data.
func parseJSON(data []byte) (any, error) { return parseJSONString(string(data)) }

// parseJSONString parses one JSON value; the strings it returns slice data.
func parseJSONString(data string) (any, error) {
	p := &jsonParser{data: data}
	p.skipWS()
	if p.pos >= len(data) {
		return nil, p.errorf("Unexpected end-of-input: expected a JSON value")
	}
	v, err := p.value()
	if err != nil {
		return nil, err
	}
	p.skipWS()
	if p.pos < len(data) {
		return nil, p.errorf("Unexpected character ('%s' (code %d)): expected end of input", printable(data[p.pos]), data[p.pos])
	}
	return v, nil
}

func printable(c byte) string {
	if c < 0x20 || c >= 0x7f {
		return fmt.Sprintf("\\u%04x", c)
	}
	return string(c)
}

func (p *jsonParser) value() (any, error) {
	if p.pos >= len(p.data) {
		return nil, p.errorf("Unexpected end-of-input: expected a JSON value")
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		return p.str()
	case c == 't':
		return p.literal("true", true)
	case c == 'f':
		return p.literal("false", false)
	case c == 'n':
		return p.literal("null", nil)
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	default:
		return nil, p.errorf("Unexpected character ('%s' (code %d)): expected a valid value (JSON String, Number, Array, Object or token 'null', 'true' or 'false')", printable(c), c)
	}
}

func (p *jsonParser) literal(word string, v any) (any, error) {
	if len(p.data)-p.pos >= len(word) && p.data[p.pos:p.pos+len(word)] == word {
		p.pos += len(word)
		return v, nil
	}
	return nil, p.errorf("Unrecognized token: was expecting (JSON String, Number, Array, Object or token 'null', 'true' or 'false')")
}

func (p *jsonParser) number() (any, error) {
	start := p.pos
	if p.data[p.pos] == '-' {
		p.pos++
	}
	digits := func() int {
		n := 0
		for p.pos < len(p.data) && p.data[p.pos] >= '0' && p.data[p.pos] <= '9' {
			p.pos++
			n++
		}
		return n
	}
	if p.pos < len(p.data) && p.data[p.pos] == '0' {
		p.pos++
	} else if digits() == 0 {
		return nil, p.errorf("Unexpected character: expected digit after minus sign")
	}
	if p.pos < len(p.data) && p.data[p.pos] == '.' {
		p.pos++
		if digits() == 0 {
			return nil, p.errorf("Unexpected character: decimal point must be followed by a digit")
		}
	}
	if p.pos < len(p.data) && (p.data[p.pos] == 'e' || p.data[p.pos] == 'E') {
		p.pos++
		if p.pos < len(p.data) && (p.data[p.pos] == '+' || p.data[p.pos] == '-') {
			p.pos++
		}
		if digits() == 0 {
			return nil, p.errorf("Unexpected character: exponent indicator not followed by a digit")
		}
	}
	return json.Number(p.data[start:p.pos]), nil
}

func (p *jsonParser) str() (string, error) {
	p.pos++ // opening quote
	start := p.pos
	// Fast path: no escapes.
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		if c == '"' {
			s := p.data[start:p.pos]
			p.pos++
			if !utf8.ValidString(s) {
				return string([]rune(s)), nil
			}
			return s, nil
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return "", p.errorf("Illegal unquoted character ((CTRL-CHAR, code %d)): has to be escaped using backslash to be included in string value", c)
		}
		p.pos++
	}
	buf := make([]byte, 0, p.pos-start+16)
	buf = append(buf, p.data[start:p.pos]...)
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		switch {
		case c == '"':
			p.pos++
			if !utf8.Valid(buf) {
				return string([]rune(string(buf))), nil
			}
			return string(buf), nil
		case c < 0x20:
			return "", p.errorf("Illegal unquoted character ((CTRL-CHAR, code %d)): has to be escaped using backslash to be included in string value", c)
		case c == '\\':
			p.pos++
			if p.pos >= len(p.data) {
				return "", p.errorf("Unexpected end-of-input in character escape sequence")
			}
			e := p.data[p.pos]
			p.pos++
			switch e {
			case '"', '\\', '/':
				buf = append(buf, e)
			case 'b':
				buf = append(buf, '\b')
			case 'f':
				buf = append(buf, '\f')
			case 'n':
				buf = append(buf, '\n')
			case 'r':
				buf = append(buf, '\r')
			case 't':
				buf = append(buf, '\t')
			case 'u':
				r, ok := p.hex4()
				if !ok {
					return "", p.errorf("Unexpected character: expected a hex-digit for character escape sequence")
				}
				if utf16.IsSurrogate(r) {
					if p.pos+6 <= len(p.data) && p.data[p.pos] == '\\' && p.data[p.pos+1] == 'u' {
						p.pos += 2
						r2, ok := p.hex4()
						if !ok {
							return "", p.errorf("Unexpected character: expected a hex-digit for character escape sequence")
						}
						r = utf16.DecodeRune(r, r2)
					} else {
						r = utf8.RuneError
					}
				}
				buf = utf8.AppendRune(buf, r)
			default:
				return "", p.errorf("Unrecognized character escape '%s' (code %d)", printable(e), e)
			}
		default:
			buf = append(buf, c)
			p.pos++
		}
	}
	return "", p.errorf("Unexpected end-of-input: was expecting closing quote for a string value")
}

func (p *jsonParser) hex4() (rune, bool) {
	if p.pos+4 > len(p.data) {
		return 0, false
	}
	n, err := strconv.ParseUint(p.data[p.pos:p.pos+4], 16, 32)
	if err != nil {
		return 0, false
	}
	p.pos += 4
	return rune(n), true
}

func (p *jsonParser) object() (any, error) {
	p.depth++
	if p.depth > maxJSONDepth {
		return nil, p.errorf("Document nesting depth exceeds the maximum allowed (%d)", maxJSONDepth)
	}
	p.pos++ // {
	m := make(map[string]any, 8)
	p.skipWS()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		p.depth--
		return m, nil
	}
	for {
		p.skipWS()
		if p.pos >= len(p.data) {
			return nil, p.errorf("Unexpected end-of-input: expected close marker for Object")
		}
		if p.data[p.pos] != '"' {
			return nil, p.errorf("Unexpected character ('%s' (code %d)): was expecting double-quote to start field name", printable(p.data[p.pos]), p.data[p.pos])
		}
		k, err := p.str()
		if err != nil {
			return nil, err
		}
		p.skipWS()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			if p.pos >= len(p.data) {
				return nil, p.errorf("Unexpected end-of-input: was expecting a colon to separate field name and value")
			}
			return nil, p.errorf("Unexpected character ('%s' (code %d)): was expecting a colon to separate field name and value", printable(p.data[p.pos]), p.data[p.pos])
		}
		p.pos++
		p.skipWS()
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		if _, dup := m[k]; dup {
			return nil, p.errorf("Duplicate field '%s'", k)
		}
		m[k] = v
		p.skipWS()
		if p.pos >= len(p.data) {
			return nil, p.errorf("Unexpected end-of-input: expected close marker for Object")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case '}':
			p.pos++
			p.depth--
			return m, nil
		default:
			return nil, p.errorf("Unexpected character ('%s' (code %d)): was expecting comma to separate Object entries", printable(p.data[p.pos]), p.data[p.pos])
		}
	}
}

func (p *jsonParser) array() (any, error) {
	p.depth++
	if p.depth > maxJSONDepth {
		return nil, p.errorf("Document nesting depth exceeds the maximum allowed (%d)", maxJSONDepth)
	}
	p.pos++ // [
	a := make([]any, 0, 4)
	p.skipWS()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		p.depth--
		return a, nil
	}
	for {
		p.skipWS()
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		a = append(a, v)
		p.skipWS()
		if p.pos >= len(p.data) {
			return nil, p.errorf("Unexpected end-of-input: expected close marker for Array")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case ']':
			p.pos++
			p.depth--
			return a, nil
		default:
			return nil, p.errorf("Unexpected character ('%s' (code %d)): was expecting comma to separate Array entries", printable(p.data[p.pos]), p.data[p.pos])
		}
	}
}
