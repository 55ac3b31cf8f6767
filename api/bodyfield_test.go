package api

import "testing"

// A refusal of the request body as a whole (not JSON, not an object, a
// body where none is taken) names field "body" on the event routes too,
// JSON or CloudEvents: it was left without a field.
func TestWholeBodyRefusalsNameBody(t *testing.T) {
	a := eventAPI(t, false)
	const ce = "Content-Type: application/cloudevents+json"
	const ceBatch = "Content-Type: application/cloudevents-batch+json"
	cases := []struct {
		name, body, header string
		status             int
		code, field        string
	}{
		{"append an array", `[]`, "", 422, CodeValidationFailed, "body"},
		{"append malformed", `{"events":[`, "", 400, CodeMalformedJSON, "body"},
		{"append not JSON", `nope`, "", 400, CodeMalformedJSON, "body"},
		{"cloudevent an array", `[]`, ce, 422, CodeValidationFailed, "body"},
		{"cloudevent malformed", `{"type":`, ce, 400, CodeMalformedJSON, "body"},
		{"cloudevents batch malformed", `[{"type":`, ceBatch, 400, CodeMalformedJSON, "body"},
		{"cloudevents batch an object", `{}`, ceBatch, 422, CodeValidationFailed, "body"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var hs []string
			if c.header != "" {
				hs = append(hs, c.header)
			}
			r := a.do("POST", devicePath, c.body, hs...).expect(t, c.status, c.code)
			if r.str("field") != c.field {
				t.Errorf("field %q, want %q\n%s", r.str("field"), c.field, r.body)
			}
		})
	}
	if n := a.appendsCount(); n != 0 {
		t.Fatalf("refused bodies wrote %d appends", n)
	}
}
