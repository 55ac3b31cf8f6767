package envelope

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// invalidTexts are JSON string bodies (between the quotes) that are not
// valid text: lone surrogate escapes in every position and case, and
// invalid UTF-8 of every kind. Each once decoded to U+FFFD and was accepted.
var invalidTexts = []struct {
	name, body string
	fault      TextFault
}{
	{"lone high", `\ud800`, FaultLoneSurrogate},
	{"lone high max", `\udbff`, FaultLoneSurrogate},
	{"lone high upper case", `\uD800`, FaultLoneSurrogate},
	{"lone low", `\udc00`, FaultLoneSurrogate},
	{"lone low max", `\udfff`, FaultLoneSurrogate},
	{"lone low upper case", `\uDFFF`, FaultLoneSurrogate},
	{"high then text", `\ud800x`, FaultLoneSurrogate},
	{"text then high", `x\ud83d`, FaultLoneSurrogate},
	{"high then high", `\ud800\ud800`, FaultLoneSurrogate},
	{"low then high", `\udc00\ud800`, FaultLoneSurrogate},
	{"high then non-surrogate escape", `\ud800\u0041`, FaultLoneSurrogate},
	{"high then other escape", `\ud800\n`, FaultLoneSurrogate},
	{"pair then lone", `\ud83d\ude80\udc00`, FaultLoneSurrogate},
	{"escaped backslash then lone", `\\\ud800`, FaultLoneSurrogate},
	{"invalid byte ff", "\xff", FaultInvalidUTF8},
	{"invalid byte fe", "a\xfeb", FaultInvalidUTF8},
	{"lone continuation", "\x80", FaultInvalidUTF8},
	{"truncated two-byte", "\xc3", FaultInvalidUTF8},
	{"truncated three-byte", "\xe2\x82", FaultInvalidUTF8},
	{"overlong slash", "\xc0\xaf", FaultInvalidUTF8},
	{"overlong nul", "\xe0\x80\x80", FaultInvalidUTF8},
	{"utf-8 encoded surrogate", "\xed\xa0\x80", FaultInvalidUTF8},
	{"utf-8 encoded low surrogate", "\xed\xbf\xbf", FaultInvalidUTF8},
	{"above U+10FFFF", "\xf4\x90\x80\x80", FaultInvalidUTF8},
	{"latin-1 e acute", "caf\xe9", FaultInvalidUTF8},
}

// validTexts are accepted and must stay accepted.
var validTexts = []string{
	``, `plain`, `\ufffd`, "\uFFFD", `\ud83d\ude80`, `\uD83D\uDE80`, `\udbff\udfff`, `\ud800\udc00`,
	`\\ud800`, `\\\\ud800`, `\u0041`, `\n\t\"\\\/`, "caf\u00e9", "🚀", `\u00e9`, `a\ud83d\ude80b\ud83d\ude80`,
}

func TestScanJSONText(t *testing.T) {
	for _, tc := range invalidTexts {
		t.Run(tc.name, func(t *testing.T) {
			in := []byte(`{"k":"` + tc.body + `"}`)
			off, fault, ok := ScanJSONText(in)
			if ok || fault != tc.fault {
				t.Fatalf("ScanJSONText(%q) = %d %q %v, want fault %q", in, off, fault, ok, tc.fault)
			}
			if off < 6 || off >= 6+len(tc.body) {
				t.Fatalf("offset %d outside the string body", off)
			}
		})
	}
	for _, body := range validTexts {
		if off, fault, ok := ScanJSONText([]byte(`{"k":"` + body + `"}`)); !ok {
			t.Errorf("ScanJSONText(%q) = %d %q, want ok", body, off, fault)
		}
	}
}

// TestParseRefusesInvalidText: invalid text anywhere in an envelope (a
// string field, an id, data values and keys at any depth, metadata values
// and keys) is a CodeInvalidText error (HTTP 400) naming the path, never a
// U+FFFD in the parsed envelope.
func TestParseRefusesInvalidText(t *testing.T) {
	places := []struct {
		name  string
		build func(body string) string
		field string
	}{
		{"aggregate_id", func(s string) string { return withField(t, "aggregate_id", `"Order-`+s+`"`) }, "aggregate_id"},
		{"actor", func(s string) string { return withField(t, "actor", `"`+s+`"`) }, "actor"},
		{"event_type", func(s string) string { return withField(t, "event_type", `"`+s+`"`) }, "event_type"},
		{"data value", func(s string) string { return withField(t, "data", `{"a":"`+s+`"}`) }, "data.a"},
		{"data key", func(s string) string { return withField(t, "data", `{"k`+s+`":1}`) }, "data.k\ufffd"},
		{"data nested array", func(s string) string { return withField(t, "data", `{"a":{"b":[1,"`+s+`"]}}`) }, "data.a.b[1]"},
		{"metadata value", func(s string) string { return withField(t, "metadata", `{"note":"`+s+`"}`) }, "metadata.note"},
		{"metadata command_id", func(s string) string { return withField(t, "metadata", `{"command_id":"`+s+`"}`) }, "metadata.command_id"},
		{"metadata kafka_topic", func(s string) string { return withField(t, "metadata", `{"kafka_topic":"`+s+`"}`) }, "metadata.kafka_topic"},
	}
	for _, p := range places {
		for _, tc := range invalidTexts {
			t.Run(p.name+"/"+tc.name, func(t *testing.T) {
				in := p.build(tc.body)
				_, err := Parse([]byte(in), DefaultLimits())
				var ve *ValidationError
				if !errors.As(err, &ve) || ve.Code != CodeInvalidText || ve.Fault != tc.fault || ve.HTTPStatus() != 400 {
					t.Fatalf("Parse(%q) = %v, want %s invalid_text", in, err, tc.fault)
				}
				if p.name != "data key" && ve.Field != p.field {
					t.Fatalf("field %q, want %q", ve.Field, p.field)
				}
				if p.name == "data key" && !strings.HasPrefix(ve.Field, "data.k") {
					t.Fatalf("field %q, want data.k…", ve.Field)
				}
			})
		}
	}
	// Valid escapes stay accepted in data.
	for _, body := range validTexts {
		in := withField(t, "data", `{"a":"`+body+`"}`)
		if _, err := Parse([]byte(in), DefaultLimits()); err != nil {
			t.Errorf("Parse(%q): %v", in, err)
		}
	}
}

// TestDistinctInputsNeverShareAnID: "\udbff" and "\ufffd" once named one
// aggregate (both decoded to U+FFFD); now the first is refused.
func TestDistinctInputsNeverShareAnID(t *testing.T) {
	if _, err := Parse([]byte(withField(t, "aggregate_id", `"\ufffd"`)), DefaultLimits()); err != nil {
		t.Fatalf("U+FFFD itself is a valid id: %v", err)
	}
	for _, tc := range invalidTexts {
		if tc.fault != FaultLoneSurrogate {
			continue
		}
		if e, err := Parse([]byte(withField(t, "aggregate_id", `"`+tc.body+`"`)), DefaultLimits()); err == nil {
			t.Errorf("aggregate_id %s accepted as %+q", tc.body, e.AggregateID)
		}
	}
}

// TestValidateRefusesInvalidText: envelopes built in Go (the store's
// Prepare path) are held to the same rule.
func TestValidateRefusesInvalidText(t *testing.T) {
	base := func() Envelope {
		e, err := Parse([]byte(minimalValid), DefaultLimits())
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	for _, tc := range invalidTexts {
		cases := map[string]func(*Envelope){
			"data":          func(e *Envelope) { e.Data = json.RawMessage(`{"a":"` + tc.body + `"}`) },
			"metadata.note": func(e *Envelope) { e.Metadata = Metadata{"note": json.RawMessage(`"` + tc.body + `"`)} },
		}
		if tc.fault == FaultInvalidUTF8 {
			cases["actor"] = func(e *Envelope) { e.Actor = tc.body }
			cases["metadata"] = func(e *Envelope) { e.Metadata = Metadata{tc.body: json.RawMessage(`1`)} }
			cases["aggregate_id"] = func(e *Envelope) { e.AggregateID = "Order-" + tc.body }
		}
		for field, mut := range cases {
			t.Run(tc.name+"/"+field, func(t *testing.T) {
				e := base()
				mut(&e)
				_, err := Prepare(e, DefaultLimits(), nil)
				var ve *ValidationError
				if !errors.As(err, &ve) || ve.Code != CodeInvalidText || !strings.HasPrefix(ve.Field, field) {
					t.Fatalf("Prepare with %s %q = %v, want invalid_text on %s", field, tc.body, err, field)
				}
			})
		}
	}
}
