package pgarray_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sluicehq/sluice/shared/pgarray"
)

// wireCase is an array parameter and the plain slices pgx would send
// instead.
type wireCase struct {
	name string
	oid  uint32
	as   any   // the pgarray value
	bin  any   // the plain slice whose binary encoding as must equal; nil: as fails in binary, as the plain slice does
	text any   // the plain slice whose text encoding as must equal
	sent int16 // the format pgx sends the parameter in
}

// TestWire checks that each array parameter type sends the bytes pgx
// sends for the plain slice it replaces (through pgtype.FlatArray), in
// both formats and in the format pgx picks for a statement's parameter,
// including NULL arrays, empty arrays, NULL elements, text that needs
// quoting in the text format, and uuid[] given as text in and out of the
// canonical form; and that the binary encoding does not allocate per
// element (the reason for the types), nor the text encoding more than the
// plain slice's.
func TestWire(t *testing.T) {
	for _, tc := range wireCases() {
		t.Run(tc.name, func(t *testing.T) {
			m := pgtype.NewMap()
			for _, f := range []struct {
				code  int16
				plain any
			}{{pgtype.BinaryFormatCode, tc.bin}, {pgtype.TextFormatCode, tc.text}} {
				got, err := m.Encode(tc.oid, f.code, tc.as, nil)
				if f.plain == nil {
					if err == nil {
						t.Fatalf("format %d: encoded %q, want the failure of the plain slice", f.code, got)
					}
					continue
				}
				if err != nil {
					t.Fatalf("format %d: %v", f.code, err)
				}
				want, err := m.Encode(tc.oid, f.code, f.plain, nil)
				if err != nil {
					t.Fatalf("format %d: plain slice: %v", f.code, err)
				}
				if !bytes.Equal(got, want) || (got == nil) != (want == nil) {
					t.Fatalf("format %d: encoded %q, want %q", f.code, got, want)
				}
			}
			sd := &pgconn.StatementDescription{ParamOIDs: []uint32{tc.oid}}
			var eqb pgx.ExtendedQueryBuilder
			if err := eqb.Build(m, sd, []any{tc.as}); err != nil {
				t.Fatal(err)
			}
			if eqb.ParamFormats[0] != tc.sent {
				t.Fatalf("sent in format %d, want %d", eqb.ParamFormats[0], tc.sent)
			}
			buf := make([]byte, 0, 1<<14)
			allocs := testing.AllocsPerRun(20, func() {
				if _, err := m.Encode(tc.oid, tc.sent, tc.as, buf[:0]); err != nil {
					t.Fatal(err)
				}
			})
			switch plain := testing.AllocsPerRun(20, func() {
				_, _ = m.Encode(tc.oid, tc.sent, tc.text, buf[:0])
			}); {
			case tc.sent == pgtype.TextFormatCode && allocs > plain: // pgx's text arrays allocate per element
				t.Errorf("text encoding allocates %.0f times, the plain slice's %.0f", allocs, plain)
			case tc.sent == pgtype.BinaryFormatCode && allocs > 2: // the interface holding the array, its dimensions
				t.Errorf("binary encoding allocates %.0f times, want at most 2 whatever the length", allocs)
			}
		})
	}
}

func wireCases() []wireCase {
	const bin, txt = pgtype.BinaryFormatCode, pgtype.TextFormatCode
	big := make([]string, 64)
	ids := make([]string, 64)
	uuids := make([]pgtype.UUID, 64)
	ints := make([]int64, 64)
	int4s := make([]int32, 64)
	bools := make([]bool, 64)
	blobs := make([][]byte, 64)
	times := make([]time.Time, 64)
	at := time.Date(2026, 11, 28, 17, 0, 0, 123456000, time.UTC)
	for i := range big {
		big[i] = "handler-" + string(rune('a'+i%26))
		for j := range uuids[i].Bytes {
			uuids[i].Bytes[j] = byte(i*16 + j*7)
		}
		uuids[i].Valid = true
		b := uuids[i].Bytes
		ids[i] = fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
		ints[i], int4s[i], bools[i] = int64(i)<<40-7, int32(i)<<20-3, i%3 == 0
		blobs[i] = bytes.Repeat([]byte{byte(i)}, 32)
		times[i] = at.Add(time.Duration(i) * time.Hour)
	}
	var tok [16]byte
	for i := range tok {
		tok[i] = byte(i * 17)
	}
	quoted := []string{"projection-a", "é\"q\\,{}", "", "NULL"}
	upper := []string{strings.ToUpper(ids[0]), ids[1]}
	odd := []string{ids[0], strings.ReplaceAll(ids[1], "-", "")} // Postgres reads it, the binary path does not
	return []wireCase{
		{"text", pgtype.TextArrayOID, pgarray.Text(quoted), quoted, quoted, bin},
		{"text empty", pgtype.TextArrayOID, pgarray.Text{}, []string{}, []string{}, bin},
		{"text nil", pgtype.TextArrayOID, pgarray.Text(nil), []string(nil), []string(nil), bin},
		{"text 64", pgtype.TextArrayOID, pgarray.Text(big), big, big, bin},
		{"text as uuid", pgtype.UUIDArrayOID, pgarray.Text(ids), nil, ids, txt},
		{"bigint", pgtype.Int8ArrayOID, pgarray.Int8{0, 1, 255, 256, -7, 1 << 62}, []int64{0, 1, 255, 256, -7, 1 << 62}, []int64{0, 1, 255, 256, -7, 1 << 62}, bin},
		{"bigint nil", pgtype.Int8ArrayOID, pgarray.Int8(nil), []int64(nil), []int64(nil), bin},
		{"bigint 64", pgtype.Int8ArrayOID, pgarray.Int8(ints), ints, ints, bin},
		{"integer", pgtype.Int4ArrayOID, pgarray.Int4{0, -1, 1 << 30}, []int32{0, -1, 1 << 30}, []int32{0, -1, 1 << 30}, bin},
		{"integer empty", pgtype.Int4ArrayOID, pgarray.Int4{}, []int32{}, []int32{}, bin},
		{"integer 64", pgtype.Int4ArrayOID, pgarray.Int4(int4s), int4s, int4s, bin},
		{"boolean", pgtype.BoolArrayOID, pgarray.Bool{true, false}, []bool{true, false}, []bool{true, false}, bin},
		{"boolean nil", pgtype.BoolArrayOID, pgarray.Bool(nil), []bool(nil), []bool(nil), bin},
		{"boolean 64", pgtype.BoolArrayOID, pgarray.Bool(bools), bools, bools, bin},
		{"boolean with NULL", pgtype.BoolArrayOID, pgarray.NullBool{{Bool: true, Valid: true}, {}, {Valid: true}},
			[]pgtype.Bool{{Bool: true, Valid: true}, {}, {Valid: true}}, []pgtype.Bool{{Bool: true, Valid: true}, {}, {Valid: true}}, bin},
		{"uuid with NULL", pgtype.UUIDArrayOID, pgarray.UUID{{Bytes: tok, Valid: true}, {}}, []pgtype.UUID{{Bytes: tok, Valid: true}, {}},
			[]pgtype.UUID{{Bytes: tok, Valid: true}, {}}, bin},
		{"uuid 64", pgtype.UUIDArrayOID, pgarray.UUID(uuids), uuids, uuids, bin},
		{"uuid text 64", pgtype.UUIDArrayOID, pgarray.UUIDText(ids), uuids, ids, bin},
		{"uuid text upper case", pgtype.UUIDArrayOID, pgarray.UUIDText(upper), uuids[:2], upper, bin},
		{"uuid text not canonical", pgtype.UUIDArrayOID, pgarray.UUIDText(odd), nil, odd, txt},
		{"uuid text empty", pgtype.UUIDArrayOID, pgarray.UUIDText{}, []pgtype.UUID{}, []string{}, bin},
		{"uuid text nil", pgtype.UUIDArrayOID, pgarray.UUIDText(nil), []pgtype.UUID(nil), []string(nil), bin},
		{"bytea with NULL", pgtype.ByteaArrayOID, pgarray.Bytea{{1, 2, 0xff}, nil, {}}, [][]byte{{1, 2, 0xff}, nil, {}}, [][]byte{{1, 2, 0xff}, nil, {}}, bin},
		{"bytea 64", pgtype.ByteaArrayOID, pgarray.Bytea(blobs), blobs, blobs, bin},
		{"timestamptz", pgtype.TimestamptzArrayOID, pgarray.Timestamptz{at, at.In(time.FixedZone("x", 3600)), {}},
			[]time.Time{at, at.In(time.FixedZone("x", 3600)), {}}, []time.Time{at, at.In(time.FixedZone("x", 3600)), {}}, bin},
		{"timestamptz 64", pgtype.TimestamptzArrayOID, pgarray.Timestamptz(times), times, times, bin},
	}
}
