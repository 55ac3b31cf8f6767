package instanceworker_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/worker"
)

// TestInvalidTextDeadLettered: a command envelope with a lone surrogate
// escape or invalid UTF-8 (in an id, a data key or a data value) reaching
// the worker — published by a producer that bypassed the store, or stored
// before the store refused it — fails the runtime's parse step
// (envelope.Parse) and becomes a dead letter with the reason, instead of
// being applied with U+FFFD in place of the text (issue 26.2). The
// partition goes on.
func TestInvalidTextDeadLettered(t *testing.T) {
	e := newEnv(t, 1)
	tmpl := e.appendCmd(instanceworker.CreateInstance, "shop", "orders", "t", create("shop", "orders", strp("t"), map[string]any{"note": "NOTE", "KEY": 1}))
	raw := string(tmpl.ev.Raw)
	if !strings.Contains(raw, `"NOTE"`) || !strings.Contains(raw, `"KEY"`) {
		t.Fatalf("template envelope: %s", raw)
	}
	bads := []struct{ from, to string }{
		{`"NOTE"`, `"\ud800"`}, {`"NOTE"`, `"\udbff"`}, {`"NOTE"`, `"x\udc00"`}, {`"NOTE"`, `"\udc00\ud800"`},
		{`"NOTE"`, "\"\xff\""}, {`"NOTE"`, "\"\xed\xa0\x80\""},
		{`"KEY"`, `"\udfff"`}, {`"KEY"`, "\"k\xc0\xaf\""},
	}
	for _, b := range bads {
		e.publishRaw([]byte("Instance:shop:orders:t"), []byte(strings.Replace(raw, b.from, b.to, 1)))
	}
	ok := e.appendCmd(instanceworker.CreateInstance, "shop", "orders", "ok", create("shop", "orders", strp("ok"), map[string]any{"v": 1}))
	e.publish(ok)
	e.startInProcess(nil)
	testenv.WaitFor(t, 30*time.Second, "ok done", func() bool { return e.allDone(ok) })
	testenv.WaitFor(t, 30*time.Second, "every bad record dead-lettered", func() bool { return len(e.dlqRecords()) >= len(bads) })
	recs := e.dlqRecords()
	if len(recs) != len(bads) {
		t.Fatalf("%d dead letters, want %d", len(recs), len(bads))
	}
	for _, r := range recs {
		var d worker.DLQRecord
		if err := json.Unmarshal(r.Value, &d); err != nil {
			t.Fatal(err)
		}
		if d.ErrorClass != worker.ClassParse || !strings.Contains(d.Error, "data.") ||
			!(strings.Contains(d.Error, "lone UTF-16 surrogate") || strings.Contains(d.Error, "not valid UTF-8")) {
			t.Errorf("dead letter class %q error %q, want a parse error naming the text fault and its field", d.ErrorClass, d.Error)
		}
	}
	if got := e.domainEvents()["shop:orders:t"]; len(got) != 0 {
		t.Errorf("an envelope with invalid text was applied: domain events %v", got)
	}
}
