// Package pgarray provides one-dimensional Postgres array parameters for
// pgx that send the bytes pgx sends for the plain Go slice, without an
// allocation per element.
//
// pgx sends a []string, []int64, []bool, [][]byte, []time.Time, … through
// pgtype.FlatArray, whose Index returns each element as an interface: one
// allocation per element and array (16 to 24 bytes). The types here are
// the same arrays through pgx's own extension points — pgtype.ArrayGetter,
// and the element's Valuer interface (TextValuer, Int64Valuer, BoolValuer,
// UUIDValuer, BytesValuer, TimestamptzValuer) on a pointer to the element:
// Index returns that pointer, which an interface holds without
// allocating, and pgx encodes the value it yields with the same codec, in
// the same format, as the element itself. What they keep: the bytes on
// the wire equal those of the plain slice in both formats (a nil slice is
// NULL, an empty one '{}'), and the binary encoding allocates the same
// whatever the length (pgarray_test.go checks both for every type).
//
// A slice converts to its type without a copy (pgarray.Text(ids)), and
// append works on the types, so a statement's argument struct can hold
// them directly. They need the extended protocol (pgx's default, and every
// exec mode but the simple protocol): the server's description of the
// statement gives the array's type; under the simple protocol pgx finds no
// encoding for them.
package pgarray

import (
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// Text is a text[] parameter.
type Text []string

// textElem is one element of a Text.
type textElem string

// TextValue implements pgtype.TextValuer.
func (e *textElem) TextValue() (pgtype.Text, error) {
	return pgtype.Text{String: string(*e), Valid: true}, nil
}

// Dimensions implements pgtype.ArrayGetter.
func (a Text) Dimensions() []pgtype.ArrayDimension { return dims(len(a), a == nil) }

// Index implements pgtype.ArrayGetter.
func (a Text) Index(i int) any { return (*textElem)(&a[i]) }

// IndexType implements pgtype.ArrayGetter.
func (a Text) IndexType() any { return (*textElem)(nil) }

// Int8 is a bigint[] parameter.
type Int8 []int64

// int8Elem is one element of an Int8.
type int8Elem int64

// Int64Value implements pgtype.Int64Valuer.
func (e *int8Elem) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: int64(*e), Valid: true}, nil
}

// Dimensions implements pgtype.ArrayGetter.
func (a Int8) Dimensions() []pgtype.ArrayDimension { return dims(len(a), a == nil) }

// Index implements pgtype.ArrayGetter.
func (a Int8) Index(i int) any { return (*int8Elem)(&a[i]) }

// IndexType implements pgtype.ArrayGetter.
func (a Int8) IndexType() any { return (*int8Elem)(nil) }

// Int4 is an integer[] (int4[]) parameter.
type Int4 []int32

// int4Elem is one element of an Int4.
type int4Elem int32

// Int64Value implements pgtype.Int64Valuer.
func (e *int4Elem) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: int64(*e), Valid: true}, nil
}

// Dimensions implements pgtype.ArrayGetter.
func (a Int4) Dimensions() []pgtype.ArrayDimension { return dims(len(a), a == nil) }

// Index implements pgtype.ArrayGetter.
func (a Int4) Index(i int) any { return (*int4Elem)(&a[i]) }

// IndexType implements pgtype.ArrayGetter.
func (a Int4) IndexType() any { return (*int4Elem)(nil) }

// Bool is a boolean[] parameter without NULL elements.
type Bool []bool

// boolElem is one element of a Bool.
type boolElem bool

// BoolValue implements pgtype.BoolValuer.
func (e *boolElem) BoolValue() (pgtype.Bool, error) {
	return pgtype.Bool{Bool: bool(*e), Valid: true}, nil
}

// Dimensions implements pgtype.ArrayGetter.
func (a Bool) Dimensions() []pgtype.ArrayDimension { return dims(len(a), a == nil) }

// Index implements pgtype.ArrayGetter.
func (a Bool) Index(i int) any { return (*boolElem)(&a[i]) }

// IndexType implements pgtype.ArrayGetter.
func (a Bool) IndexType() any { return (*boolElem)(nil) }

// NullBool is a boolean[] parameter; an invalid element is NULL.
type NullBool []pgtype.Bool

// nullBoolElem is one element of a NullBool.
type nullBoolElem pgtype.Bool

// BoolValue implements pgtype.BoolValuer.
func (e *nullBoolElem) BoolValue() (pgtype.Bool, error) { return pgtype.Bool(*e), nil }

// Dimensions implements pgtype.ArrayGetter.
func (a NullBool) Dimensions() []pgtype.ArrayDimension { return dims(len(a), a == nil) }

// Index implements pgtype.ArrayGetter.
func (a NullBool) Index(i int) any { return (*nullBoolElem)(&a[i]) }

// IndexType implements pgtype.ArrayGetter.
func (a NullBool) IndexType() any { return (*nullBoolElem)(nil) }

// UUID is a uuid[] parameter; an invalid element is NULL.
type UUID []pgtype.UUID

// uuidElem is one element of a UUID.
type uuidElem pgtype.UUID

// UUIDValue implements pgtype.UUIDValuer.
func (e *uuidElem) UUIDValue() (pgtype.UUID, error) { return pgtype.UUID(*e), nil }

// Dimensions implements pgtype.ArrayGetter.
func (a UUID) Dimensions() []pgtype.ArrayDimension { return dims(len(a), a == nil) }

// Index implements pgtype.ArrayGetter.
func (a UUID) Index(i int) any { return (*uuidElem)(&a[i]) }

// IndexType implements pgtype.ArrayGetter.
func (a UUID) IndexType() any { return (*uuidElem)(nil) }

// UUIDText is a uuid[] parameter given as text (event_ids). pgx cannot
// send a []string as uuid[] in binary: it tries, fails, formats the whole
// slice into the error (%#v: allocations per element), then sends it in
// the text format. A UUIDText whose elements are all canonical (8-4-4-4-12
// hex digits) goes in binary, as the []pgtype.UUID of the same values;
// any other goes in the text format exactly as the []string (Postgres
// parses, or refuses, each element as before).
type UUIDText []string

// uuidTextElem is one element of a UUIDText.
type uuidTextElem string

// errNotCanonical makes pgx fall back to the text format.
var errNotCanonical = errors.New("pgarray: uuid not in canonical form")

// UUIDValue implements pgtype.UUIDValuer (the binary format).
func (e *uuidTextElem) UUIDValue() (pgtype.UUID, error) {
	u, ok := parseCanonicalUUID(string(*e))
	if !ok {
		return pgtype.UUID{}, errNotCanonical
	}
	return pgtype.UUID{Bytes: u, Valid: true}, nil
}

// TextValue implements pgtype.TextValuer (the text format: the string as
// it is).
func (e *uuidTextElem) TextValue() (pgtype.Text, error) {
	return pgtype.Text{String: string(*e), Valid: true}, nil
}

// Dimensions implements pgtype.ArrayGetter.
func (a UUIDText) Dimensions() []pgtype.ArrayDimension { return dims(len(a), a == nil) }

// Index implements pgtype.ArrayGetter.
func (a UUIDText) Index(i int) any { return (*uuidTextElem)(&a[i]) }

// IndexType implements pgtype.ArrayGetter.
func (a UUIDText) IndexType() any { return (*uuidTextElem)(nil) }

// parseCanonicalUUID reads xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (hex
// digits of either case), the form Postgres reads to the same 16 bytes.
func parseCanonicalUUID(s string) (u [16]byte, ok bool) {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, false
	}
	j := 0
	for i := 0; i < 36; i += 2 {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			i++
		}
		hi, ok1 := hexVal(s[i])
		lo, ok2 := hexVal(s[i+1])
		if !ok1 || !ok2 {
			return u, false
		}
		u[j] = hi<<4 | lo
		j++
	}
	return u, true
}

func hexVal(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// Bytea is a bytea[] parameter; a nil element is NULL.
type Bytea [][]byte

// byteaElem is one element of a Bytea.
type byteaElem []byte

// BytesValue implements pgtype.BytesValuer.
func (e *byteaElem) BytesValue() ([]byte, error) { return []byte(*e), nil }

// Dimensions implements pgtype.ArrayGetter.
func (a Bytea) Dimensions() []pgtype.ArrayDimension { return dims(len(a), a == nil) }

// Index implements pgtype.ArrayGetter.
func (a Bytea) Index(i int) any { return (*byteaElem)(&a[i]) }

// IndexType implements pgtype.ArrayGetter.
func (a Bytea) IndexType() any { return (*byteaElem)(nil) }

// Timestamptz is a timestamptz[] parameter.
type Timestamptz []time.Time

// timestamptzElem is one element of a Timestamptz.
type timestamptzElem time.Time

// TimestamptzValue implements pgtype.TimestamptzValuer.
func (e *timestamptzElem) TimestamptzValue() (pgtype.Timestamptz, error) {
	return pgtype.Timestamptz{Time: time.Time(*e), Valid: true}, nil
}

// Dimensions implements pgtype.ArrayGetter.
func (a Timestamptz) Dimensions() []pgtype.ArrayDimension { return dims(len(a), a == nil) }

// Index implements pgtype.ArrayGetter.
func (a Timestamptz) Index(i int) any { return (*timestamptzElem)(&a[i]) }

// IndexType implements pgtype.ArrayGetter.
func (a Timestamptz) IndexType() any { return (*timestamptzElem)(nil) }

// dims is the dimensions of a one-dimensional array of n elements, or nil
// (NULL) for a nil slice.
func dims(n int, isNil bool) []pgtype.ArrayDimension {
	if isNil {
		return nil
	}
	return []pgtype.ArrayDimension{{Length: int32(n), LowerBound: 1}}
}
