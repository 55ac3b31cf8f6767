package projectionworker_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/projectionworker/declarative"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/worker"
)

func orderEvent(e *env, typ, order string, seq int64, customer string, amount float64) envelope.Envelope {
	b, _ := json.Marshal(map[string]any{"customer_id": customer, "amount": amount})
	e.pos++
	return envelope.Envelope{EventID: uuid.NewString(), EventType: typ, Kind: envelope.KindDomain,
		AggregateType: "Order", AggregateID: order, SequenceNumber: seq, Position: e.pos,
		OccurredAt: envelope.NewTimestamp(time.Unix(1_700_000_000+e.pos, 0)), Data: b, SchemaVersion: 1}
}

// The declarative order_totals example runs in the worker like a Go
// projection: events of many Order aggregates, spread over partitions and
// batches, add up in one document per customer (read from Elasticsearch,
// and within a batch from the batch's own writes); a replayed event is not
// counted twice; an event whose expression fails goes to the DLQ with the
// expression.
func TestDeclarativeProjectionInTheWorker(t *testing.T) {
	e := newEnv(t, 3)
	specs, err := declarative.LoadFiles("../examples/projections/order_totals.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ps, err := declarative.Compile(specs)
	if err != nil {
		t.Fatal(err)
	}
	var evs []envelope.Envelope
	want := map[string]float64{}
	for i := range 40 {
		cust := []string{"c-1", "c-2", "c-3"}[i%3]
		evs = append(evs, orderEvent(e, "ORDER_PLACED", "o-"+string(rune('a'+i%26))+string(rune('a'+i/26)), 1, cust, float64(i+1)))
		want[cust] += float64(i + 1)
	}
	replay := evs[5]
	cancel := orderEvent(e, "ORDER_CANCELLED", evs[0].AggregateID, 2, "c-1", 1)
	want["c-1"]--
	bad := orderEvent(e, "ORDER_PLACED", "o-bad", 1, "c-1", 0)
	bad.Data = []byte(`{"customer_id":"c-1"}`) // no amount: the increment's expression fails
	e.publish(evs[:20]...)
	metrics := prometheus.NewRegistry()
	_, stop := e.startInProcess(nil, metrics, projectionworker.Spec{Projection: ps[0]})
	e.publish(evs[20:]...)
	e.publish(cancel, replay, bad)
	testenv.WaitFor(t, 60*time.Second, "caught up", e.caughtUp("projection-order_totals-v1"))
	stop()
	for cust, total := range want {
		d := e.get("sluice_shop_order_totals_v1", "customer-"+cust)
		if !d.Found || d.Source["total"] != total {
			t.Errorf("%s: found %v total %v, want %v (%v)", cust, d.Found, d.Source["total"], total, d.Source)
		}
	}
	if ids := e.search("sluice_shop_order_totals", map[string]any{"match_all": map[string]any{}}); len(ids) != 3 {
		t.Errorf("read alias shows %v", ids)
	}
	dlq := e.dlqRecords()
	if len(dlq) != 1 || !bytes.Contains(dlq[0].Value, []byte(bad.EventID)) {
		t.Fatalf("DLQ holds %d records, want the bad event", len(dlq))
	}
	var dl worker.DLQRecord
	if err := json.Unmarshal(dlq[0].Value, &dl); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(dl.Error, `expression "event.data.amount"`) || !strings.Contains(dl.Error, "order_totals.yaml:14:9") ||
		!strings.Contains(dl.OriginalValue, bad.EventID) {
		t.Errorf("dead letter: error %q, original %q", dl.Error, dl.OriginalValue)
	}
}
