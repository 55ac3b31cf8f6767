package worker_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/worker"
)

// TestDefaultAggregateKeyNoSharedGuard: two aggregates never share one
// sequence guard (issue 21.8). The literal id "sha256:<hex>" once had the
// same key as the long id hashing to <hex>.
func TestDefaultAggregateKeyNoSharedGuard(t *testing.T) {
	digest := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	longs := []string{strings.Repeat("x", 600), strings.Repeat("é", 300), "shop:orders:" + strings.Repeat("/", 520)}
	for _, long := range longs {
		for _, literal := range []string{"sha256:" + digest(long), "~sha256:" + digest(long)} {
			a := worker.DefaultAggregateKey(envelope.Envelope{AggregateType: "Order", AggregateID: long})
			b := worker.DefaultAggregateKey(envelope.Envelope{AggregateType: "Order", AggregateID: literal})
			if a == b {
				t.Errorf("ids %.20q… and %q share the key %q", long, literal, a)
			}
		}
	}
	for _, p := range [][2]string{{"~x", "x"}, {"~~x", "~x"}, {"sha256:", "~sha256:"}} {
		a := worker.DefaultAggregateKey(envelope.Envelope{AggregateType: "Order", AggregateID: p[0]})
		b := worker.DefaultAggregateKey(envelope.Envelope{AggregateType: "Order", AggregateID: p[1]})
		if a == b {
			t.Errorf("ids %q and %q share the key %q", p[0], p[1], a)
		}
	}
}
