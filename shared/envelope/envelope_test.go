package envelope

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	testEventID  = "0b4f2a3c-9d1e-4c8a-b7e2-5f6a7b8c9d0e"
	minimalValid = `{"event_id":"0b4f2a3c-9d1e-4c8a-b7e2-5f6a7b8c9d0e","event_type":"ORDER_PLACED","kind":"domain","aggregate_type":"Order","aggregate_id":"Order-1"}`
)

// withField returns minimalValid with field removed and, unless raw is "",
// appended with the raw JSON value (built as text, so raw may be deeper than
// encoding/json accepts).
func withField(t testing.TB, field, raw string) string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(minimalValid), &m); err != nil {
		t.Fatal(err)
	}
	delete(m, field)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if raw == "" {
		return string(b)
	}
	fk, _ := json.Marshal(field)
	return string(b[:len(b)-1]) + "," + string(fk) + ":" + raw + "}"
}

func TestParseValid(t *testing.T) {
	full := `{
	  "event_id": "0B4F2A3C-9D1E-4C8A-B7E2-5F6A7B8C9D0E",
	  "event_type": "CREATE_INSTANCE",
	  "kind": "command",
	  "aggregate_type": "Instance",
	  "aggregate_id": "  shop:orders:cafe\u0301/1  ",
	  "sequence_number": 7,
	  "position": 9223372036854775807,
	  "expected_seq": 0,
	  "occurred_at": "2026-11-21T11:00:00.123456+01:00",
	  "actor": "user:42",
	  "data": {"b": [1, 2, {"c": null}], "a": 12345678901234567890123},
	  "metadata": {"command_id": "cmd-1", "traceparent": "00-abc-def-01", "x-free": {"n": 18446744073709551616}},
	  "schema_version": 3
	}`
	e, err := Parse([]byte(full), DefaultLimits())
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if e.EventID != testEventID {
		t.Errorf("event_id = %q, want lower-cased %q", e.EventID, testEventID)
	}
	if e.Kind != KindCommand || e.EventType != "CREATE_INSTANCE" || e.AggregateType != "Instance" {
		t.Errorf("unexpected header fields: %+v", e)
	}
	if e.AggregateID != "shop:orders:café/1" {
		t.Errorf("aggregate_id = %q, want NFC and trimmed", e.AggregateID)
	}
	if e.SequenceNumber != 7 || e.Position != 9223372036854775807 {
		t.Errorf("sequence/position = %d/%d", e.SequenceNumber, e.Position)
	}
	if e.ExpectedSeq == nil || *e.ExpectedSeq != 0 {
		t.Errorf("expected_seq = %v, want pointer to 0", e.ExpectedSeq)
	}
	if got := e.OccurredAt.String(); got != "2026-11-21T10:00:00.123Z" {
		t.Errorf("occurred_at = %q, want UTC milliseconds", got)
	}
	if e.Actor != "user:42" || e.SchemaVersion != 3 {
		t.Errorf("actor/schema_version = %q/%d", e.Actor, e.SchemaVersion)
	}
	if e.Metadata.CommandID() != "cmd-1" || e.Metadata.Traceparent() != "00-abc-def-01" {
		t.Errorf("metadata accessors: %q %q", e.Metadata.CommandID(), e.Metadata.Traceparent())
	}
	out, err := Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"a":12345678901234567890123`,
		`"x-free":{"n":18446744073709551616}`,
		`"occurred_at":"2026-11-21T10:00:00.123Z"`,
		`"expected_seq":0`,
	} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("Marshal output lacks %s:\n%s", want, out)
		}
	}
	// The encoded form parses back to the same envelope.
	again, err := Parse(out, DefaultLimits())
	if err != nil {
		t.Fatalf("re-Parse: %v", err)
	}
	out2, _ := Marshal(again)
	if !bytes.Equal(out, out2) {
		t.Errorf("Marshal(Parse(Marshal(e))) differs:\n%s\n%s", out, out2)
	}
}

func TestParseDefaults(t *testing.T) {
	e, err := Parse([]byte(minimalValid), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if string(e.Data) != "{}" || e.SchemaVersion != 1 || !e.OccurredAt.IsZero() ||
		e.SequenceNumber != 0 || e.Position != 0 || e.ExpectedSeq != nil || e.Metadata != nil {
		t.Fatalf("defaults not applied: %+v", e)
	}
	out, _ := Marshal(e)
	want := `{"event_id":"0b4f2a3c-9d1e-4c8a-b7e2-5f6a7b8c9d0e","event_type":"ORDER_PLACED","kind":"domain","aggregate_type":"Order","aggregate_id":"Order-1","data":{},"schema_version":1}`
	if string(out) != want {
		t.Fatalf("Marshal = %s\nwant      %s", out, want)
	}
	clock := func() time.Time { return time.Date(2026, 11, 21, 10, 0, 0, 123_999_999, time.FixedZone("x", 3600)) }
	f := FillDefaults(e, clock)
	if f.OccurredAt.String() != "2026-11-21T09:00:00.123Z" {
		t.Fatalf("FillDefaults occurred_at = %s", f.OccurredAt)
	}
	// An existing occurred_at is kept.
	if g := FillDefaults(f, func() time.Time { return time.Unix(0, 0) }); g.OccurredAt != f.OccurredAt {
		t.Fatalf("FillDefaults overwrote occurred_at: %s", g.OccurredAt)
	}
	// Null fields count as absent.
	n := withField(t, "data", "null")
	n = strings.Replace(n, `}`, `,"metadata":null,"occurred_at":null,"expected_seq":null,"actor":null}`, 1)
	if _, err := Parse([]byte(n), Limits{}); err != nil {
		t.Fatalf("nulls: %v", err)
	}
}

func TestPrepare(t *testing.T) {
	clock := func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 6_000_000, time.UTC) }
	e, err := Prepare(Envelope{
		EventID:       strings.ToUpper(testEventID),
		EventType:     "ORDER_PLACED",
		Kind:          KindDomain,
		AggregateType: "Order",
		AggregateID:   " e\u0301 ",
	}, Limits{}, clock)
	if err != nil {
		t.Fatal(err)
	}
	if e.AggregateID != "é" || e.EventID != testEventID || e.OccurredAt.String() != "2026-01-02T03:04:05.006Z" ||
		string(e.Data) != "{}" || e.SchemaVersion != 1 {
		t.Fatalf("Prepare: %+v", e)
	}
	// Validate reports, does not repair.
	raw := e
	raw.AggregateID = "e\u0301"
	if err := Validate(raw, Limits{}); fieldOf(err) != "aggregate_id" {
		t.Fatalf("Validate(non-NFC) = %v", err)
	}
	raw = e
	raw.Data = nil
	if err := Validate(raw, Limits{}); fieldOf(err) != "data" {
		t.Fatalf("Validate(nil data) = %v", err)
	}
}

func fieldOf(err error) string {
	var ve *ValidationError
	if errors.As(err, &ve) {
		return ve.Field
	}
	if err == nil {
		return "<nil>"
	}
	return "<not a ValidationError: " + err.Error() + ">"
}

func codeOf(err error) ErrorCode {
	var ve *ValidationError
	if errors.As(err, &ve) {
		return ve.Code
	}
	return ""
}

func TestParseInvalid(t *testing.T) {
	long := func(n int, c string) string { return strings.Repeat(c, n) }
	tests := []struct {
		name  string
		input string
		field string
		code  ErrorCode
	}{
		{"not json", `x`, "", CodeMalformed},
		{"empty input", ``, "", CodeMalformed},
		{"array", `[1]`, "", CodeMalformed},
		{"string", `"x"`, "", CodeMalformed},
		{"truncated", minimalValid[:40], "", CodeMalformed},
		{"trailing value", minimalValid + ` {}`, "", CodeMalformed},
		{"trailing garbage", minimalValid + `x`, "", CodeMalformed},
		{"invalid utf8", strings.Replace(minimalValid, "Order-1", "Order-\xff", 1), "aggregate_id", CodeInvalidText},
		{"unknown field", withField(t, "colour", `"red"`), "colour", CodeInvalid},
		{"unknown field by case", withField(t, "Event_ID", `"x"`), "Event_ID", CodeInvalid},
		{"duplicate field", strings.Replace(minimalValid, `"kind":"domain"`, `"kind":"domain","kind":"command"`, 1), "kind", CodeMalformed},
		{"duplicate field via escape", strings.Replace(minimalValid, `"kind":"domain"`, `"kind":"domain","\u006bind":"domain"`, 1), "kind", CodeMalformed},
		{"duplicate key in data", withField(t, "data", `{"a":1,"a":2}`), "data", CodeMalformed},
		{"duplicate key deep in data", withField(t, "data", `{"a":[{"b":1,"b":1}]}`), "data", CodeMalformed},

		{"event_id missing", withField(t, "event_id", ""), "event_id", CodeInvalid},
		{"event_id empty", withField(t, "event_id", `""`), "event_id", CodeInvalid},
		{"event_id not uuid", withField(t, "event_id", `"evt-1"`), "event_id", CodeInvalid},
		{"event_id braces", withField(t, "event_id", `"{0b4f2a3c-9d1e-4c8a-b7e2-5f6a7b8c9d0e}"`), "event_id", CodeInvalid},
		{"event_id urn", withField(t, "event_id", `"urn:uuid:0b4f2a3c-9d1e-4c8a-b7e2-5f6a7b8c9d0e"`), "event_id", CodeInvalid},
		{"event_id no hyphens", withField(t, "event_id", `"0b4f2a3c9d1e4c8ab7e25f6a7b8c9d0e"`), "event_id", CodeInvalid},
		{"event_id nil uuid", withField(t, "event_id", `"00000000-0000-0000-0000-000000000000"`), "event_id", CodeInvalid},
		{"event_id number", withField(t, "event_id", `1`), "event_id", CodeInvalid},

		{"event_type missing", withField(t, "event_type", ""), "event_type", CodeInvalid},
		{"event_type space", withField(t, "event_type", `"order placed"`), "event_type", CodeInvalid},
		{"event_type dot first", withField(t, "event_type", `".ORDER"`), "event_type", CodeInvalid},
		{"event_type 129", withField(t, "event_type", `"`+long(129, "A")+`"`), "event_type", CodeInvalid},

		{"kind missing", withField(t, "kind", ""), "kind", CodeInvalid},
		{"kind other", withField(t, "kind", `"event"`), "kind", CodeInvalid},
		{"kind case", withField(t, "kind", `"Domain"`), "kind", CodeInvalid},

		{"aggregate_type missing", withField(t, "aggregate_type", ""), "aggregate_type", CodeInvalid},
		{"aggregate_type digit first", withField(t, "aggregate_type", `"1Order"`), "aggregate_type", CodeInvalid},
		{"aggregate_type colon", withField(t, "aggregate_type", `"Or:der"`), "aggregate_type", CodeInvalid},
		{"aggregate_type 65", withField(t, "aggregate_type", `"`+long(65, "a")+`"`), "aggregate_type", CodeInvalid},

		{"aggregate_id missing", withField(t, "aggregate_id", ""), "aggregate_id", CodeInvalid},
		{"aggregate_id blank", withField(t, "aggregate_id", `" \t "`), "aggregate_id", CodeInvalid},
		{"aggregate_id control", withField(t, "aggregate_id", `"a\u0007b"`), "aggregate_id", CodeInvalid},
		{"aggregate_id inner newline", withField(t, "aggregate_id", `"a\nb"`), "aggregate_id", CodeInvalid},
		{"aggregate_id zero width", withField(t, "aggregate_id", `"a\u200bb"`), "aggregate_id", CodeInvalid},
		{"aggregate_id 513", withField(t, "aggregate_id", `"`+long(513, "x")+`"`), "aggregate_id", CodeInvalid},
		{"aggregate_id number", withField(t, "aggregate_id", `1`), "aggregate_id", CodeInvalid},
		{"instance id without parts", strings.Replace(withField(t, "aggregate_id", `"o-1"`), `"Order"`, `"Instance"`, 1), "aggregate_id", CodeInvalid},
		{"instance id bad db", strings.Replace(withField(t, "aggregate_id", `"Shop:orders:o-1"`), `"Order"`, `"Instance"`, 1), "aggregate_id", CodeInvalid},

		{"sequence_number zero", withField(t, "sequence_number", `0`), "sequence_number", CodeInvalid},
		{"sequence_number negative", withField(t, "sequence_number", `-1`), "sequence_number", CodeInvalid},
		{"sequence_number fraction", withField(t, "sequence_number", `1.5`), "sequence_number", CodeInvalid},
		{"sequence_number float form", withField(t, "sequence_number", `1.0`), "sequence_number", CodeInvalid},
		{"sequence_number exponent", withField(t, "sequence_number", `1e3`), "sequence_number", CodeInvalid},
		{"sequence_number string", withField(t, "sequence_number", `"1"`), "sequence_number", CodeInvalid},
		{"sequence_number overflow", withField(t, "sequence_number", `9223372036854775808`), "sequence_number", CodeInvalid},
		{"position zero", withField(t, "position", `0`), "position", CodeInvalid},
		{"position bool", withField(t, "position", `true`), "position", CodeInvalid},

		{"expected_seq negative", strings.Replace(withField(t, "expected_seq", `-1`), `"domain"`, `"command"`, 1), "expected_seq", CodeInvalid},
		{"expected_seq on domain", withField(t, "expected_seq", `3`), "expected_seq", CodeInvalid},
		{"expected_seq object", withField(t, "expected_seq", `{}`), "expected_seq", CodeInvalid},

		{"occurred_at words", withField(t, "occurred_at", `"yesterday"`), "occurred_at", CodeInvalid},
		{"occurred_at date only", withField(t, "occurred_at", `"2026-11-21"`), "occurred_at", CodeInvalid},
		{"occurred_at no zone", withField(t, "occurred_at", `"2026-11-21T10:00:00"`), "occurred_at", CodeInvalid},
		{"occurred_at empty", withField(t, "occurred_at", `""`), "occurred_at", CodeInvalid},
		{"occurred_at number", withField(t, "occurred_at", `1700000000`), "occurred_at", CodeInvalid},
		{"occurred_at year 0 in UTC", withField(t, "occurred_at", `"0001-01-01T00:30:00+01:00"`), "occurred_at", CodeInvalid},

		{"actor number", withField(t, "actor", `5`), "actor", CodeInvalid},

		{"data array", withField(t, "data", `[]`), "data", CodeInvalid},
		{"data string", withField(t, "data", `"x"`), "data", CodeInvalid},
		{"data number", withField(t, "data", `1`), "data", CodeInvalid},

		{"metadata array", withField(t, "metadata", `[]`), "metadata", CodeInvalid},
		{"metadata command_id number", withField(t, "metadata", `{"command_id":5}`), "metadata.command_id", CodeInvalid},
		{"metadata command_id colon", withField(t, "metadata", `{"command_id":"a:b"}`), "metadata.command_id", CodeInvalid},
		{"metadata command_id empty", withField(t, "metadata", `{"command_id":""}`), "metadata.command_id", CodeInvalid},
		{"metadata command_id space", withField(t, "metadata", `{"command_id":"a b"}`), "metadata.command_id", CodeInvalid},
		{"metadata ordering_key object", withField(t, "metadata", `{"ordering_key":{}}`), "metadata.ordering_key", CodeInvalid},
		{"metadata kafka_topic slash", withField(t, "metadata", `{"kafka_topic":"a/b"}`), "metadata.kafka_topic", CodeInvalid},
		{"metadata kafka_topic dotdot", withField(t, "metadata", `{"kafka_topic":".."}`), "metadata.kafka_topic", CodeInvalid},
		{"metadata duplicate key", withField(t, "metadata", `{"x":1,"x":1}`), "metadata", CodeMalformed},

		{"schema_version zero", withField(t, "schema_version", `0`), "schema_version", CodeInvalid},
		{"schema_version negative", withField(t, "schema_version", `-2`), "schema_version", CodeInvalid},
		{"schema_version string", withField(t, "schema_version", `"1"`), "schema_version", CodeInvalid},
		{"schema_version huge", withField(t, "schema_version", `4294967296`), "schema_version", CodeInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.input), DefaultLimits())
			if err == nil {
				t.Fatalf("Parse(%s) succeeded, want error on field %q", tc.input, tc.field)
			}
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("error %v (%T) is not a *ValidationError", err, err)
			}
			if ve.Field != tc.field || ve.Code != tc.code {
				t.Fatalf("got field %q code %q (%v), want field %q code %q", ve.Field, ve.Code, err, tc.field, tc.code)
			}
			if ve.Limit == "" || ve.Reason == "" {
				t.Fatalf("error lacks limit or reason: %#v", ve)
			}
		})
	}
}

func TestParseValidEdges(t *testing.T) {
	tests := []struct{ name, input string }{
		{"event_type 128", withField(t, "event_type", `"`+strings.Repeat("A", 128)+`"`)},
		{"event_type one char", withField(t, "event_type", `"A"`)},
		{"aggregate_type 64", withField(t, "aggregate_type", `"`+strings.Repeat("a", 64)+`"`)},
		{"aggregate_id 512", withField(t, "aggregate_id", `"`+strings.Repeat("x", 512)+`"`)},
		{"uuid v4 upper", withField(t, "event_id", `"6BA7B810-9DAD-41D1-80B4-00C04FD430C8"`)},
		{"uuid v7", withField(t, "event_id", `"01890a5d-ac96-774b-bcce-b302099a8057"`)},
		{"expected_seq on command", strings.Replace(withField(t, "expected_seq", `0`), `"domain"`, `"command"`, 1)},
		{"instance", strings.Replace(withField(t, "aggregate_id", `"shop:orders:a:b/c"`), `"Order"`, `"Instance"`, 1)},
		{"occurred_at nanos", withField(t, "occurred_at", `"2026-11-21T10:00:00.123456789Z"`)},
		{"occurred_at no fraction", withField(t, "occurred_at", `"2026-11-21T10:00:00Z"`)},
		{"metadata free keys", withField(t, "metadata", `{"x":[1,{"y":null}],"z":1e400}`)},
		{"ordering_key empty", withField(t, "metadata", `{"ordering_key":""}`)},
		{"whitespace around", " \n" + minimalValid + "\n\t "},
		{"surrogate pair escape in data", withField(t, "data", `{"a":"\ud83d\ude80","\uDBFF\uDFFF":1}`)},
		{"escaped backslash before u", withField(t, "data", `{"a":"\\ud800"}`)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Parse([]byte(tc.input), DefaultLimits()); err != nil {
				t.Fatalf("Parse(%s): %v", tc.input, err)
			}
		})
	}
	// A string field with escapes decodes as encoding/json does.
	in := strings.Replace(withField(t, "actor", `"a\ud83d\ude80b\n"`), `"Order-1"`, `"Order-\u0031"`, 1)
	e, err := Parse([]byte(in), DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	var want struct{ Actor string }
	if err := json.Unmarshal([]byte(in), &want); err != nil {
		t.Fatal(err)
	}
	if e.Actor != want.Actor || e.AggregateID != "Order-1" {
		t.Fatalf("actor %q aggregate_id %q, want %q and Order-1", e.Actor, e.AggregateID, want.Actor)
	}
}

func TestValidationErrorForm(t *testing.T) {
	_, err := Parse([]byte(withField(t, "event_type", `"bad/type"`)), DefaultLimits())
	if got, want := err.Error(), `envelope: field "event_type": must match [A-Za-z0-9][A-Za-z0-9._-]{0,127}: byte 3 ("/") is outside [A-Za-z0-9._-]`; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	wrapped := fmt.Errorf("append: %w", err)
	var ve *ValidationError
	if !errors.As(wrapped, &ve) || ve.Limit != EventTypePattern || ve.HTTPStatus() != http.StatusUnprocessableEntity {
		t.Fatalf("errors.As on wrapped error: %#v", ve)
	}
	if s := (&ValidationError{Code: CodeMalformed, Reason: "x"}).HTTPStatus(); s != http.StatusBadRequest {
		t.Fatalf("malformed → %d", s)
	}
	if s := (&ValidationError{Code: CodeLimitExceeded, Reason: "x"}).HTTPStatus(); s != http.StatusRequestEntityTooLarge {
		t.Fatalf("limit → %d", s)
	}
	if got := (&ValidationError{Reason: "too big"}).Error(); got != "envelope: too big" {
		t.Fatalf("whole-envelope Error() = %q", got)
	}
}

// envelopeOfSize returns a valid encoded envelope of exactly n bytes.
func envelopeOfSize(t testing.TB, n int) []byte {
	t.Helper()
	base := withField(t, "data", `{"pad":""}`)
	e, err := Parse([]byte(base), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Marshal(e)
	pad := n - len(b)
	if pad < 0 {
		t.Fatalf("base envelope is %d bytes, more than %d", len(b), n)
	}
	e.Data = json.RawMessage(`{"pad":"` + strings.Repeat("p", pad) + `"}`)
	b, _ = Marshal(e)
	if len(b) != n {
		t.Fatalf("built %d bytes, want %d", len(b), n)
	}
	return b
}

func nested(depth int, open, close, leaf string) string {
	// depth levels of open…close around leaf, e.g. {"a":{"a":{}}}
	return strings.Repeat(open, depth) + leaf + strings.Repeat(close, depth)
}

func TestLimits(t *testing.T) {
	def := DefaultLimits()
	if def.MaxEnvelopeBytes != 1<<20 || def.MaxDataDepth != 64 || def.MaxMetadataBytes != 16<<10 {
		t.Fatalf("DefaultLimits = %+v", def)
	}
	// data of depth d: the data object is depth 1.
	dataDepth := func(d int) string { return nested(d-1, `{"a":`, `}`, `{}`) }
	arrayDepth := func(d int) string { return `{"a":` + nested(d-1, `[`, `]`, ``) + `}` }
	metaDepth := func(d int) string { return `{"x":` + nested(d-2, `{"a":`, `}`, `{}`) + `}` }
	metaOfSize := func(n int) string {
		m := `{"x":""}`
		return `{"x":"` + strings.Repeat("m", n-len(m)) + `"}`
	}
	tests := []struct {
		name   string
		input  []byte
		limits Limits
		field  string // "<nil>" for success
	}{
		{"envelope at 1 MiB", envelopeOfSize(t, 1<<20), Limits{}, "<nil>"},
		{"envelope over 1 MiB", envelopeOfSize(t, 1<<20+1), Limits{}, ""},
		{"custom envelope limit ok", envelopeOfSize(t, 300), Limits{MaxEnvelopeBytes: 300}, "<nil>"},
		{"custom envelope limit over", envelopeOfSize(t, 301), Limits{MaxEnvelopeBytes: 300}, ""},
		{"data depth 64", []byte(withField(t, "data", dataDepth(64))), Limits{}, "<nil>"},
		{"data depth 65", []byte(withField(t, "data", dataDepth(65))), Limits{}, "data"},
		{"data array depth 64", []byte(withField(t, "data", arrayDepth(64))), Limits{}, "<nil>"},
		{"data array depth 65", []byte(withField(t, "data", arrayDepth(65))), Limits{}, "data"},
		{"data depth 100000", []byte(withField(t, "data", arrayDepth(100000))), Limits{}, "data"},
		{"custom depth 3 ok", []byte(withField(t, "data", dataDepth(3))), Limits{MaxDataDepth: 3}, "<nil>"},
		{"custom depth 4", []byte(withField(t, "data", dataDepth(4))), Limits{MaxDataDepth: 3}, "data"},
		{"metadata depth 64", []byte(withField(t, "metadata", metaDepth(64))), Limits{}, "<nil>"},
		{"metadata depth 65", []byte(withField(t, "metadata", metaDepth(65))), Limits{}, "metadata"},
		{"other field deep", []byte(withField(t, "actor", nested(100, "[", "]", ""))), Limits{}, "actor"},
		{"metadata 16 KiB", []byte(withField(t, "metadata", metaOfSize(16<<10))), Limits{}, "<nil>"},
		{"metadata 16 KiB + 1", []byte(withField(t, "metadata", metaOfSize(16<<10+1))), Limits{}, "metadata"},
		{"metadata with spaces measured compact", []byte(withField(t, "metadata", strings.Replace(metaOfSize(16<<10), ":", " : ", 1))), Limits{}, "<nil>"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.input, tc.limits)
			if got := fieldOf(err); got != tc.field {
				t.Fatalf("field = %q (%v), want %q", got, err, tc.field)
			}
			if err != nil && codeOf(err) != CodeLimitExceeded {
				t.Fatalf("code = %q, want %q", codeOf(err), CodeLimitExceeded)
			}
		})
	}
}

func TestValidateLimitsProgrammatic(t *testing.T) {
	e, err := Parse([]byte(minimalValid), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	deep := e
	deep.Data = json.RawMessage(nested(200000, `{"a":`, `}`, `{}`))
	if err := Validate(deep, Limits{}); fieldOf(err) != "data" || codeOf(err) != CodeLimitExceeded {
		t.Fatalf("deep data: %v", err)
	}
	bad := e
	bad.Data = json.RawMessage(`{"a":}`)
	if err := Validate(bad, Limits{}); fieldOf(err) != "data" || codeOf(err) != CodeMalformed {
		t.Fatalf("bad data: %v", err)
	}
	bad.Data = json.RawMessage(`{} {}`)
	if err := Validate(bad, Limits{}); fieldOf(err) != "data" {
		t.Fatalf("two objects as data: %v", err)
	}
	big := e
	big.Metadata = Metadata{"x": json.RawMessage(`"` + strings.Repeat("m", 16<<10) + `"`)}
	if err := Validate(big, Limits{}); fieldOf(err) != "metadata" || codeOf(err) != CodeLimitExceeded {
		t.Fatalf("big metadata: %v", err)
	}
	badMeta := e
	badMeta.Metadata = Metadata{"x": json.RawMessage(`{`)}
	if err := Validate(badMeta, Limits{}); fieldOf(err) != "metadata.x" {
		t.Fatalf("bad metadata value: %v", err)
	}
	huge := e
	huge.Data = json.RawMessage(`{"s":"` + strings.Repeat("<", 1<<20) + `"}`)
	if err := Validate(huge, Limits{}); fieldOf(err) != "" || codeOf(err) != CodeLimitExceeded {
		t.Fatalf("huge envelope: %v", err)
	}
	neg := e
	neg.SequenceNumber = -1
	if err := Validate(neg, Limits{}); fieldOf(err) != "sequence_number" {
		t.Fatalf("negative sequence: %v", err)
	}
	badActor := e
	badActor.Actor = "\xff"
	if err := Validate(badActor, Limits{}); fieldOf(err) != "actor" {
		t.Fatalf("bad actor: %v", err)
	}
	upper := e
	upper.EventID = strings.ToUpper(testEventID)
	if err := Validate(upper, Limits{}); fieldOf(err) != "event_id" {
		t.Fatalf("upper-case event_id: %v", err)
	}
}

func TestMetadata(t *testing.T) {
	var m Metadata
	m.SetString(MetaOrderingKey, "k<1>")
	m.SetString(MetaCorrelationID, "corr")
	m.SetString(MetaCausationID, "cause")
	m.SetString(MetaKafkaTopic, "sluice.events")
	m.SetString(MetaTracestate, "ts")
	if m.OrderingKey() != "k<1>" || m.CorrelationID() != "corr" || m.CausationID() != "cause" ||
		m.KafkaTopic() != "sluice.events" || m.Tracestate() != "ts" || m.CommandID() != "" {
		t.Fatalf("accessors: %v", m)
	}
	m["n"] = json.RawMessage(`5`)
	if _, ok := m.String("n"); ok {
		t.Fatal("String on a number reported ok")
	}
	if _, ok := m.String("missing"); ok {
		t.Fatal("String on a missing key reported ok")
	}
}

func TestTimestamp(t *testing.T) {
	ts, err := ParseTimestamp("2026-11-21T10:00:00.1239Z")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(ts)
	if string(b) != `"2026-11-21T10:00:00.123Z"` {
		t.Fatalf("marshal = %s", b)
	}
	var back Timestamp
	if err := json.Unmarshal(b, &back); err != nil || back != ts {
		t.Fatalf("round trip: %v %v", back, err)
	}
	if err := json.Unmarshal([]byte(`5`), &back); err == nil {
		t.Fatal("number accepted")
	}
	// RFC 3339 section 5.6: "t" and "z" may be lower case (a CloudEvent's
	// time from a producer that writes them so was refused with 422).
	for _, s := range []string{"2026-11-21t10:00:00.123z", "2026-11-21t10:00:00.123Z", "2026-11-21T10:00:00.123z", "2026-11-21t11:00:00.123+01:00"} {
		if got, err := ParseTimestamp(s); err != nil || got != ts {
			t.Errorf("ParseTimestamp(%q) = %v, %v; want %v", s, got, err, ts)
		}
	}
	for _, s := range []string{"2026-11-21x10:00:00Z", "2026-11-21T10:00:00y", "2026-11-21 10:00:00Z", "z", "t", "2026-13-21t10:00:00z"} {
		// The refusal quotes the time as sent, not as upper-cased for
		// time.Parse.
		if _, err := ParseTimestamp(s); err == nil || !strings.Contains(err.Error(), strconv.Quote(s)) {
			t.Errorf("ParseTimestamp(%q): %v; want a refusal quoting it", s, err)
		}
	}
	var zero Timestamp
	if b, _ := json.Marshal(zero); string(b) != "null" || zero.String() != "" || !NewTimestamp(time.Time{}).IsZero() {
		t.Fatalf("zero timestamp: %s", b)
	}
	if _, err := json.Marshal(NewTimestamp(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC))); err == nil {
		t.Fatal("year 10000 encoded")
	}
}

func TestKafkaKeyAndESID(t *testing.T) {
	e := Envelope{AggregateType: "Instance", AggregateID: "shop:orders:a/b"}
	if got := string(KafkaKey(e)); got != "Instance:shop:orders:a/b" {
		t.Fatalf("KafkaKey = %q", got)
	}
	e.Metadata.SetString(MetaOrderingKey, "")
	if got := string(KafkaKey(e)); got != "Instance:shop:orders:a/b" {
		t.Fatalf("KafkaKey with empty ordering_key = %q", got)
	}
	e.Metadata.SetString(MetaOrderingKey, "tenant-7")
	if got := string(KafkaKey(e)); got != "tenant-7" {
		t.Fatalf("KafkaKey with ordering_key = %q", got)
	}
	id512 := strings.Repeat("é", 256)
	if ESDocumentID(id512) != id512 {
		t.Fatal("512-byte id changed")
	}
	id513 := id512 + "x"
	got := ESDocumentID(id513)
	if len(got) != 64 || got == ESDocumentID(id512+"y") {
		t.Fatalf("ESDocumentID(513 bytes) = %q", got)
	}
	sum := sha256.Sum256([]byte(id513))
	if got != hex.EncodeToString(sum[:]) {
		t.Fatalf("ESDocumentID = %q, want hex SHA-256", got)
	}
}

// TestEventTypeForms: every form producers use is accepted and stored
// exactly; what would need escaping somewhere downstream is refused with
// the rule named (docs/architecture.md#event-types).
func TestEventTypeForms(t *testing.T) {
	accepted := []string{
		"ORDER_PLACED", "CREATE_INSTANCE", "INSTANCE_UPDATED", // the built-in and old forms
		"OrderPlaced", "orderPlaced", "order.placed.v1", "com.example.order.placed",
		"com.example.order-placed", "Order_Placed-2", "1st.event", "A", "9",
		strings.Repeat("a", 128), "v1.2.3",
	}
	for _, typ := range accepted {
		t.Run("accepts "+typ[:min(len(typ), 30)], func(t *testing.T) {
			e, err := Parse([]byte(withField(t, "event_type", `"`+typ+`"`)), DefaultLimits())
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if e.EventType != typ {
				t.Fatalf("stored %q, want %q exactly", e.EventType, typ)
			}
			enc, _ := Marshal(e)
			if !strings.Contains(string(enc), `"event_type":"`+typ+`"`) {
				t.Fatalf("encoding lost the type: %s", enc)
			}
		})
	}
	refused := []struct{ typ, reason string }{
		{"", "is required"},
		{".order", "must start with a letter or digit, not \".\""},
		{"-order", "must start with a letter or digit, not \"-\""},
		{"_ORDER", "must start with a letter or digit, not \"_\""},
		{"order placed", "byte 5 (\" \") is outside [A-Za-z0-9._-]"},
		{"order/placed", "byte 5 (\"/\") is outside"},
		{"order:placed", "byte 5 (\":\") is outside"},
		{"order%2Fplaced", "byte 5 (\"%\") is outside"},
		{"ordér", "byte 3 (\"\\xc3\") is outside"},
		{"order\nplaced", "byte 5 (\"\\n\") is outside"},
		{"a*", "byte 1 (\"*\") is outside"},
		{strings.Repeat("a", 129), "129 bytes is longer than 128"},
	}
	for _, tc := range refused {
		t.Run("refuses "+tc.typ[:min(len(tc.typ), 30)], func(t *testing.T) {
			raw, _ := json.Marshal(tc.typ)
			_, err := Parse([]byte(withField(t, "event_type", string(raw))), DefaultLimits())
			var ve *ValidationError
			if !errors.As(err, &ve) || ve.Field != "event_type" || ve.Code != CodeInvalid {
				t.Fatalf("Parse: %v, want an invalid event_type", err)
			}
			if tc.typ != "" && (ve.Limit != EventTypePattern || !strings.Contains(ve.Reason, EventTypePattern)) {
				t.Fatalf("reason %q does not name the rule %s", ve.Reason, EventTypePattern)
			}
			if !strings.Contains(ve.Reason, tc.reason) {
				t.Fatalf("reason %q, want it to contain %q", ve.Reason, tc.reason)
			}
		})
	}
}
