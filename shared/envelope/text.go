package envelope

import (
	"bytes"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// Text rules (docs/architecture.md#the-envelope "UTF-8", #aggregate-identity "invalid text", issue 26.2):
// JSON text must be valid UTF-8, and a \u escape of a UTF-16 surrogate
// (U+D800..U+DFFF) must be a high surrogate immediately followed by a low
// one. Decoders such as encoding/json replace both faults with U+FFFD, which
// would turn two different inputs ("\udbff" and "\ufffd") into one id, key
// or value; CheckJSONText refuses them instead, before anything is decoded.

// TextFault names what is wrong with a text that CheckJSONText refuses.
type TextFault string

const (
	// FaultInvalidUTF8: a byte sequence that is not UTF-8 (including the
	// UTF-8 encoding of a surrogate, ED A0 80..ED BF BF).
	FaultInvalidUTF8 TextFault = "invalid_utf8"
	// FaultLoneSurrogate: a \uD800..\uDFFF escape that is not a high
	// surrogate escape followed by a low surrogate escape.
	FaultLoneSurrogate TextFault = "lone_surrogate"
)

// TextRule is the rule reported as ValidationError.Limit for invalid text.
const TextRule = "UTF-8, no lone surrogate escape"

// CheckJSONText checks that the JSON text b is valid UTF-8 and holds no
// lone surrogate escape. It reads only the raw bytes (utf8.Valid and a scan
// of the backslash escapes), so it is cheap on the fast path; only when it
// finds a fault does it decode b up to the fault to name where it is. The
// error is a *ValidationError with Code CodeInvalidText, Field the dotted
// path of the offending value or key ("data.items[2].name"; "" when the
// fault is outside any member), prefixed by base when base is not "".
func CheckJSONText(b []byte, base string) error {
	off, fault, ok := ScanJSONText(b)
	if ok {
		return nil
	}
	return textError(b, base, off, fault)
}

// ScanJSONText reports the first fault of the JSON text b: its byte offset
// and kind, with ok false; ok is true when b is valid UTF-8 without a lone
// surrogate escape. It does not check that b is well-formed JSON: a
// backslash can only stand inside a string in well-formed JSON, so every
// backslash starts an escape.
func ScanJSONText(b []byte) (offset int, fault TextFault, ok bool) {
	if !utf8.Valid(b) {
		for i := 0; i < len(b); {
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n <= 1 {
				return i, FaultInvalidUTF8, false
			}
			i += n
		}
	}
	for i := 0; i < len(b); {
		j := bytes.IndexByte(b[i:], '\\')
		if j < 0 {
			return 0, "", true
		}
		i += j
		if i+1 >= len(b) || b[i+1] != 'u' {
			i += 2 // a two-character escape (or a truncated one: not ours to judge)
			continue
		}
		v, isHex := hex4(b, i+2)
		switch {
		case !isHex:
			i += 2
		case v >= 0xDC00 && v <= 0xDFFF:
			return i, FaultLoneSurrogate, false
		case v >= 0xD800 && v <= 0xDBFF:
			if i+7 < len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
				if w, ok := hex4(b, i+8); ok && w >= 0xDC00 && w <= 0xDFFF {
					i += 12
					continue
				}
			}
			return i, FaultLoneSurrogate, false
		default:
			i += 6
		}
	}
	return 0, "", true
}

// hex4 decodes the four hex digits at b[i:i+4].
func hex4(b []byte, i int) (int, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	v := 0
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | int(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | int(c-'a'+10)
		case c >= 'A' && c <= 'F':
			v = v<<4 | int(c-'A'+10)
		default:
			return 0, false
		}
	}
	return v, true
}

// textError builds the error for a fault at off: the slow path, which
// tokenizes b (leniently) until the token holding the fault to find its path.
func textError(b []byte, base string, off int, fault TextFault) error {
	path, inKey := textPath(b, off)
	field := joinPath(base, path)
	what := "a value"
	if inKey {
		what = "an object key"
	}
	var reason string
	switch fault {
	case FaultLoneSurrogate:
		reason = "holds a lone UTF-16 surrogate escape " + string(b[off:off+6]) + " in " + what +
			" at byte " + strconv.Itoa(off) + "; a \\uD800-\\uDBFF escape must be followed by a \\uDC00-\\uDFFF escape (invalid text is refused, never replaced by U+FFFD)"
	default:
		reason = "is not valid UTF-8: byte " + strconv.Itoa(off) + " (0x" + strconv.FormatUint(uint64(b[off]), 16) + ") in " + what +
			" does not start a UTF-8 sequence (invalid text is refused, never replaced by U+FFFD)"
	}
	return &ValidationError{Code: CodeInvalidText, Field: field, Limit: TextRule, Reason: reason, Fault: fault}
}

// textPath returns the path of the JSON token of b that contains byte off,
// and whether that token is an object key. A fault outside any member (or
// in input that is not JSON before it) gives the deepest path reached.
func textPath(b []byte, off int) (string, bool) {
	dec := jsontext.NewDecoder(bytes.NewReader(b), jsontext.AllowInvalidUTF8(true), jsontext.AllowDuplicateNames(true))
	for {
		kind := dec.PeekKind()
		if _, err := dec.ReadToken(); err != nil {
			if err == io.EOF {
				return "", false
			}
			return pointerPath(dec), false
		}
		if dec.InputOffset() > int64(off) {
			if kind != '"' {
				return pointerPath(dec), false
			}
			inKey := false
			if k, n := dec.StackIndex(dec.StackDepth()); k == '{' && n%2 == 1 {
				inKey = true
			}
			return pointerPath(dec), inKey
		}
	}
}

// pointerPath turns the decoder's current position into a dotted path:
// object members as ".name", array elements as "[i]".
func pointerPath(dec *jsontext.Decoder) string {
	var sb strings.Builder
	ptr := dec.StackPointer()
	depth := 1
	for tok := range ptr.Tokens() {
		if k, _ := dec.StackIndex(depth); k == '[' {
			sb.WriteString("[" + tok + "]")
		} else {
			if sb.Len() > 0 {
				sb.WriteByte('.')
			}
			sb.WriteString(tok)
		}
		depth++
	}
	return sb.String()
}

func joinPath(base, path string) string {
	switch {
	case base == "":
		return path
	case path == "":
		return base
	case path[0] == '[':
		return base + path
	default:
		return base + "." + path
	}
}

// CheckText checks a string that did not come from JSON text (a path
// segment, a header, a Go value) for valid UTF-8; field names it in the
// error (Code CodeInvalidText).
func CheckText(s, field string) error {
	if utf8.ValidString(s) {
		return nil
	}
	i := 0
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n <= 1 {
			break
		}
		i += n
	}
	return &ValidationError{Code: CodeInvalidText, Field: field, Limit: TextRule, Fault: FaultInvalidUTF8,
		Reason: "is not valid UTF-8: byte " + strconv.Itoa(i) + " (0x" + strconv.FormatUint(uint64(s[i]), 16) + ") does not start a UTF-8 sequence (invalid text is refused, never replaced by U+FFFD)"}
}
