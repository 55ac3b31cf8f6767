package projectionworker

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/sluicehq/sluice/shared/envelope"
)

// TestHistoryDocIsCompact: the history projection says its documents are
// compact (Op.Compact), so the bulk line copies them; the line must be the
// one json.Compact would have written, whatever the event's data looks
// like.
func TestHistoryDocIsCompact(t *testing.T) {
	aggID, err := envelope.InstanceAggregateID("shop", "order", "o-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, data string }{
		{"empty object", `{}`},
		{"spaces and newlines", "{ \"a\" : [ 1 , 2 ],\n \"b\" : { \"c\" : \"x y\" } }"},
		{"html characters", `{"a":"<b>&amp;</b>","b":"\u2028"}`},
		{"unicode and escapes", `{"ü":"\"quoted\" \\ \t tab","n":-1.5e3}`},
		{"no data", ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := envelope.Envelope{EventID: "0b7c2c8e-4f43-4c8e-9a59-3f2d7d1e2a10", EventType: "UPDATED", Kind: envelope.KindDomain,
				AggregateType: envelope.AggregateTypeInstance, AggregateID: aggID, SequenceNumber: 3, Position: 9, Actor: "u"}
			if tc.data != "" {
				e.Data = json.RawMessage(tc.data)
			}
			ops, err := History{}.Project(e)
			if err != nil {
				t.Fatal(err)
			}
			if len(ops) != 1 || !ops[0].Compact {
				t.Fatalf("ops %+v: want one op marked compact", ops)
			}
			var c bytes.Buffer
			if err := json.Compact(&c, ops[0].Doc); err != nil {
				t.Fatalf("document is not JSON: %v", err)
			}
			if !bytes.Equal(c.Bytes(), ops[0].Doc) {
				t.Fatalf("document is not compact:\n%s\ncompacted:\n%s", ops[0].Doc, c.Bytes())
			}
			copied, err := encodeItem(BulkItem{Index: "ix", Op: ops[0]})
			if err != nil {
				t.Fatal(err)
			}
			loose := ops[0]
			loose.Compact = false
			compacted, err := encodeItem(BulkItem{Index: "ix", Op: loose})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(copied, compacted) {
				t.Fatalf("bulk line differs from the compacted one:\n%s\n%s", copied, compacted)
			}
		})
	}
}
