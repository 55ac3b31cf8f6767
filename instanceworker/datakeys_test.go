package instanceworker_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/shared/claim"
)

// TestDataKeysRejectedAtDecide: a command whose new state holds a key the
// instance document cannot hold (appended by a producer that bypassed the
// API, or stored before the API refused it) is rejected by the decide
// step with readmodel.ValidateData's reason — no domain event, no dead
// letter, no stale document — and the instance keeps taking commands
// (issue 26.3). Before, the event was appended and the document write
// failed.
func TestDataKeysRejectedAtDecide(t *testing.T) {
	e := newEnv(t, 2)
	bad := []map[string]any{
		{"_id": "x"}, {"_source": map[string]any{}}, {"_routing": "r"}, {"_version": 2}, {"_index.x": 1},
		{"": 1}, {" ": 1}, {"a..b": 1}, {".a": 1}, {"a.": 1}, {"x": map[string]any{"": 1}}, {"x": []any{map[string]any{"y.": 1}}},
		{"db": "other"}, {"deleted": true}, {"sequence_number.x": 1},
	}
	var creates []cmd
	for i, d := range bad {
		id := fmt.Sprint("bad-", i)
		creates = append(creates, e.appendCmd(instanceworker.CreateInstance, "shop", "orders", id, create("shop", "orders", strp(id), d)))
	}
	ok1 := e.appendCmd(instanceworker.CreateInstance, "shop", "orders", "ok", create("shop", "orders", strp("ok"), map[string]any{"n": 1}))
	var patches []cmd
	for _, d := range bad[:5] {
		patches = append(patches, e.appendCmd(instanceworker.UpdateInstance, "shop", "orders", "ok", map[string]any{"data": d}))
	}
	ok2 := e.appendCmd(instanceworker.UpdateInstance, "shop", "orders", "ok", map[string]any{"data": map[string]any{"n": 2, "_x": map[string]any{"_id": 1}}})
	all := append(append(append([]cmd{}, creates...), ok1, ok2), patches...)
	e.publish(all...)
	e.startInProcess(nil)
	testenv.WaitFor(t, 60*time.Second, "every command finished", func() bool {
		for _, st := range e.statuses(all...) {
			if st != claim.StatusDone && st != claim.StatusDead {
				return false
			}
		}
		return true
	})
	for i, c := range append(append([]cmd{}, creates...), patches...) {
		o := e.outcome(c)
		if st := e.statuses(c)[c.ev.Envelope.EventID]; st != claim.StatusDone || o.Result != claim.OutcomeRejected ||
			!strings.HasPrefix(o.Reason, instanceworker.ReasonInvalidData+": data key") {
			t.Errorf("command %d (%s): status %s outcome %+v, want rejected with %q…", i, c.ev.Envelope.Data, st, o, instanceworker.ReasonInvalidData)
		}
	}
	for _, c := range []cmd{ok1, ok2} {
		if o := e.outcome(c); o.Result != claim.OutcomeApplied {
			t.Errorf("%s: outcome %+v, want applied", c.ev.Envelope.EventType, o)
		}
	}
	events := e.domainEvents()
	for agg := range events {
		if strings.HasPrefix(agg, "shop:orders:bad-") {
			t.Errorf("a rejected create appended a domain event for %s", agg)
		}
	}
	if got := events["shop:orders:ok"]; len(got) != 2 {
		t.Errorf("shop:orders:ok domain events %v, want the create and one update", got)
	}
	if v, src, found := e.doc("shop", "orders", "ok"); !found || src["n"] != float64(2) {
		t.Errorf("document ok: version %d %v", v, src)
	}
}
