package projectionworker_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/projectionworker/declarative"
	"github.com/sluicehq/sluice/schema"
	"github.com/sluicehq/sluice/schema/schematest"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/worker"
)

// exampleEvents reads the example's stored events
// (examples/schemas/OrderPlaced/events.jsonl: v1, v2 and v3 events).
func exampleEvents(t testing.TB) []envelope.Envelope {
	t.Helper()
	f, err := os.Open(filepath.Join(schematest.ExampleDir(t), "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []envelope.Envelope
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		e, err := envelope.Parse(sc.Bytes(), envelope.DefaultLimits())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

// TestDeclarativeUpcastInTheWorker: a declarative projection with
// upcast: latest (examples/schemas/OrderPlaced/revenue.yaml) folds
// OrderPlaced events stored as v1, v2 and v3 as v3 events, through both
// upcasters (v1 → v2 → v3); an event its upcaster fails on goes to the
// dead-letter topic, stored form intact, with the upcaster and the reason,
// and the others are applied.
func TestDeclarativeUpcastInTheWorker(t *testing.T) {
	e := newEnv(t, 2)
	reg := schema.New(e.pool, schema.Config{}, nil)
	schematest.RegisterOrderPlaced(t, reg)
	specs, err := declarative.LoadFiles(filepath.Join(schematest.ExampleDir(t), "revenue.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ps, err := declarative.Compile(specs)
	if err != nil {
		t.Fatal(err)
	}
	ps[0].UseUpcaster(reg)
	evs := exampleEvents(t)
	bad := evs[2]
	bad.EventID, bad.AggregateID, bad.Position = uuid.NewString(), "o-bad", 5
	bad.Data = []byte(`{"order_id":"o-bad","note":"no total"}`) // v2→v3 reads event.data.total
	e.publish(append(evs, bad)...)
	_, stop := e.startInProcess(nil, prometheus.NewRegistry(), projectionworker.Spec{Projection: ps[0]})
	testenv.WaitFor(t, 60*time.Second, "caught up", e.caughtUp("projection-order_revenue-v1"))
	stop()
	cases := []struct {
		id, want string
	}{
		// EUR: the v1 event (EUR from v1→v2, amount from v2→v3) and the v3 one.
		{"revenue-EUR", `{"amount":12.5,"currency":"EUR","deleted":false,"order_ids":["o-1","o-4"],"orders":2}`},
		{"revenue-GBP", `{"amount":5,"currency":"GBP","deleted":false,"order_ids":["o-2"],"orders":1}`},
		// USD: the v2 event without currency (the default of v2→v3).
		{"revenue-USD", `{"amount":7,"currency":"USD","deleted":false,"order_ids":["o-3"],"orders":1}`},
	}
	for _, tc := range cases {
		t.Run(tc.id, func(t *testing.T) {
			d := e.get("sluice_shop_order_revenue_v1", tc.id)
			delete(d.Source, "sluice")
			b, _ := json.Marshal(d.Source)
			if !d.Found || string(b) != tc.want {
				t.Fatalf("found %v %s, want %s", d.Found, b, tc.want)
			}
		})
	}
	t.Run("the failing event is dead-lettered as stored, with the reason", func(t *testing.T) {
		dlq := e.dlqRecords()
		if len(dlq) != 1 || !bytes.Contains(dlq[0].Value, []byte(bad.EventID)) {
			t.Fatalf("DLQ holds %d records, want the bad event", len(dlq))
		}
		var dl worker.DLQRecord
		if err := json.Unmarshal(dlq[0].Value, &dl); err != nil {
			t.Fatal(err)
		}
		why := "projection order_revenue: event " + bad.EventID + " of OrderPlaced cannot be upcast from schema v2 to v3: upcaster OrderPlaced v2→v3 (upcast-v2.yaml) failed: set amount at upcast-v2.yaml:7:11: expression \"event.data.total\" failed: no such key: total"
		if !strings.Contains(dl.Error, why) || !strings.Contains(dl.OriginalValue, `"schema_version":2`) || !strings.Contains(dl.OriginalValue, `"note":"no total"`) {
			t.Fatalf("dead letter: error %q\nwant %q\noriginal %q", dl.Error, why, dl.OriginalValue)
		}
	})
}
