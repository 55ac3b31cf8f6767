package esserver

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestAppendStringRoundTrips: every string, quoted by appendString, is
// valid JSON that decodes to the string itself (invalid UTF-8 to U+FFFD,
// as encoding/json decodes it), with no HTML escaping.
func TestAppendStringRoundTrips(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"plain", "hello", "hello"},
		{"control chars", "\x00\x01\b\t\n\f\r\x1f\x7f", "\x00\x01\b\t\n\f\r\x1f\x7f"},
		{"quotes and backslash", `a"b\c/d`, `a"b\c/d`},
		{"html left as is", "<a>&amp;</a>", "<a>&amp;</a>"},
		{"unicode", "héllo 世界 🎉 \u2028\u2029", "héllo 世界 🎉 \u2028\u2029"},
		{"invalid utf-8", "a\xffb\xed\xa0\x80", "a\ufffdb\ufffd\ufffd\ufffd"},
		{"empty", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := appendString([]byte("x"), tc.in)
			if b[0] != 'x' {
				t.Fatalf("prefix lost: %q", b)
			}
			var got string
			if err := json.Unmarshal(b[1:], &got); err != nil {
				t.Fatalf("appendString(%q) = %s: not JSON: %v", tc.in, b[1:], err)
			}
			if got != tc.want {
				t.Fatalf("appendString(%q) decodes to %q, want %q", tc.in, got, tc.want)
			}
			if strings.Contains(string(b), `\u003c`) {
				t.Fatalf("appendString(%q) = %s: HTML-escaped", tc.in, b)
			}
		})
	}
}
