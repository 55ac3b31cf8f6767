package pipeline_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/schema"
	"github.com/sluicehq/sluice/shared/envelope"
)

// A CloudEvent of a registered type, appended through the API the table
// builds (EVENT_SCHEMA_MODE=strict from the configuration), reaches Kafka
// with its CloudEvents type unchanged as event_type and the schema version
// it was checked against; invalid data and an unregistered type are
// refused at the door.
func TestCloudEventsTypeThroughKafkaWithSchema(t *testing.T) {
	e := pipelinetest.Start(t, pipelinetest.Options{
		Services: []string{pipeline.API, pipeline.Relay},
		Env:      map[string]string{"EVENT_SCHEMA_MODE": "strict", "EVENT_SCHEMA_REFRESH_INTERVAL": "50ms"},
	})
	const typ = "com.example.order.placed"
	reg := schema.New(e.Pool, schema.Config{}, nil)
	if _, err := reg.Register(context.Background(), typ, []byte(`{"type":"object","properties":{"total":{"type":"number"}},"required":["total"]}`), schema.RegisterOptions{}); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	postBody := func(body string) (int, string) {
		t.Helper()
		resp, err := client.Post(e.APIURL+"/v1/streams/Order/ce-1/events", "application/cloudevents+json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	post := func(body string) int { t.Helper(); st, _ := postBody(body); return st }
	invalid := `{"specversion":"1.0","id":"x0","source":"/shop","type":"` + typ + `","data":{"total":"ten"}}`
	// Evidence, not a pause for the API's refresh interval: the API checks
	// the type against the registered schema (a refusal naming /total,
	// which stores nothing). The deadline is a hang guard.
	pipelinetest.WaitFor(t, 20*time.Second, "the API to know the registered schema", func() bool {
		st, body := postBody(invalid)
		return st == 422 && strings.Contains(body, "/total")
	})
	for _, tc := range []struct {
		name, body string
		status     int
	}{
		{"invalid data", `{"specversion":"1.0","id":"x1","source":"/shop","type":"` + typ + `","data":{"total":"ten"}}`, 422},
		{"unregistered type, strict", `{"specversion":"1.0","id":"x2","source":"/shop","type":"com.example.unknown","data":{}}`, 422},
		{"valid", `{"specversion":"1.0","id":"x3","source":"/shop","type":"` + typ + `","data":{"total":10}}`, 201},
	} {
		if got := post(tc.body); got != tc.status {
			t.Fatalf("%s: %d, want %d", tc.name, got, tc.status)
		}
	}
	var env envelope.Envelope
	pipelinetest.WaitFor(t, 20*time.Second, "the event in Kafka", func() bool {
		for _, r := range testenv.ReadTopic(t, e.Kafka.Brokers, e.Config.Kafka.EventsTopic) {
			if err := json.Unmarshal(r.Value, &env); err == nil && env.AggregateID == "ce-1" {
				return true
			}
		}
		return false
	})
	if env.EventType != typ || env.SchemaVersion != 1 {
		t.Fatalf("in Kafka: event_type %q schema_version %d, want %q and 1", env.EventType, env.SchemaVersion, typ)
	}
	if ce, _ := env.Metadata.String("ce_type"); ce != typ {
		t.Fatalf("metadata.ce_type %q", ce)
	}
}
