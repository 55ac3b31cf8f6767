package declarative

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// docsOf runs an example over its sample events and returns the
// documents' sources by id (sluice bookkeeping removed).
func docsOf(t *testing.T, name string) map[string]map[string]any {
	t.Helper()
	specs, err := LoadFiles("../../examples/projections/" + name + ".yaml")
	if err != nil {
		t.Fatal(err)
	}
	ps, err := Compile(specs)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("../../examples/projections/" + name + ".events.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out bytes.Buffer
	if err := RunSample(context.Background(), ps, f, &out); err != nil {
		t.Fatal(err)
	}
	docs := map[string]map[string]any{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var d SampleDoc
		if err := json.Unmarshal([]byte(line), &d); err != nil {
			t.Fatal(err)
		}
		var src map[string]any
		if err := json.Unmarshal(d.Source, &src); err != nil {
			t.Fatal(err)
		}
		delete(src, "sluice")
		docs[d.ID] = src
	}
	return docs
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestExamples(t *testing.T) {
	cases := []struct {
		example string
		want    map[string]string
	}{
		{"order_totals", map[string]string{
			"customer-c-7": `{"customer_id":"c-7","deleted":false,"last_order_at":"2026-11-21T13:00:00.000Z","order_ids":["o-1","o-2"],"orders":1,"total":30}`,
			"customer-c-9": `{"customer_id":"c-9","deleted":false,"last_order_at":"2026-11-21T12:00:00.000Z","order_ids":["o-3"],"orders":1,"total":5}`,
		}},
		{"device_status", map[string]string{
			"dev-1": `{"deleted":false,"device_id":"dev-1","last_reading":{"celsius":40,"rpm":0},"status":"ok","updated_at":"2026-11-21T10:06:00.000Z"}`,
			"dev-2": `{"deleted":true}`,
		}},
		{"daily_counts", map[string]string{
			"2026-11-21:order_placed":    `{"count":2,"day":"2026-11-21","deleted":false,"event_type":"ORDER_PLACED"}`,
			"2026-11-22:order_cancelled": `{"count":1,"day":"2026-11-22","deleted":false,"event_type":"ORDER_CANCELLED"}`,
			"2026-11-22:reading_taken":   `{"count":1,"day":"2026-11-22","deleted":false,"event_type":"READING_TAKEN"}`,
			"2026-11-22:order_placed":    `{"count":1,"day":"2026-11-22","deleted":false,"event_type":"ORDER_PLACED"}`,
		}},
	}
	for _, tc := range cases {
		t.Run(tc.example, func(t *testing.T) {
			got := docsOf(t, tc.example)
			if len(got) != len(tc.want) {
				t.Errorf("%d documents, want %d: %v", len(got), len(tc.want), got)
			}
			for id, want := range tc.want {
				if g := jsonOf(got[id]); g != want {
					t.Errorf("%s:\n got %s\nwant %s", id, g, want)
				}
			}
		})
	}
}
