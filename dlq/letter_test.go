package dlq_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/dlq"
	"github.com/sluicehq/sluice/worker"
)

// TestOriginalHeadersRoundTrip: a dead letter gives back the original's
// header values byte for byte (what redrive re-produces), whether they are
// text, not UTF-8, or text that looks like the "base64:" escape itself.
func TestOriginalHeadersRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name  string
		value []byte
	}{
		{"text", []byte("application/json")},
		{"empty", []byte{}},
		{"not UTF-8", []byte("x\xffy")},
		{"text with the base64 prefix", []byte("base64:aGVsbG8=")},
		{"the prefix alone", []byte("base64:")},
		{"the prefix and text that is not base64", []byte("base64:not base64!")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			orig := &kgo.Record{Topic: "sluice.commands", Partition: 1, Offset: 7, Key: []byte("k"),
				Value: []byte("not json"), Headers: []kgo.RecordHeader{{Key: "h", Value: tc.value}}}
			now := time.Date(2026, 11, 29, 4, 0, 0, 0, time.UTC)
			r, err := worker.DeadLetterRecord("sluice.commands.dlq", "instanceworker", orig, "parse", "parse: boom", 1, now, now)
			if err != nil {
				t.Fatal(err)
			}
			got, err := dlq.ParseLetter(r).Original()
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Headers) != 1 || got.Headers[0].Key != "h" || !bytes.Equal(got.Headers[0].Value, tc.value) {
				t.Fatalf("headers = %q, want h=%q", got.Headers, tc.value)
			}
		})
	}
}
