package readmodel

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/sluicehq/sluice/shared/envelope"
)

// Document builds the body of an instance document: the full state (a JSON
// object; ignored for tombstones) with the Meta fields set on top. A
// tombstone (m.Deleted) carries only the Meta fields. The document is
// compact, its members sorted by name; of a name the state repeats the last
// wins, as encoding/json decoded it; so the same meta and state give the
// same bytes.
func Document(m Meta, state json.RawMessage) ([]byte, error) {
	var b DocBuilder
	return b.Append(nil, m, state)
}

// SplitDocument is the inverse of Document: it returns the Meta fields and
// the state (the document without them; {} for tombstones).
func SplitDocument(source []byte) (Meta, json.RawMessage, error) {
	var b DocBuilder
	return b.Split(source)
}

// DocBuilder is Document and SplitDocument with their buffers kept from one
// call to the next: each document is decoded once, into a list of members
// (no map, no second encoding of the meta fields), and written once. The
// zero value is ready to use; a DocBuilder is not safe for concurrent use.
type DocBuilder struct {
	dec     jsontext.Decoder
	in      bytes.Buffer
	members []member
	scratch []byte // unquoted names and encoded meta values
}

// member is one member of an object: its name unquoted and quoted, and its
// value (raw JSON, compacted when written). They are slices of the input
// or of scratch, which is only appended to within a call.
type member struct{ name, qname, value []byte }

// Append appends the document of m and state (Document) to dst.
func (b *DocBuilder) Append(dst []byte, m Meta, state json.RawMessage) ([]byte, error) {
	b.members, b.scratch = b.members[:0], b.scratch[:0]
	if !m.Deleted && len(state) > 0 {
		if _, err := b.readObject(state); err != nil {
			return dst, fmt.Errorf("readmodel: state is not a JSON object: %w", err)
		}
	}
	if err := b.addMeta(m); err != nil {
		return dst, err
	}
	return b.write(dst)
}

// Split returns the Meta fields of source and its state (SplitDocument).
func (b *DocBuilder) Split(source []byte) (Meta, json.RawMessage, error) {
	var m Meta
	b.members, b.scratch = b.members[:0], b.scratch[:0]
	isNull, err := b.readObject(source)
	if err != nil {
		return m, nil, fmt.Errorf("readmodel: document: %w", err)
	}
	if isNull {
		return m, json.RawMessage("null"), nil
	}
	state := b.members[:0]
	for _, mb := range b.members {
		reserved, err := b.setMeta(&m, mb)
		if err != nil {
			return m, nil, fmt.Errorf("readmodel: document: %w", err)
		}
		if !reserved {
			state = append(state, mb)
		}
	}
	b.members = state
	out, err := b.write(nil)
	return m, out, err
}

// readObject appends the members of the JSON object in to b.members; it
// reports null, which it takes as an object without members.
func (b *DocBuilder) readObject(in []byte) (isNull bool, err error) {
	b.in.Reset()
	b.in.Write(in)
	// As encoding/json v1 was: duplicate names and invalid UTF-8 are
	// accepted (the runtime's parse step refuses invalid text first).
	b.dec.Reset(&b.in, jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	tok, err := b.dec.ReadToken()
	if err != nil {
		return false, eofUnexpected(err)
	}
	switch tok.Kind() {
	case 'n':
		return true, b.end()
	case '{':
	default:
		return false, fmt.Errorf("a JSON %v, not an object", tok.Kind())
	}
	for b.dec.PeekKind() != '}' {
		qn, err := b.dec.ReadValue()
		if err != nil {
			return false, eofUnexpected(err)
		}
		qnEnd := int(b.dec.InputOffset())
		qname := in[qnEnd-len(qn) : qnEnd : qnEnd]
		v, err := b.dec.ReadValue()
		if err != nil {
			return false, eofUnexpected(err)
		}
		vEnd := int(b.dec.InputOffset())
		name := qname[1 : len(qname)-1]
		if bytes.IndexByte(name, '\\') >= 0 {
			at := len(b.scratch)
			// The decoder checked the name; the only error left is
			// invalid text, which becomes U+FFFD as encoding/json did.
			b.scratch, _ = jsontext.AppendUnquote(b.scratch, qname)
			name = b.scratch[at:len(b.scratch):len(b.scratch)]
		}
		b.members = append(b.members, member{name: name, qname: qname, value: in[vEnd-len(v) : vEnd : vEnd]})
	}
	if _, err := b.dec.ReadToken(); err != nil {
		return false, eofUnexpected(err)
	}
	return false, b.end()
}

// end checks that nothing but white space follows the value read.
func (b *DocBuilder) end() error {
	if _, err := b.dec.ReadToken(); err != io.EOF {
		if err == nil {
			err = errors.New("data after the top-level value")
		}
		return err
	}
	return nil
}

func eofUnexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// addMeta appends the Meta fields as members, after the state's, so that
// they win over a state member of the same name. Names and values are
// written to scratch.
func (b *DocBuilder) addMeta(m Meta) error {
	str := func(qname, s string) {
		// Invalid UTF-8 becomes U+FFFD, as encoding/json wrote it.
		b.add(qname, func(dst []byte) []byte { dst, _ = jsontext.AppendQuote(dst, s); return dst })
	}
	ts := func(qname string, t envelope.Timestamp) error {
		v, err := t.MarshalJSON()
		if err != nil {
			return fmt.Errorf("readmodel: meta %s: %w", qname, err)
		}
		b.add(qname, func(dst []byte) []byte { return append(dst, v...) })
		return nil
	}
	str(`"db"`, m.DB)
	str(`"class"`, m.Class)
	str(`"instance_id"`, m.InstanceID)
	b.add(`"sequence_number"`, func(dst []byte) []byte { return strconv.AppendInt(dst, m.SequenceNumber, 10) })
	str(`"event_id"`, m.EventID)
	if err := ts(`"created_at"`, m.CreatedAt); err != nil {
		return err
	}
	if err := ts(`"updated_at"`, m.UpdatedAt); err != nil {
		return err
	}
	b.add(`"deleted"`, func(dst []byte) []byte { return strconv.AppendBool(dst, m.Deleted) })
	return nil
}

// add appends a member of quoted name qname whose value value appends to
// scratch.
func (b *DocBuilder) add(qname string, value func([]byte) []byte) {
	at := len(b.scratch)
	b.scratch = append(b.scratch, qname...)
	q := b.scratch[at:len(b.scratch):len(b.scratch)]
	at = len(b.scratch)
	b.scratch = value(b.scratch)
	b.members = append(b.members, member{name: q[1 : len(q)-1], qname: q, value: b.scratch[at:len(b.scratch):len(b.scratch)]})
}

// setMeta sets the Meta field a reserved member names, as encoding/json
// decoded it (null leaves the field unset), and reports whether the member
// is reserved.
func (b *DocBuilder) setMeta(m *Meta, mb member) (bool, error) {
	var err error
	switch string(mb.name) {
	case "db":
		err = b.setString(&m.DB, mb)
	case "class":
		err = b.setString(&m.Class, mb)
	case "instance_id":
		err = b.setString(&m.InstanceID, mb)
	case "event_id":
		err = b.setString(&m.EventID, mb)
	case "sequence_number":
		if string(mb.value) != "null" {
			m.SequenceNumber, err = strconv.ParseInt(string(mb.value), 10, 64)
		}
	case "created_at":
		err = m.CreatedAt.UnmarshalJSON(mb.value)
	case "updated_at":
		err = m.UpdatedAt.UnmarshalJSON(mb.value)
	case "deleted":
		switch string(mb.value) {
		case "true":
			m.Deleted = true
		case "false":
			m.Deleted = false
		case "null":
		default:
			err = errors.New("want a boolean")
		}
	default:
		return false, nil
	}
	if err != nil {
		return true, fmt.Errorf("%s: %w", mb.name, err)
	}
	return true, nil
}

func (b *DocBuilder) setString(dst *string, mb member) error {
	v := mb.value
	switch {
	case string(v) == "null":
		return nil
	case len(v) < 2 || v[0] != '"':
		return errors.New("want a string")
	case bytes.IndexByte(v, '\\') < 0:
		*dst = string(v[1 : len(v)-1])
		return nil
	}
	at := len(b.scratch)
	// Checked by the decoder: invalid text becomes U+FFFD, as encoding/json
	// decoded it.
	b.scratch, _ = jsontext.AppendUnquote(b.scratch, v)
	*dst = string(b.scratch[at:])
	return nil
}

// write appends the members to dst as one compact object, sorted by name,
// the last member of a name winning. Names are written as quoted in the
// input; values are compacted in place (jsontext.Value.Compact, which
// leaves strings and numbers as they are written, like json.Compact).
func (b *DocBuilder) write(dst []byte) ([]byte, error) {
	ms := b.members
	slices.SortStableFunc(ms, func(x, y member) int { return bytes.Compare(x.name, y.name) })
	need := 2
	for _, mb := range ms {
		need += len(mb.qname) + len(mb.value) + 2
	}
	dst = slices.Grow(dst, need) // one allocation at most: compacting only shrinks
	start := len(dst)
	dst = append(dst, '{')
	for i, mb := range ms {
		if i+1 < len(ms) && bytes.Equal(mb.name, ms[i+1].name) {
			continue
		}
		if len(dst) > start+1 {
			dst = append(dst, ',')
		}
		dst = append(dst, mb.qname...)
		dst = append(dst, ':')
		at := len(dst)
		dst = append(dst, mb.value...)
		v := jsontext.Value(dst[at:])
		if err := v.Compact(); err != nil {
			return dst[:start], err
		}
		dst = append(dst[:at], v...) // v is dst[at:] shortened, unless Compact moved it
	}
	return append(dst, '}'), nil
}
