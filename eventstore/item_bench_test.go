package eventstore

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/shared/envelope"
)

// BenchmarkNewItem is the work an append does in the caller's goroutine
// (Prepare, the canonical hash, the line template) for an instance's
// domain event with 1 KiB of data; allocs/op and B/op are the figures to
// compare (docs/benchmarks.md).
func BenchmarkNewItem(b *testing.B) {
	s := decideStore(b, false)
	e := envelope.Envelope{EventID: "0b4f2a3c-9d1e-4c8a-b7e2-5f6a7b8c9d0e", EventType: "INSTANCE_UPDATED",
		Kind: envelope.KindCommand, AggregateType: "Instance", AggregateID: "shop:orders:o-1",
		Data: json.RawMessage(`{"items":[{"sku":"a-1","qty":2,"price":12.5}],"note":"` + strings.Repeat("n", 1<<10) + `"}`),
		Metadata: envelope.Metadata{"command_id": json.RawMessage(`"c-1"`), "correlation_id": json.RawMessage(`"k"`),
			"traceparent": json.RawMessage(`"00-x"`)}}
	ctx := context.Background()
	for b.Loop() {
		if _, err := s.newItem(ctx, e); err != nil {
			b.Fatal(err)
		}
	}
}
