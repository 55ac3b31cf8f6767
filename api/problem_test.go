package api

import (
	"net/http"
	"testing"
)

// An Error's wire form is one RFC 9457 problem document with every member
// of Error once, in a fixed order: the members a client reads are pinned
// byte for byte.
func TestProblemWireForm(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	pending := 2
	for _, tc := range []struct {
		name string
		err  *Error
		want string
	}{
		{"minimal", newError(http.StatusBadRequest, CodeMalformedJSON, "", "not valid JSON: x"),
			`{"type":"urn:sluice:problem:malformed_json","title":"Malformed JSON","status":400,"detail":"not valid JSON: x","code":"malformed_json","error":"malformed_json","message":"not valid JSON: x"}`},
		{"every member", &Error{Status: http.StatusConflict, Code: CodeConflict, Message: "m <&>", Field: "expected_seq", Limit: "depth 3",
			Permission: "append on stream:A/1", ExpectedSeq: n(1), ActualSeq: n(2), CommandID: "c-1", SequenceNumber: n(3),
			PendingCommands: &pending, SchemaVersion: 4, Keyword: "type", Pointer: "/a"},
			`{"type":"urn:sluice:problem:optimistic_concurrency_conflict","title":"Optimistic concurrency conflict","status":409,"detail":"m <&>","code":"optimistic_concurrency_conflict","field":"expected_seq","limit":"depth 3","permission":"append on stream:A/1","error":"optimistic_concurrency_conflict","message":"m <&>","expected_seq":1,"actual_seq":2,"command_id":"c-1","sequence_number":3,"pending_commands":2,"schema_version":4,"keyword":"type"}`},
		{"schema error with the root pointer", &Error{Status: http.StatusUnprocessableEntity, Code: CodeSchemaInvalid, Message: "m", SchemaVersion: 1, Keyword: "required"},
			`{"type":"urn:sluice:problem:schema_validation_failed","title":"Data does not match the event type's schema","status":422,"detail":"m","code":"schema_validation_failed","error":"schema_validation_failed","message":"m","schema_version":1,"keyword":"required","pointer":""}`},
		{"unknown code", &Error{Status: http.StatusTeapot, Code: "x", Message: "m"},
			`{"type":"urn:sluice:problem:x","title":"I'm a teapot","status":418,"detail":"m","code":"x","error":"x","message":"m"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := tc.err.MarshalJSON() // as writeError sends it: no HTML escaping
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tc.want {
				t.Fatalf("got  %s\nwant %s", b, tc.want)
			}
		})
	}
}
