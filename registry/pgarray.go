package registry

import "github.com/jackc/pgx/v5/pgtype"

// The batch statements take their inputs as array parameters. pgx sends
// a []string, []int64, []pgtype.Bool or []pgtype.UUID through
// pgtype.FlatArray, whose Index returns each element as an interface: one
// allocation per element and array (16 to 24 bytes), a sixth of the
// registry client's CPU per claimed row. The types below are the same
// arrays through pgx's own extension points — pgtype.ArrayGetter, and the
// element's Valuer interface (TextValuer, Int64Valuer, BoolValuer,
// UUIDValuer) on a pointer to the element: Index returns that pointer,
// which an interface holds without allocating, and pgx encodes the value
// it yields with the same codec, in the same format, as the element
// itself. A nil array is NULL, as for FlatArray.

// textArray is a text[] parameter.
type textArray []string

// textElem is one element of a textArray.
type textElem string

// TextValue implements pgtype.TextValuer.
func (e *textElem) TextValue() (pgtype.Text, error) {
	return pgtype.Text{String: string(*e), Valid: true}, nil
}

// Dimensions implements pgtype.ArrayGetter.
func (a textArray) Dimensions() []pgtype.ArrayDimension { return dims(len(a), a == nil) }

// Index implements pgtype.ArrayGetter.
func (a textArray) Index(i int) any { return (*textElem)(&a[i]) }

// IndexType implements pgtype.ArrayGetter.
func (a textArray) IndexType() any { return (*textElem)(nil) }

// int8Array is a bigint[] parameter.
type int8Array []int64

// int8Elem is one element of an int8Array.
type int8Elem int64

// Int64Value implements pgtype.Int64Valuer.
func (e *int8Elem) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: int64(*e), Valid: true}, nil
}

// Dimensions implements pgtype.ArrayGetter.
func (a int8Array) Dimensions() []pgtype.ArrayDimension { return dims(len(a), a == nil) }

// Index implements pgtype.ArrayGetter.
func (a int8Array) Index(i int) any { return (*int8Elem)(&a[i]) }

// IndexType implements pgtype.ArrayGetter.
func (a int8Array) IndexType() any { return (*int8Elem)(nil) }

// boolArray is a boolean[] parameter; an invalid element is NULL.
type boolArray []pgtype.Bool

// boolElem is one element of a boolArray.
type boolElem pgtype.Bool

// BoolValue implements pgtype.BoolValuer.
func (e *boolElem) BoolValue() (pgtype.Bool, error) { return pgtype.Bool(*e), nil }

// Dimensions implements pgtype.ArrayGetter.
func (a boolArray) Dimensions() []pgtype.ArrayDimension { return dims(len(a), a == nil) }

// Index implements pgtype.ArrayGetter.
func (a boolArray) Index(i int) any { return (*boolElem)(&a[i]) }

// IndexType implements pgtype.ArrayGetter.
func (a boolArray) IndexType() any { return (*boolElem)(nil) }

// uuidArray is a uuid[] parameter; an invalid element is NULL.
type uuidArray []pgtype.UUID

// uuidElem is one element of a uuidArray.
type uuidElem pgtype.UUID

// UUIDValue implements pgtype.UUIDValuer.
func (e *uuidElem) UUIDValue() (pgtype.UUID, error) { return pgtype.UUID(*e), nil }

// Dimensions implements pgtype.ArrayGetter.
func (a uuidArray) Dimensions() []pgtype.ArrayDimension { return dims(len(a), a == nil) }

// Index implements pgtype.ArrayGetter.
func (a uuidArray) Index(i int) any { return (*uuidElem)(&a[i]) }

// IndexType implements pgtype.ArrayGetter.
func (a uuidArray) IndexType() any { return (*uuidElem)(nil) }

// dims is the dimensions of a one-dimensional array of n elements, or nil
// (NULL) for a nil slice.
func dims(n int, isNil bool) []pgtype.ArrayDimension {
	if isNil {
		return nil
	}
	return []pgtype.ArrayDimension{{Length: int32(n), LowerBound: 1}}
}
