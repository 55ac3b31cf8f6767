package recordformat_test

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/recordformat"
)

// kafkaSpecs are the attribute names of the Kafka protocol binding: "ce_"
// and the name, but datacontenttype, which is the content-type header.
var kafkaSpecs = spec.WithPrefixMatchExact(func(name string) string {
	if name == "datacontenttype" {
		return "content-type"
	}
	return "ce_" + name
}, "ce_")

// kafkaMessage reads a franz-go record as the CloudEvents SDK's binding
// reads a message of the Kafka protocol binding: structured when
// content-type is an event format, binary when ce_specversion names a
// version; every ce_ header is an attribute or an extension, the value is
// the data.
type kafkaMessage struct {
	r       *kgo.Record
	version spec.Version
	format  format.Format
}

var (
	_ binding.MessageReader         = (*kafkaMessage)(nil)
	_ binding.MessageMetadataReader = (*kafkaMessage)(nil)
)

func newKafkaMessage(r *kgo.Record) *kafkaMessage {
	m := &kafkaMessage{r: r}
	if m.format = format.Lookup(m.header("content-type")); m.format == nil {
		m.version = kafkaSpecs.Version(m.header(kafkaSpecs.PrefixedSpecVersionName()))
	}
	return m
}

func (m *kafkaMessage) header(k string) string {
	for _, h := range m.r.Headers {
		if h.Key == k {
			return string(h.Value)
		}
	}
	return ""
}

func (m *kafkaMessage) ReadEncoding() binding.Encoding {
	switch {
	case m.version != nil:
		return binding.EncodingBinary
	case m.format != nil:
		return binding.EncodingStructured
	}
	return binding.EncodingUnknown
}

func (m *kafkaMessage) ReadStructured(ctx context.Context, w binding.StructuredWriter) error {
	if m.format == nil {
		return binding.ErrNotStructured
	}
	return w.SetStructuredEvent(ctx, m.format, bytes.NewReader(m.r.Value))
}

func (m *kafkaMessage) ReadBinary(_ context.Context, w binding.BinaryWriter) error {
	if m.version == nil {
		return binding.ErrNotBinary
	}
	for _, h := range m.r.Headers {
		if a := m.version.Attribute(h.Key); a != nil {
			if err := w.SetAttribute(a, string(h.Value)); err != nil {
				return err
			}
		} else if name, ok := strings.CutPrefix(h.Key, "ce_"); ok {
			if err := w.SetExtension(name, string(h.Value)); err != nil {
				return err
			}
		}
	}
	if m.r.Value != nil {
		return w.SetData(bytes.NewReader(m.r.Value))
	}
	return nil
}

func (m *kafkaMessage) GetAttribute(k spec.Kind) (spec.Attribute, any) {
	a := m.version.AttributeFromKind(k)
	if a == nil {
		return nil, nil
	}
	if v := m.header(a.PrefixedName()); v != "" {
		return a, v
	}
	return a, nil
}

func (m *kafkaMessage) GetExtension(name string) any {
	if v := m.header("ce_" + name); v != "" {
		return v
	}
	return nil
}

// The CloudEvents SDK for Go reads our CloudEvents records (its binding
// and spec packages, the Kafka binding's header names): a valid CloudEvent
// 1.0 in binary mode, every attribute and extension as docs/kafka.md maps
// it, extension names within the spec's 20 characters, the data the
// event's data byte for byte.
func TestCloudEventsSDKReadsOurRecords(t *testing.T) {
	old := event.MaxExtensionNameLength
	event.MaxExtensionNameLength = 20 // "SHOULD NOT exceed 20 characters"
	t.Cleanup(func() { event.MaxExtensionNameLength = old })

	fromCE := full()
	fromCE.EventID = envelope.CloudEventID("https://example.com/shop", "order-1-placed")
	fromCE.Metadata["ce_id"], fromCE.Metadata["ce_source"] = json.RawMessage(`"order-1-placed"`), json.RawMessage(`"https://example.com/shop"`)
	// The producer's own extensions, as the API keeps them (docs/api.md#cloudevents-input).
	fromCE.Metadata["ce_comexamplex"] = json.RawMessage(`"abc"`)
	fromCE.Metadata["ce_comexamplecount"] = json.RawMessage(`3`) // not a string: in ce_metadata
	for _, c := range []struct {
		name       string
		e          envelope.Envelope
		source, id string
	}{
		{name: "event of the event API", e: full(), source: "urn:sluice:Order", id: full().EventID},
		{name: "event appended as a CloudEvent", e: fromCE, source: "https://example.com/shop", id: "order-1-placed"},
		{name: "command", e: envelope.Envelope{EventID: "6f0e3a58-6b1a-4d7e-9d43-3f5d2c1a9e01", EventType: "UPDATE_INSTANCE",
			Kind: envelope.KindCommand, AggregateType: envelope.AggregateTypeInstance, AggregateID: "shop:orders:42", SequenceNumber: 2,
			Position: 9, ExpectedSeq: ptr(int64(1)), Data: json.RawMessage(`{"data":{"total":1}}`), Metadata: meta("command_id", `"k-1"`)},
			source: "urn:sluice:Instance", id: "6f0e3a58-6b1a-4d7e-9d43-3f5d2c1a9e01"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, line := stored(t, c.e)
			r := recordformat.Encode(recordformat.CloudEvents, e, line)
			msg := newKafkaMessage(r)
			if enc := msg.ReadEncoding(); enc != binding.EncodingBinary {
				t.Fatalf("encoding %v, want binary", enc)
			}
			ev, err := binding.ToEvent(context.Background(), msg)
			if err != nil {
				t.Fatalf("the SDK refuses the record: %v", err)
			}
			if err := ev.Validate(); err != nil {
				t.Fatalf("not a valid CloudEvent: %v", err)
			}
			checks := []struct{ attr, got, want string }{
				{"specversion", ev.SpecVersion(), "1.0"},
				{"id", ev.ID(), c.id},
				{"source", ev.Source(), c.source},
				{"type", ev.Type(), e.EventType},
				{"subject", ev.Subject(), e.AggregateID},
				{"datacontenttype", ev.DataContentType(), "application/json"},
				{"dataschema", ev.DataSchema(), "urn:sluice:schema:" + e.EventType + ":" + itoa(int64(e.SchemaVersion))},
				{"time", ev.Time().UTC().Format(time.RFC3339Nano), e.OccurredAt.Time().Format(time.RFC3339Nano)},
			}
			for _, ch := range checks {
				if ch.got != ch.want {
					t.Errorf("%s = %q, want %q", ch.attr, ch.got, ch.want)
				}
			}
			if got := envelope.CloudEventID(ev.Source(), ev.ID()); got != e.EventID {
				t.Errorf("event_id from (source, id) = %s, want %s", got, e.EventID)
			}
			if !bytes.Equal(ev.Data(), e.Data) {
				t.Errorf("data %s, want %s", ev.Data(), e.Data)
			}
			var data map[string]any
			if err := ev.DataAs(&data); err != nil {
				t.Errorf("DataAs: %v", err)
			}
			want := map[string]string{
				"kind": string(e.Kind), "aggregatetype": e.AggregateType, "sequencenumber": itoa(e.SequenceNumber),
				"position": itoa(e.Position), "schemaversion": itoa(int64(e.SchemaVersion)),
			}
			if e.ExpectedSeq != nil {
				want["expectedseq"] = itoa(*e.ExpectedSeq)
			}
			if e.Actor != "" {
				want["actor"] = e.Actor
			}
			rest := maps.Clone(e.Metadata)
			for key, ext := range map[string]string{"command_id": "commandid", "correlation_id": "correlationid",
				"causation_id": "causationid", "principal": "principal", "traceparent": "traceparent", "tracestate": "tracestate"} {
				if v, ok := e.Metadata.String(key); ok {
					want[ext] = v
					delete(rest, key)
				}
			}
			// The producer's extensions (metadata ce_<name>, a string) but
			// those named like an attribute of CloudEvents or sluice.
			reserved := []string{"id", "source", "specversion", "type", "datacontenttype", "dataschema", "subject", "time", "data",
				"kind", "aggregatetype", "sequencenumber", "position", "expectedseq", "actor", "actorjson", "schemaversion", "metadata",
				"commandid", "correlationid", "causationid", "principal", "traceparent", "tracestate"}
			for key := range e.Metadata {
				name, ok := strings.CutPrefix(key, "ce_")
				if v, isStr := e.Metadata.String(key); ok && isStr && v != "" && !slices.Contains(reserved, name) {
					want[name] = v
					delete(rest, key)
				}
			}
			if len(rest) > 0 {
				b, _ := json.Marshal(rest)
				want["metadata"] = string(b)
			}
			got := ev.Extensions()
			if _, ok := e.Metadata["ce_comexamplex"]; ok && got["comexamplex"] != "abc" {
				t.Errorf("extension comexamplex = %v, want \"abc\" (the producer's own)", got["comexamplex"])
			}
			if !slices.Equal(slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want))) {
				t.Fatalf("extensions %v, want %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
			}
			for name, w := range want {
				g, _ := got[name].(string)
				if name == "metadata" {
					if !jsonEqual(t, []byte(g), []byte(w)) {
						t.Errorf("extension metadata = %s, want %s", g, w)
					}
					continue
				}
				if g != w {
					t.Errorf("extension %s = %q, want %q", name, g, w)
				}
			}
			// The SDK's event, written back through its own structured
			// JSON format, is the same CloudEvent.
			b, err := format.JSON.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			var again event.Event
			if err := format.JSON.Unmarshal(b, &again); err != nil || again.ID() != ev.ID() || !jsonEqual(t, again.Data(), e.Data) {
				t.Fatalf("JSON format round trip: %v %s", err, b)
			}
		})
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
