package recordformat_test

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/recordformat"
)

// wantEnvelopeHeaders is docs/kafka.md#the-envelope-format's header list of
// e, built the plain way (one conversion per value).
func wantEnvelopeHeaders(e envelope.Envelope) []kgo.RecordHeader {
	h := []kgo.RecordHeader{
		{Key: "event_id", Value: []byte(e.EventID)},
		{Key: "event_type", Value: []byte(e.EventType)},
		{Key: "kind", Value: []byte(e.Kind)},
		{Key: "aggregate_type", Value: []byte(e.AggregateType)},
		{Key: "aggregate_id", Value: []byte(e.AggregateID)},
		{Key: "sequence_number", Value: []byte(strconv.FormatInt(e.SequenceNumber, 10))},
		{Key: "position", Value: []byte(strconv.FormatInt(e.Position, 10))},
		{Key: "content-type", Value: []byte("application/json")},
	}
	for _, k := range []string{"traceparent", "tracestate", "principal"} {
		if v, _ := e.Metadata.String(k); v != "" {
			h = append(h, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
	}
	return h
}

// The envelope record's key, value and headers are exactly the format's,
// whatever metadata the event carries, and its key and header values,
// which share one byte array, are each capacity-limited: appending to one
// never changes another.
func TestEnvelopeRecord(t *testing.T) {
	cases := []struct {
		name string
		e    func() envelope.Envelope
	}{
		{"every field", full},
		{"no metadata", func() envelope.Envelope {
			return envelope.Envelope{EventID: "5f0e3a58-6b1a-4d7e-9d43-3f5d2c1a9e01", EventType: "OrderPlaced", Kind: envelope.KindDomain,
				AggregateType: "Order", AggregateID: "o-2", SequenceNumber: 1, Position: 1}
		}},
		{"ordering key empty", func() envelope.Envelope {
			e := full()
			e.Metadata["ordering_key"] = json.RawMessage(`""`)
			return e
		}},
		{"ordering key and principal escaped", func() envelope.Envelope {
			e := full()
			e.Metadata["ordering_key"] = json.RawMessage(`"t\u00fcnant"`)
			e.Metadata["principal"] = json.RawMessage(`"a\"b"`)
			delete(e.Metadata, "tracestate")
			return e
		}},
		{"largest positions", func() envelope.Envelope {
			e := full()
			e.SequenceNumber, e.Position = 1<<63-1, 1<<63-1
			delete(e.Metadata, "ordering_key")
			return e
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, line := stored(t, c.e())
			r := recordformat.Encode(recordformat.Envelope, e, line)
			if !bytes.Equal(r.Key, envelope.KafkaKey(e)) {
				t.Errorf("key %q, want %q", r.Key, envelope.KafkaKey(e))
			}
			if !bytes.Equal(r.Value, line) {
				t.Errorf("value %q, want the line %q", r.Value, line)
			}
			want := wantEnvelopeHeaders(e)
			if len(r.Headers) != len(want) {
				t.Fatalf("%d headers %v, want %d %v", len(r.Headers), r.Headers, len(want), want)
			}
			for i, h := range r.Headers {
				if h.Key != want[i].Key || !bytes.Equal(h.Value, want[i].Value) {
					t.Errorf("header %d: %s=%q, want %s=%q", i, h.Key, h.Value, want[i].Key, want[i].Value)
				}
			}
			t.Run("appending to one value changes no other", func(t *testing.T) {
				key := append(r.Key, "!!!!"...)
				_ = key
				for i := range r.Headers {
					v := append(r.Headers[i].Value, "!!!!"...)
					_ = v
				}
				if !bytes.Equal(r.Key, envelope.KafkaKey(e)) {
					t.Errorf("key %q after appends, want %q", r.Key, envelope.KafkaKey(e))
				}
				for i, h := range r.Headers {
					if !bytes.Equal(h.Value, want[i].Value) {
						t.Errorf("header %s=%q after appends, want %q", h.Key, h.Value, want[i].Value)
					}
				}
			})
		})
	}
}
