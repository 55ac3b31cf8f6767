package envelope

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestMetadataFaultOrder checks that an envelope whose metadata has several
// members at fault always gets the same error: the one of the first key in
// byte order (Validate's doc comment), whatever Go's map iteration order.
// Each case runs many times, so a choice left to the map's order would
// show up as a different field or reason.
func TestMetadataFaultOrder(t *testing.T) {
	const runs = 200
	many := Metadata{}
	for i := 19; i >= 0; i-- {
		many[fmt.Sprintf("k%02d", i)] = json.RawMessage(`{`)
	}
	tests := []struct {
		name   string
		meta   Metadata
		field  string
		code   ErrorCode
		reason string // a substring of the reason, "" to skip
	}{
		{name: "two invalid JSON values", field: "metadata.a", code: CodeMalformed,
			meta: Metadata{"b": json.RawMessage(`{`), "a": json.RawMessage(`nope`)}},
		{name: "two keys of invalid text", field: "metadata", code: CodeInvalidText, reason: "(0xfe)",
			meta: Metadata{"\xffz": json.RawMessage(`1`), "\xfea": json.RawMessage(`1`)}},
		{name: "invalid text before invalid JSON", field: "metadata.a", code: CodeInvalidText,
			meta: Metadata{"b": json.RawMessage(`{`), "a": json.RawMessage("\"\xff\"")}},
		{name: "invalid JSON before invalid text", field: "metadata.a", code: CodeMalformed,
			meta: Metadata{"a": json.RawMessage(`{`), "b": json.RawMessage("\"\xff\"")}},
		{name: "good keys around a bad one", field: "metadata.m", code: CodeMalformed,
			meta: Metadata{"a": json.RawMessage(`1`), "m": json.RawMessage(`[`), "z": json.RawMessage(`"z"`)}},
		{name: "a member fault before a well-known key's", field: "metadata.zz", code: CodeMalformed,
			meta: Metadata{MetaCommandID: json.RawMessage(`"a b"`), "zz": json.RawMessage(`{`)}},
		{name: "well-known keys in their fixed order", field: "metadata." + MetaCorrelationID, code: CodeInvalid,
			meta: Metadata{MetaTraceparent: json.RawMessage(`1`), MetaCorrelationID: json.RawMessage(`2`), MetaSpanID: json.RawMessage(`3`)}},
		{name: "twenty bad keys", field: "metadata.k00", code: CodeMalformed, meta: many},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := Envelope{EventID: "0b4f2a3c-9d1e-4c8a-b7e2-5f6a7b8c9d0e", EventType: "ORDER_PLACED",
				Kind: KindCommand, AggregateType: "Order", AggregateID: "o-1", Data: json.RawMessage(`{}`),
				SchemaVersion: 1, Metadata: tt.meta}
			var first *ValidationError
			for run := range runs {
				var ve *ValidationError
				if err := Validate(e, Limits{}); !errors.As(err, &ve) {
					t.Fatalf("run %d: Validate = %v, want a *ValidationError", run, err)
				}
				if first == nil {
					first = ve
					if ve.Field != tt.field || ve.Code != tt.code || !strings.Contains(ve.Reason, tt.reason) {
						t.Fatalf("Validate = %+v, want field %q, code %q, reason with %q", ve, tt.field, tt.code, tt.reason)
					}
					continue
				}
				if *ve != *first {
					t.Fatalf("run %d: Validate = %+v, run 0 gave %+v", run, ve, first)
				}
			}
		})
	}
}
