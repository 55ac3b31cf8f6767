package dlq_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/dlq"
	"github.com/sluicehq/sluice/worker"
)

func hdr(kv ...string) []kgo.RecordHeader {
	var hs []kgo.RecordHeader
	for i := 0; i+1 < len(kv); i += 2 {
		hs = append(hs, kgo.RecordHeader{Key: kv[i], Value: []byte(kv[i+1])})
	}
	return hs
}

// TestOriginalHeadersRoundTrip: a dead letter gives back the original's
// headers byte for byte (what redrive re-produces), whether their values
// are text, not UTF-8, or text that looks like the "base64:" escape itself,
// and when the original repeats a header key (a CloudEvents record with a
// header given twice is a parse error: its redrive must not turn it into
// a valid record by dropping one).
func TestOriginalHeadersRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name     string
		headers  []kgo.RecordHeader
		want     []kgo.RecordHeader // nil: the original's
		wantList bool               // original_header_list written
	}{
		{name: "text", headers: hdr("h", "application/json")},
		{name: "empty", headers: hdr("h", "")},
		{name: "not UTF-8", headers: hdr("h", "x\xffy")},
		{name: "text with the base64 prefix", headers: hdr("h", "base64:aGVsbG8=")},
		{name: "the prefix alone", headers: hdr("h", "base64:")},
		{name: "the prefix and text that is not base64", headers: hdr("h", "base64:not base64!")},
		{name: "distinct keys come back in key order", headers: hdr("b", "1", "a", "2"), want: hdr("a", "2", "b", "1")},
		{name: "a repeated key keeps both, in order", headers: hdr("ce_type", "a.b", "ce_id", "x", "ce_type", "c.d"), wantList: true},
		{name: "a repeated key with binary values", headers: hdr("h", "\xff", "h", "base64:eA=="), wantList: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			orig := &kgo.Record{Topic: "sluice.commands", Partition: 1, Offset: 7, Key: []byte("k"),
				Value: []byte("not json"), Headers: tc.headers}
			now := time.Date(2026, 11, 29, 4, 0, 0, 0, time.UTC)
			r, err := worker.DeadLetterRecord("sluice.commands.dlq", "instanceworker", orig, "parse", "parse: boom", 1, now, now)
			if err != nil {
				t.Fatal(err)
			}
			var raw map[string]json.RawMessage
			if err := json.Unmarshal(r.Value, &raw); err != nil {
				t.Fatal(err)
			}
			if _, ok := raw["original_header_list"]; ok != tc.wantList {
				t.Errorf("original_header_list written = %v, want %v: %s", ok, tc.wantList, r.Value)
			}
			got, err := dlq.ParseLetter(r).Original()
			if err != nil {
				t.Fatal(err)
			}
			want := tc.want
			if want == nil {
				want = tc.headers
			}
			if len(got.Headers) != len(want) {
				t.Fatalf("headers = %q, want %q", got.Headers, want)
			}
			for i := range want {
				if got.Headers[i].Key != want[i].Key || string(got.Headers[i].Value) != string(want[i].Value) {
					t.Fatalf("headers = %q, want %q", got.Headers, want)
				}
			}
		})
	}
}

// TestLetterWrittenBeforeHeaderListRedrives: a letter written before
// original_header_list existed (original_headers only; non-UTF-8 values
// as "base64:" + base64, text never escaped) gives back the headers it gave
// before: in key order, "base64:" values decoded, other text as written.
func TestLetterWrittenBeforeHeaderListRedrives(t *testing.T) {
	for _, tc := range []struct {
		name    string
		headers string // original_headers as the old writer wrote them
		want    []kgo.RecordHeader
	}{
		{"none", `{}`, nil},
		{"text", `{"ce_type":"a.b"}`, hdr("ce_type", "a.b")},
		{"binary as base64", `{"h":"base64:/w=="}`, hdr("h", "\xff")},
		{"prefix with text that is not base64 stays text", `{"h":"base64:not base64!"}`, hdr("h", "base64:not base64!")},
		{"key order", `{"b":"1","a":"2"}`, hdr("a", "2", "b", "1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := `{"original_topic":"sluice.commands","original_partition":1,"original_offset":7,` +
				`"original_key":"k","original_value":"{}","original_headers":` + tc.headers +
				`,"error":"boom","error_class":"permanent","attempt_count":1,"handler":"instanceworker"}`
			got, err := dlq.ParseLetter(&kgo.Record{Topic: "sluice.commands.dlq", Value: []byte(v)}).Original()
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Headers) != len(tc.want) {
				t.Fatalf("headers = %q, want %q", got.Headers, tc.want)
			}
			for i := range tc.want {
				if got.Headers[i].Key != tc.want[i].Key || string(got.Headers[i].Value) != string(tc.want[i].Value) {
					t.Fatalf("headers = %q, want %q", got.Headers, tc.want)
				}
			}
		})
	}
}
