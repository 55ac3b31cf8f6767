package relay

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A parked record's JSON (the admin API's parked list) names its fields
// in snake_case, its headers as {key, value}, and leaves the resolution
// out while the row is parked.
func TestParkedRecordJSON(t *testing.T) {
	at := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	parked := ParkedRecord{Relay: "r", Shard: 1, Position: 42, EventID: "e-1", Topic: "t", Key: []byte("k"),
		Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("v")}}, EnvelopeBytes: 9, SegmentKey: "s", Reason: ReasonTooLarge,
		Error: "too big", Attempts: 3, ParkedAt: at, State: ParkedStateParked}
	republished := parked
	republished.State, republished.ResolvedAt, republished.ResolvedTopic = ParkedStateRepublished, at.Add(time.Minute), "t2"
	republished.Envelope = []byte(`{"a":1}`)
	base := map[string]any{"relay": "r", "shard": 1.0, "position": 42.0, "event_id": "e-1", "topic": "t", "key": "aw==",
		"headers": []any{map[string]any{"key": "h", "value": "dg=="}}, "envelope_bytes": 9.0, "segment_key": "s",
		"reason": ReasonTooLarge, "error": "too big", "attempts": 3.0, "parked_at": "2026-11-28T10:00:00Z", "state": "parked"}
	withResolution := map[string]any{}
	for k, v := range base {
		withResolution[k] = v
	}
	withResolution["state"], withResolution["resolved_at"], withResolution["resolved_topic"] = "republished", "2026-11-28T10:01:00Z", "t2"
	withResolution["envelope"] = "eyJhIjoxfQ=="
	for _, tc := range []struct {
		name string
		rec  ParkedRecord
		want map[string]any
	}{
		{"parked", parked, base},
		{"republished, with its envelope", republished, withResolution},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.rec)
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("JSON\n got %v\nwant %v", got, tc.want)
			}
		})
	}
}
