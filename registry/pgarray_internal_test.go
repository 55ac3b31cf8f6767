package registry

import (
	"bytes"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
)

// TestArrayParamsEncodeAsFlatArray checks that each array parameter type
// sends the bytes pgx sends for the plain slice it replaces (through
// pgtype.FlatArray), in both formats, including NULL arrays, empty arrays,
// NULL elements and text that needs quoting in the text format; and that
// its binary encoding does not allocate per element (the reason for the
// types).
func TestArrayParamsEncodeAsFlatArray(t *testing.T) {
	big := make([]string, 64)
	for i := range big {
		big[i] = "handler-" + string(rune('a'+i%26))
	}
	var tok [16]byte
	for i := range tok {
		tok[i] = byte(i * 17)
	}
	for _, tc := range []struct {
		name      string
		oid       uint32
		plain, as any
	}{
		{"text", pgtype.TextArrayOID, []string{"projection-a", "é\"q\\,{}", "", "NULL"}, textArray{"projection-a", "é\"q\\,{}", "", "NULL"}},
		{"text empty", pgtype.TextArrayOID, []string{}, textArray{}},
		{"text nil", pgtype.TextArrayOID, []string(nil), textArray(nil)},
		{"text 64", pgtype.TextArrayOID, big, textArray(big)},
		{"bigint", pgtype.Int8ArrayOID, []int64{0, 1, 255, 256, -7, 1 << 62}, int8Array{0, 1, 255, 256, -7, 1 << 62}},
		{"bigint nil", pgtype.Int8ArrayOID, []int64(nil), int8Array(nil)},
		{"boolean with NULL", pgtype.BoolArrayOID, []pgtype.Bool{{Bool: true, Valid: true}, {}, {Valid: true}}, boolArray{{Bool: true, Valid: true}, {}, {Valid: true}}},
		{"uuid with NULL", pgtype.UUIDArrayOID, []pgtype.UUID{{Bytes: tok, Valid: true}, {}}, uuidArray{{Bytes: tok, Valid: true}, {}}},
		{"uuid", pgtype.UUIDArrayOID, []pgtype.UUID{{Bytes: tok, Valid: true}}, uuidArray{{Bytes: tok, Valid: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := pgtype.NewMap()
			for _, f := range []int16{pgtype.BinaryFormatCode, pgtype.TextFormatCode} {
				want, err := m.Encode(tc.oid, f, tc.plain, nil)
				if err != nil {
					t.Fatalf("format %d: plain slice: %v", f, err)
				}
				got, err := m.Encode(tc.oid, f, tc.as, nil)
				if err != nil {
					t.Fatalf("format %d: %v", f, err)
				}
				if !bytes.Equal(got, want) || (got == nil) != (want == nil) {
					t.Fatalf("format %d: encoded %q, want %q", f, got, want)
				}
			}
			buf := make([]byte, 0, 1<<14)
			allocs := testing.AllocsPerRun(20, func() {
				if _, err := m.Encode(tc.oid, pgtype.BinaryFormatCode, tc.as, buf[:0]); err != nil {
					t.Fatal(err)
				}
			})
			if allocs > 2 { // the interface holding the array, its dimensions
				t.Errorf("binary encoding allocates %.0f times, want at most 2 whatever the length", allocs)
			}
		})
	}
}
