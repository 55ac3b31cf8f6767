package envelope

import (
	"testing"
)

// FuzzParseStoredTimestamp checks ParseStoredTimestamp against
// ParseTimestamp: whatever it accepts, ParseTimestamp accepts with the
// same Timestamp (==, location included), and it accepts every canonical
// encoding.
func FuzzParseStoredTimestamp(f *testing.F) {
	for _, s := range []string{"2026-11-21T10:00:00.123Z", "0001-01-01T00:00:00.000Z", "9999-12-31T23:59:59.999Z",
		"0000-01-01T00:00:00.000Z", "2026-02-29T10:00:00.000Z", "2024-02-29T10:00:00.000Z", "2026-11-21T24:00:00.000Z",
		"2026-11-21T23:59:60.000Z", "2026-13-01T00:00:00.000Z", "2026-00-10T00:00:00.000Z", "2026-11-00T00:00:00.000Z",
		"2026-11-21t10:00:00.123z", "2026-11-21T10:00:00.12Z", "2026-11-21T10:00:00.123+00:00", "+026-11-21T10:00:00.123Z",
		"2026-11-21T10:60:00.000Z", "2026-04-31T10:00:00.000Z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := ParseStoredTimestamp([]byte(s))
		want, err := ParseTimestamp(s)
		if ok && (err != nil || got != want) {
			t.Fatalf("ParseStoredTimestamp(%q) = %v; ParseTimestamp: %v, %v", s, got, want, err)
		}
		if err == nil && want.String() == s && !ok {
			t.Fatalf("ParseStoredTimestamp(%q) refused a canonical encoding", s)
		}
	})
}
