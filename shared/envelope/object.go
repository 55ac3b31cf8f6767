package envelope

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/go-json-experiment/json/jsontext"
)

// ObjectRule is what ScanObject checks of a JSON object beyond strict JSON,
// and what it reports of the object's top-level members.
type ObjectRule struct {
	// Field is the base of the path a text error names (CheckJSONText).
	Field string
	// Offset is the depth, counted from the scanned object (depth 1), of
	// the containers MaxDepth measures from: 0, the object itself is level
	// 1 (a data object, a merge patch); 1, each top-level member's value is
	// level 1 (an envelope, {"data": {…}}); 3, the members of the objects
	// in an array of a member ({"events": [{"data": {…}}]}).
	Offset int
	// MaxDepth bounds the nesting: an object or array at depth d is refused
	// when d-Offset > MaxDepth. It always applies (with Offset 0, a zero
	// MaxDepth refuses the object itself).
	MaxDepth int
	// OnKey, if not nil, is called with each top-level key in document
	// order, before its value is read; an error it returns ends the scan
	// and is ScanObject's error.
	OnKey func(key string) error
	// OnValue, if not nil, gets each top-level key with its value's bytes
	// once the value is complete: exactly what json.Unmarshal into a
	// map[string]json.RawMessage would hold, as a sub-slice of the input
	// with no spare capacity (appending to it never writes into the input).
	OnValue func(key string, value []byte)
}

// ObjectFault names why ScanObject refused a text that is valid UTF-8.
type ObjectFault uint8

const (
	// ObjectEmpty: the text holds no JSON value (nothing, or white space).
	ObjectEmpty ObjectFault = iota + 1
	// ObjectNotAnObject: the text starts with a JSON value that is not an
	// object.
	ObjectNotAnObject
	// ObjectSyntax: the text is not valid JSON (Err says where and why).
	ObjectSyntax
	// ObjectTruncated: the text ends inside the object (Err).
	ObjectTruncated
	// ObjectDuplicateKey: an object holds Key twice.
	ObjectDuplicateKey
	// ObjectTrailingData: another JSON value follows the object.
	ObjectTrailingData
	// ObjectTooDeep: an object or array nests deeper than MaxDepth.
	ObjectTooDeep
)

// ObjectError reports why ScanObject refused a text. Callers map it to
// their own errors (the envelope's ValidationError, the API's
// problem+json); its fields say everything they name.
type ObjectError struct {
	Fault ObjectFault
	// Member is the top-level key whose value holds the fault, "" when the
	// fault is in the object itself (a duplicate top-level key, trailing
	// data) or outside any member. For ObjectTooDeep it is the member being
	// read, or "" when none was yet.
	Member string
	// Key is the repeated key (ObjectDuplicateKey).
	Key string
	// MaxDepth is the rule's bound (ObjectTooDeep).
	MaxDepth int
	// Err is the tokenizer's error (ObjectSyntax, ObjectTruncated), without
	// its position prefix.
	Err error
}

func (e *ObjectError) Error() string {
	where := ""
	if e.Member != "" {
		where = fmt.Sprintf(" in member %q", e.Member)
	}
	switch e.Fault {
	case ObjectEmpty:
		return "no JSON value; want a JSON object"
	case ObjectNotAnObject:
		return "not a JSON object"
	case ObjectTruncated:
		return "unexpected end of JSON input" + where
	case ObjectDuplicateKey:
		return fmt.Sprintf("duplicate key %q%s", e.Key, where)
	case ObjectTrailingData:
		return "trailing data after the JSON object"
	case ObjectTooDeep:
		return fmt.Sprintf("nesting depth exceeds the limit of %d levels%s", e.MaxDepth, where)
	default:
		return fmt.Sprintf("not valid JSON%s: %v", where, e.Err)
	}
}

// ScanObject checks that b is exactly one JSON object in valid UTF-8 with
// no lone surrogate escape, no duplicate key at any level and no nesting
// beyond rule, in one pass of the jsontext tokenizer (encoding/json/v2's;
// never recursion over untrusted input), and reports its top-level members
// through rule's callbacks. It is the one strict object scanner of the
// module: Parse reads envelopes with it, the API its request bodies.
//
// Its error is a *ValidationError of Code CodeInvalidText for invalid text
// (checked first, CheckJSONText with base rule.Field), an *ObjectError for
// anything else wrong with the JSON, or OnKey's error.
func ScanObject(b []byte, rule ObjectRule) error {
	if err := CheckJSONText(b, rule.Field); err != nil {
		return err
	}
	s := getScanner()
	defer s.release()
	return s.scan(b, rule.Offset, rule.MaxDepth, func(name []byte) (string, error) {
		key := string(name)
		if rule.OnKey != nil {
			return key, rule.OnKey(key)
		}
		return key, nil
	}, rule.OnValue)
}

// objectScanner is a jsontext decoder reading from a bytes.Buffer, pooled
// (scanners): a decoder keeps the stacks and the duplicate-name
// namespaces it grew, so a scan of a few small objects allocates nothing
// once a pooled decoder has seen objects of their shape.
type objectScanner struct {
	dec jsontext.Decoder
	in  bytes.Buffer
}

// scanners pools objectScanners (getScanner, release).
var scanners = sync.Pool{New: func() any { return new(objectScanner) }}

// getScanner returns a scanner from the pool; release puts it back.
func getScanner() *objectScanner { return scanners.Get().(*objectScanner) }

// reset points s's decoder at b, read in place (a *bytes.Buffer is not
// copied). The text is checked before any scan, so AllowInvalidUTF8 only
// spares the tokenizer a second check; duplicate names are refused by
// default.
func (s *objectScanner) reset(b []byte) {
	s.in = *bytes.NewBuffer(b)
	s.dec.Reset(&s.in, jsontext.AllowInvalidUTF8(true))
}

// release drops s's reference to the input and returns s to the pool.
func (s *objectScanner) release() {
	s.reset(nil)
	scanners.Put(s)
}

// scan is ScanObject's scan of a text already checked by CheckJSONText.
// onKey gets each top-level name unquoted (a sub-slice of b when it has no
// escape; valid only during the call) and returns the key as the member
// name errors and onValue report, or an error that ends the scan.
func (s *objectScanner) scan(b []byte, offset, maxDepth int, onKey func(name []byte) (string, error), onValue func(key string, value []byte)) error {
	s.reset(b)
	dec := &s.dec
	switch dec.PeekKind() {
	case '{':
	case 0:
		if _, err := dec.ReadToken(); err != nil && err != io.EOF {
			return objectSyntaxError(err)
		}
		return &ObjectError{Fault: ObjectEmpty}
	default:
		if _, err := dec.ReadToken(); err != nil {
			return objectSyntaxError(err)
		}
		return &ObjectError{Fault: ObjectNotAnObject}
	}
	member := ""
	valStart := 0 // where the current top-level value starts (onValue)
	closed := false
	for {
		prev := int(dec.InputOffset())
		tok, err := dec.ReadToken()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return objectSyntaxError(err)
		}
		if closed {
			// the decoder reads a stream of values; b must hold one
			return &ObjectError{Fault: ObjectTrailingData}
		}
		depth := dec.StackDepth()
		closed = depth == 0
		if k := tok.Kind(); (k == '{' || k == '[') && depth-offset > maxDepth {
			return &ObjectError{Fault: ObjectTooDeep, Member: member, MaxDepth: maxDepth}
		}
		if depth != 1 {
			continue
		}
		// Inside the object: a name (odd count) starts a member, a value
		// (even count) completes one.
		if _, n := dec.StackIndex(1); n%2 == 1 {
			end := int(dec.InputOffset())
			if member, err = onKey(nameBytes(b, prev, end, tok)); err != nil {
				return err
			}
			valStart = valueStart(b, end)
		} else if n > 0 && onValue != nil {
			end := int(dec.InputOffset())
			onValue(member, b[valStart:end:end])
		}
	}
}

// nameBytes returns the unquoted object name tok, read from b[prev:end]
// (after white space and the ',' before it): the bytes between its
// quotes when it has no escape (no copy), else tok's string.
func nameBytes(b []byte, prev, end int, tok jsontext.Token) []byte {
	start := prev
	for start < end && b[start] != '"' {
		start++ // white space and the separating ','
	}
	raw := b[start:end]
	if len(raw) < 2 || raw[len(raw)-1] != '"' || bytes.IndexByte(raw, '\\') >= 0 {
		return []byte(tok.String())
	}
	return raw[1 : len(raw)-1]
}

// objectSyntaxError turns a jsontext error into an *ObjectError naming the
// top-level member it happened in.
func objectSyntaxError(err error) *ObjectError {
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

// valueStart returns the index of the value that follows an object key
// ending at i: past white space, the ':' and white space.
func valueStart(b []byte, i int) int {
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

// members splits the JSON object v, which a scan already accepted (valid
// text, well-formed, no duplicate key), into its members, as json.Unmarshal
// into a map[string]json.RawMessage would: each key unquoted, each value's
// bytes (a copy; the values share one array, each capacity-limited).
func (s *objectScanner) members(v []byte) (Metadata, error) {
	s.in = *bytes.NewBuffer(v)
	// Accepted already: the second read needs no duplicate-name check.
	s.dec.Reset(&s.in, jsontext.AllowInvalidUTF8(true), jsontext.AllowDuplicateNames(true))
	dec := &s.dec
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	m := Metadata{}
	arena := make([]byte, 0, len(v))
	for dec.PeekKind() == '"' {
		prev := int(dec.InputOffset())
		tok, err := dec.ReadToken()
		if err != nil {
			return nil, err
		}
		key := metadataKey(nameBytes(v, prev, int(dec.InputOffset()), tok))
		val, err := dec.ReadValue()
		if err != nil {
			return nil, err
		}
		start := len(arena)
		arena = append(arena, val...)
		m[key] = arena[start:len(arena):len(arena)]
	}
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '}' {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	return m, nil
}

// metadataKey returns name as a string, the well-known keys without an
// allocation.
func metadataKey(name []byte) string {
	switch string(name) {
	case MetaCommandID:
		return MetaCommandID
	case MetaCorrelationID:
		return MetaCorrelationID
	case MetaCausationID:
		return MetaCausationID
	case MetaKafkaTopic:
		return MetaKafkaTopic
	case MetaOrderingKey:
		return MetaOrderingKey
	case MetaTraceparent:
		return MetaTraceparent
	case MetaTracestate:
		return MetaTracestate
	case MetaPrincipal:
		return MetaPrincipal
	}
	return string(name)
}
