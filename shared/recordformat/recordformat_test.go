package recordformat_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/kafka"
	"github.com/sluicehq/sluice/shared/recordformat"
)

// stored returns e as the store reads it back: prepared, encoded, parsed
// again (what the relay encodes), and its line.
func stored(t *testing.T, e envelope.Envelope) (envelope.Envelope, []byte) {
	t.Helper()
	e, err := envelope.Prepare(e, envelope.Limits{}, func() time.Time { return time.Unix(1_800_000_000, 123_456_789) })
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	line, err := envelope.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	back, err := envelope.Parse(line, envelope.Limits{})
	if err != nil {
		t.Fatalf("parse the stored line: %v", err)
	}
	return back, line
}

func ptr[T any](v T) *T { return &v }

func meta(kv ...string) envelope.Metadata {
	m := envelope.Metadata{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = json.RawMessage(kv[i+1])
	}
	return m
}

// full is an envelope with every field set and metadata of every kind:
// the well-known keys, free keys of every JSON type, what the API keeps of
// a CloudEvent, transport keys.
func full() envelope.Envelope {
	return envelope.Envelope{
		EventID: "0b7e5a58-6b1a-4d7e-9d43-3f5d2c1a9e01", EventType: "com.example.order.placed", Kind: envelope.KindDomain,
		AggregateType: "Order", AggregateID: "order-1/ü", SequenceNumber: 7, Position: 4242,
		OccurredAt: envelope.NewTimestamp(time.Date(2026, 11, 21, 10, 0, 0, 123_000_000, time.UTC)), Actor: "alice@example.com",
		Data: json.RawMessage(`{"total":10.50,"items":[{"sku":"a","n":1}],"big":123456789012345678901234567890,"s":"<&>"}`),
		Metadata: meta(
			"command_id", `"cmd-1"`, "correlation_id", `"corr-1"`, "causation_id", `"0b7e5a58-6b1a-4d7e-9d43-3f5d2c1a9e00"`,
			"principal", `"team-a"`, "traceparent", `"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"`,
			"tracestate", `"vendor=x"`, "ordering_key", `"tenant-1"`, "kafka_topic", `"orders.custom"`,
			"free_number", `12345678901234567890.5`, "free_object", `{"a":[1,true,null]}`, "free_bool", `false`, "free_null", `null`,
			"ce_subject", `"producer-subject"`, "ce_comexampletenant", `"t1"`, "request_id", `"r-1"`),
		SchemaVersion: 3,
	}
}

// Every field of the envelope goes through both formats and comes back
// equal, metadata values byte for byte (but the C1 control of "escaped",
// which ce_metadata carries escaped: then equal as JSON).
func TestRoundTripEveryField(t *testing.T) {
	type tc struct {
		name    string
		e       func() envelope.Envelope
		escaped bool // a metadata value comes back \u-escaped
	}
	cases := []tc{
		{name: "every field", e: full},
		{name: "minimal domain event", e: func() envelope.Envelope {
			return envelope.Envelope{EventID: "5f0e3a58-6b1a-4d7e-9d43-3f5d2c1a9e01", EventType: "OrderPlaced", Kind: envelope.KindDomain,
				AggregateType: "Order", AggregateID: "o-2", SequenceNumber: 1, Position: 1}
		}},
		{name: "command with expected_seq 0", e: func() envelope.Envelope {
			return envelope.Envelope{EventID: "6f0e3a58-6b1a-4d7e-9d43-3f5d2c1a9e01", EventType: "CREATE_INSTANCE", Kind: envelope.KindCommand,
				AggregateType: envelope.AggregateTypeInstance, AggregateID: "shop:orders:42", SequenceNumber: 1, Position: 9,
				ExpectedSeq: ptr(int64(0)), Data: json.RawMessage(`{"data":{"total":1}}`), Metadata: meta("command_id", `"k-1"`)}
		}},
		{name: "appended as a CloudEvent (producer id not a UUID)", e: func() envelope.Envelope {
			e := full()
			e.EventID = envelope.CloudEventID("/shop", "order-1-placed")
			e.Metadata["ce_id"], e.Metadata["ce_source"] = json.RawMessage(`"order-1-placed"`), json.RawMessage(`"/shop"`)
			e.Metadata["ce_type"] = json.RawMessage(`"com.example.order.placed"`)
			return e
		}},
		{name: "appended as a CloudEvent (upper-case UUID id)", e: func() envelope.Envelope {
			e := full()
			e.EventID = "a0b7e5a5-86b1-4d7e-9d43-3f5d2c1a9e0f"
			e.Metadata["ce_id"], e.Metadata["ce_source"] = json.RawMessage(`"A0B7E5A5-86B1-4D7E-9D43-3F5D2C1A9E0F"`), json.RawMessage(`"/shop"`)
			return e
		}},
		{name: "metadata ce_id and ce_source that did not make the event_id", e: func() envelope.Envelope {
			e := full()
			e.Metadata["ce_id"], e.Metadata["ce_source"] = json.RawMessage(`"x"`), json.RawMessage(`"/elsewhere"`)
			return e
		}},
		{name: "actor with a control character", e: func() envelope.Envelope {
			e := full()
			e.Actor = "line1\nline2\u0085"
			return e
		}},
		{name: "well-known keys that cannot be attributes", e: func() envelope.Envelope {
			e := full()
			e.Metadata["correlation_id"] = json.RawMessage(`"a\u0062"`)  // not as the store would write it
			e.Metadata["principal"] = json.RawMessage(`"tab\there"`)     // a control character
			e.Metadata["causation_id"] = json.RawMessage(`""`)           // empty
			e.Metadata["traceparent"] = json.RawMessage(`"a<b"`)         // fine: an attribute
			e.Metadata["tracestate"] = json.RawMessage(`"a\u003cb"`)     // HTML-escaped: stays in ce_metadata
			e.Metadata["ce_dataschema"] = json.RawMessage(`"https://x"`) // the producer's
			return e
		}},
		{name: "metadata with C1 controls and noncharacters", escaped: true, e: func() envelope.Envelope {
			e := full()
			e.Metadata["free_text"] = json.RawMessage("\"a\u0085b\ufdd0c\U0001fffe\"")
			return e
		}},
	}
	for _, c := range cases {
		for _, f := range []recordformat.Format{recordformat.Envelope, recordformat.CloudEvents} {
			t.Run(c.name+"/"+string(f), func(t *testing.T) {
				want, line := stored(t, c.e())
				r := recordformat.Encode(f, want, line)
				if !bytes.Equal(r.Key, envelope.KafkaKey(want)) {
					t.Fatalf("key %q, want the aggregate's %q", r.Key, envelope.KafkaKey(want))
				}
				if got := recordformat.Detect(r.Headers); got != f {
					t.Fatalf("Detect = %s", got)
				}
				got, err := recordformat.Decode(r, envelope.Limits{})
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
				gm, wm := got.Metadata, want.Metadata
				got.Metadata, want.Metadata = nil, nil
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("envelope differs:\n got %+v\nwant %+v", got, want)
				}
				if len(gm) != len(wm) {
					t.Fatalf("metadata keys %v, want %v", keys(gm), keys(wm))
				}
				for k, w := range wm {
					g, ok := gm[k]
					switch {
					case !ok:
						t.Fatalf("metadata %s lost", k)
					case bytes.Equal(g, w):
					case c.escaped && f == recordformat.CloudEvents && jsonEqual(t, g, w):
					default:
						t.Fatalf("metadata %s = %s, want %s", k, g, w)
					}
				}
				if f == recordformat.Envelope && !bytes.Equal(r.Value, line) {
					t.Fatal("envelope record: the value is not the stored line")
				}
				if f == recordformat.CloudEvents && !bytes.Equal(r.Value, want.Data) {
					t.Fatalf("cloudevents record: value %s, want the data %s", r.Value, want.Data)
				}
				if id := recordformat.EventID(r.Headers); id != want.EventID {
					t.Fatalf("EventID(headers) = %q, want %q", id, want.EventID)
				}
				if p, ok := recordformat.Position(r.Headers); !ok || p != want.Position {
					t.Fatalf("Position(headers) = %d %v", p, ok)
				}
				if typ := recordformat.EventType(r.Headers); typ != want.EventType {
					t.Fatalf("EventType(headers) = %q", typ)
				}
			})
		}
	}
}

func keys(m envelope.Metadata) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// ceRecord is the CloudEvents record of the full envelope.
func ceRecord(t *testing.T) *kgo.Record {
	t.Helper()
	e, line := stored(t, full())
	return recordformat.Encode(recordformat.CloudEvents, e, line)
}

func setHeader(r *kgo.Record, k, v string) {
	for i := range r.Headers {
		if r.Headers[i].Key == k {
			r.Headers[i].Value = []byte(v)
			return
		}
	}
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
}

func dropHeader(r *kgo.Record, k string) {
	r.Headers = slices.DeleteFunc(r.Headers, func(h kgo.RecordHeader) bool { return h.Key == k })
}

// A CloudEvents record Decode refuses names the attribute at fault; the
// worker runtime dead-letters it with that reason.
func TestInvalidCloudEventsRecordNamesTheAttribute(t *testing.T) {
	for _, c := range []struct {
		name, attr string
		mutate     func(*kgo.Record)
	}{
		{"specversion 0.3", "ce_specversion", func(r *kgo.Record) { setHeader(r, "ce_specversion", "0.3") }},
		{"no id", "ce_id", func(r *kgo.Record) { dropHeader(r, "ce_id") }},
		{"empty source", "ce_source", func(r *kgo.Record) { setHeader(r, "ce_source", "") }},
		{"no type", "ce_type", func(r *kgo.Record) { dropHeader(r, "ce_type") }},
		{"type outside the event type rule", "ce_type", func(r *kgo.Record) { setHeader(r, "ce_type", "order placed!") }},
		{"type twice", "ce_type", func(r *kgo.Record) {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: "ce_type", Value: []byte("x")})
		}},
		{"no content-type", "content-type", func(r *kgo.Record) { dropHeader(r, "content-type") }},
		{"content-type not JSON", "content-type", func(r *kgo.Record) { setHeader(r, "content-type", "application/avro") }},
		{"structured content mode", "content-type", func(r *kgo.Record) {
			setHeader(r, "content-type", "application/cloudevents+json; charset=UTF-8")
		}},
		{"data not JSON", "data", func(r *kgo.Record) { r.Value = []byte("hello") }},
		{"data a JSON array", "data", func(r *kgo.Record) { r.Value = []byte(`[1,2]`) }},
		{"no data", "data", func(r *kgo.Record) { r.Value = nil }},
		{"data with invalid UTF-8", "data", func(r *kgo.Record) { r.Value = []byte("{\"a\":\"\xff\"}") }},
		{"data with a lone surrogate escape", "data", func(r *kgo.Record) { r.Value = []byte(`{"a":"\udc00"}`) }},
		{"no kind", "ce_kind", func(r *kgo.Record) { dropHeader(r, "ce_kind") }},
		{"unknown kind", "ce_kind", func(r *kgo.Record) { setHeader(r, "ce_kind", "query") }},
		{"no aggregate type", "ce_aggregatetype", func(r *kgo.Record) { dropHeader(r, "ce_aggregatetype") }},
		{"no subject", "ce_subject", func(r *kgo.Record) { dropHeader(r, "ce_subject") }},
		{"instance subject of the wrong form", "ce_subject", func(r *kgo.Record) {
			setHeader(r, "ce_aggregatetype", envelope.AggregateTypeInstance)
			setHeader(r, "ce_subject", "not-an-instance-id")
		}},
		{"sequence 0", "ce_sequencenumber", func(r *kgo.Record) { setHeader(r, "ce_sequencenumber", "0") }},
		{"position not a number", "ce_position", func(r *kgo.Record) { setHeader(r, "ce_position", "x") }},
		{"expected_seq negative", "ce_expectedseq", func(r *kgo.Record) { setHeader(r, "ce_expectedseq", "-1") }},
		{"expected_seq on a domain event", "ce_expectedseq", func(r *kgo.Record) { setHeader(r, "ce_expectedseq", "3") }},
		{"schema version 0", "ce_schemaversion", func(r *kgo.Record) { setHeader(r, "ce_schemaversion", "0") }},
		{"dataschema of another version", "ce_dataschema", func(r *kgo.Record) {
			setHeader(r, "ce_dataschema", "urn:sluice:schema:com.example.order.placed:1")
		}},
		{"time not RFC 3339", "ce_time", func(r *kgo.Record) { setHeader(r, "ce_time", "yesterday") }},
		{"metadata not an object", "ce_metadata", func(r *kgo.Record) { setHeader(r, "ce_metadata", "[1]") }},
		{"metadata with a duplicate key", "ce_metadata", func(r *kgo.Record) { setHeader(r, "ce_metadata", `{"a":1,"a":2}`) }},
		{"metadata key also an attribute", "ce_commandid", func(r *kgo.Record) { setHeader(r, "ce_metadata", `{"command_id":"x"}`) }},
		{"command id with a colon", "ce_commandid", func(r *kgo.Record) { setHeader(r, "ce_commandid", "a:b") }},
		{"header not UTF-8", "ce_correlationid", func(r *kgo.Record) { setHeader(r, "ce_correlationid", "\xff") }},
		{"extension name not lower-case", "ce_Tenant", func(r *kgo.Record) { setHeader(r, "ce_Tenant", "t") }},
		{"actor twice", "ce_actorjson", func(r *kgo.Record) { setHeader(r, "ce_actorjson", `"x"`) }},
		{"data too deep", "data", func(r *kgo.Record) {
			r.Value = []byte(`{"a":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}`)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := ceRecord(t)
			c.mutate(r)
			_, err := recordformat.Decode(r, envelope.Limits{})
			var ae *recordformat.AttributeError
			if !errors.As(err, &ae) {
				t.Fatalf("error %v (%T), want an *AttributeError", err, err)
			}
			if ae.Attribute != c.attr && !strings.HasPrefix(ae.Attribute, c.attr+" (") {
				t.Fatalf("attribute %q, want %q (%v)", ae.Attribute, c.attr, err)
			}
			if !strings.Contains(err.Error(), c.attr) {
				t.Fatalf("the error %q does not name %s", err, c.attr)
			}
		})
	}
}

// A CloudEvents record of another producer: its extension attributes land
// in metadata as ce_<name>, like the API's CloudEvents input; its
// event_id is derived from (source, id) as the API derives it.
func TestForeignCloudEventsRecord(t *testing.T) {
	r := &kgo.Record{Key: []byte("k"), Value: []byte(`{"n":1}`), Headers: []kgo.RecordHeader{
		{Key: "ce_specversion", Value: []byte("1.0")}, {Key: "ce_id", Value: []byte("evt-17")},
		{Key: "ce_source", Value: []byte("https://example.com/shop")}, {Key: "ce_type", Value: []byte("com.example.order.placed")},
		{Key: "ce_subject", Value: []byte("order-17")}, {Key: "content-type", Value: []byte("application/json; charset=utf-8")},
		{Key: "ce_kind", Value: []byte("domain")}, {Key: "ce_aggregatetype", Value: []byte("Order")},
		{Key: "ce_comexampletenant", Value: []byte("t1")}, {Key: "x-other", Value: []byte("ignored")},
	}}
	e, err := recordformat.Decode(r, envelope.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if e.EventID != envelope.CloudEventID("https://example.com/shop", "evt-17") || e.SchemaVersion != 1 || e.SequenceNumber != 0 {
		t.Fatalf("decoded %+v", e)
	}
	if v, _ := e.Metadata.String("ce_comexampletenant"); v != "t1" || len(e.Metadata) != 1 {
		t.Fatalf("metadata %v", e.Metadata)
	}
}

// Detect reads the format from the headers alone; anything without a
// CloudEvents marker is an envelope record (records written before the
// setting existed, and those of a deployment that never switched).
func TestDetect(t *testing.T) {
	for _, c := range []struct {
		name string
		hs   []kgo.RecordHeader
		want recordformat.Format
	}{
		{"no headers", nil, recordformat.Envelope},
		{"envelope headers", []kgo.RecordHeader{{Key: "event_id", Value: []byte("x")}, {Key: "content-type", Value: []byte("application/json")}}, recordformat.Envelope},
		{"ce_specversion", []kgo.RecordHeader{{Key: "ce_specversion", Value: []byte("1.0")}}, recordformat.CloudEvents},
		{"structured content type", []kgo.RecordHeader{{Key: "content-type", Value: []byte("Application/CloudEvents+json")}}, recordformat.CloudEvents},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := recordformat.Detect(c.hs); got != c.want {
				t.Fatalf("Detect = %s, want %s", got, c.want)
			}
		})
	}
}

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in   string
		want recordformat.Format
		ok   bool
	}{{"", recordformat.Envelope, true}, {"envelope", recordformat.Envelope, true}, {"cloudevents", recordformat.CloudEvents, true},
		{"CloudEvents", "", false}, {"avro", "", false}} {
		t.Run(c.in, func(t *testing.T) {
			got, err := recordformat.Parse(c.in)
			if (err == nil) != c.ok || got != c.want {
				t.Fatalf("Parse(%q) = %q %v", c.in, got, err)
			}
		})
	}
}

// A CloudEvents record of an event at the store's limits (a line of
// almost EVENT_STORE_MAX_ENVELOPE_BYTES, metadata of almost
// EVENT_STORE_MAX_METADATA_BYTES, a producer's long source and id, which
// travel twice: as ce_source/ce_id and in ce_metadata) fits the size budget
// the relay produces and creates topics with (kafka.Budget), as its
// envelope record does.
func TestCloudEventsRecordFitsTheBudget(t *testing.T) {
	limits := envelope.DefaultLimits()
	e := full()
	src, id := "https://example.com/"+strings.Repeat("s", 4000), strings.Repeat("i", 4000)
	e.EventID = envelope.CloudEventID(src, id)
	e.Metadata["ce_source"], e.Metadata["ce_id"] = quoteJSON(src), quoteJSON(id)
	e.Metadata["free_big"] = quoteJSON(strings.Repeat("m", limits.MaxMetadataBytes-9000))
	e.Data = json.RawMessage(`{"blob":""}`)
	_, line := stored(t, e)
	pad := limits.MaxEnvelopeBytes - len(line) - 64
	e.Data = json.RawMessage(`{"blob":"` + strings.Repeat("y", pad) + `"}`)
	e, line = stored(t, e)
	size := func(r *kgo.Record) int {
		n := len(r.Key) + len(r.Value) + 61 + 20 // the batch header, the record's varints
		for _, h := range r.Headers {
			n += len(h.Key) + len(h.Value) + 10
		}
		return n
	}
	budget := kafka.Budget(kafka.Config{})
	for _, f := range []recordformat.Format{recordformat.Envelope, recordformat.CloudEvents} {
		if n := size(recordformat.Encode(f, e, line)); n > budget {
			t.Errorf("%s record of %d bytes exceeds the budget of %d", f, n, budget)
		}
	}
}

func quoteJSON(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

// headerValue returns the value of header k of r and whether it is there.
func headerValue(r *kgo.Record, k string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == k {
			return string(h.Value), true
		}
	}
	return "", false
}

// metadataHeader returns the ce_metadata object of r (nil when absent).
func metadataHeader(t *testing.T, r *kgo.Record) envelope.Metadata {
	t.Helper()
	v, ok := headerValue(r, "ce_metadata")
	if !ok {
		return nil
	}
	var m envelope.Metadata
	if err := json.Unmarshal([]byte(v), &m); err != nil {
		t.Fatalf("ce_metadata %s: %v", v, err)
	}
	return m
}

// A producer's own extension attribute, kept by the API as metadata
// ce_<name>, leaves Kafka as header ce_<name> when it can come back as it
// was: a CloudEvents attribute name of at most 20 characters that is no
// attribute of CloudEvents or sluice, and a CloudEvents String written as
// the store writes it. Anything else stays in ce_metadata. Either way the
// envelope comes back exactly.
func TestProducerExtensionAttributes(t *testing.T) {
	for _, c := range []struct {
		name, key, value string
		header           bool // the key leaves as its own header
		escaped          bool // ce_metadata carries the value \u-escaped
	}{
		{name: "extension of the issue", key: "ce_comexamplex", value: `"abc"`, header: true},
		{name: "20-character name", key: "ce_" + strings.Repeat("a", 19) + "9", value: `"v"`, header: true},
		{name: "digits only", key: "ce_42", value: `"v"`, header: true},
		{name: "value with < and non-ASCII", key: "ce_comexampley", value: `"a<b&ü 😀"`, header: true},
		{name: "producer's sequence extension", key: "ce_sequence", value: `"00017"`, header: true},
		{name: "21-character name", key: "ce_" + strings.Repeat("a", 21), value: `"v"`},
		{name: "upper-case name", key: "ce_comExample", value: `"v"`},
		{name: "underscore in the name", key: "ce_com_example", value: `"v"`},
		{name: "empty name", key: "ce_", value: `"v"`},
		{name: "not ce_", key: "comexamplex", value: `"v"`},
		{name: "number", key: "ce_comexamplen", value: `12.50`},
		{name: "boolean", key: "ce_comexampleb", value: `true`},
		{name: "null", key: "ce_comexamplenull", value: `null`},
		{name: "object", key: "ce_comexampleo", value: `{"a":"b"}`},
		{name: "empty string", key: "ce_comexamplee", value: `""`},
		{name: "control character", key: "ce_comexamplec", value: `"a\tb"`},
		{name: "C1 control", key: "ce_comexamplec", value: "\"a\u0085b\"", escaped: true},
		{name: "noncharacter", key: "ce_comexamplec", value: "\"a\ufdd0b\"", escaped: true},
		{name: "escaped as the store would not write it", key: "ce_comexamplec", value: `"a\u0062"`},
		{name: "HTML-escaped", key: "ce_comexamplec", value: `"a\u003cb"`},
		{name: "spec id", key: "ce_id", value: `"p-1"`},
		{name: "spec source", key: "ce_source", value: `"/shop"`},
		{name: "spec specversion", key: "ce_specversion", value: `"1.0"`},
		{name: "spec type", key: "ce_type", value: `"x.y"`},
		{name: "spec subject", key: "ce_subject", value: `"s"`},
		{name: "spec time", key: "ce_time", value: `"2026-01-01T00:00:00Z"`},
		{name: "spec dataschema", key: "ce_dataschema", value: `"https://x"`},
		{name: "spec datacontenttype", key: "ce_datacontenttype", value: `"text/plain"`},
		{name: "spec data", key: "ce_data", value: `"d"`},
		{name: "sluice kind", key: "ce_kind", value: `"query"`},
		{name: "sluice aggregatetype", key: "ce_aggregatetype", value: `"X"`},
		{name: "sluice sequencenumber", key: "ce_sequencenumber", value: `"99"`},
		{name: "sluice position", key: "ce_position", value: `"99"`},
		{name: "sluice expectedseq", key: "ce_expectedseq", value: `"1"`},
		{name: "sluice actor", key: "ce_actor", value: `"mallory"`},
		{name: "sluice actorjson", key: "ce_actorjson", value: `"\"m\""`},
		{name: "sluice schemaversion", key: "ce_schemaversion", value: `"9"`},
		{name: "sluice metadata", key: "ce_metadata", value: `"{}"`},
		{name: "sluice commandid", key: "ce_commandid", value: `"other"`},
		{name: "sluice correlationid", key: "ce_correlationid", value: `"other"`},
		{name: "sluice causationid", key: "ce_causationid", value: `"other"`},
		{name: "sluice principal", key: "ce_principal", value: `"other"`},
		{name: "sluice traceparent", key: "ce_traceparent", value: `"other"`},
		{name: "sluice tracestate", key: "ce_tracestate", value: `"other"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := full()
			e.Metadata[c.key] = json.RawMessage(c.value)
			want, line := stored(t, e)
			r := recordformat.Encode(recordformat.CloudEvents, want, line)
			seen := map[string]bool{}
			for _, h := range r.Headers {
				if seen[h.Key] {
					t.Fatalf("header %s written twice", h.Key)
				}
				seen[h.Key] = true
			}
			inMeta := metadataHeader(t, r)
			_, asMeta := inMeta[c.key]
			if c.header {
				v, ok := headerValue(r, c.key)
				var s string
				_ = json.Unmarshal([]byte(c.value), &s)
				if !ok || v != s {
					t.Fatalf("header %s = %q (present %v), want %q", c.key, v, ok, s)
				}
				if asMeta {
					t.Fatalf("%s is also in ce_metadata", c.key)
				}
			} else if !asMeta {
				t.Fatalf("%s is not in ce_metadata (keys %v)", c.key, keys(inMeta))
			}
			got, err := recordformat.Decode(r, envelope.Limits{})
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			sameEnvelope(t, got, want, func(k string) bool { return c.escaped && k == c.key })
			// The decoded envelope is stored as the original was.
			gl, err := envelope.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			if wl, _ := envelope.Marshal(want); !c.escaped && !bytes.Equal(gl, wl) {
				t.Fatalf("stored line differs:\n got %s\nwant %s", gl, wl)
			}
		})
	}
}

// A record with an extension both as its header and in ce_metadata is
// refused, naming the header; an invalid extension header value names it.
func TestExtensionHeaderConflicts(t *testing.T) {
	r := ceRecord(t)
	if v, ok := headerValue(r, "ce_comexampletenant"); !ok || v != "t1" {
		t.Fatalf("ce_comexampletenant = %q %v, want its own header", v, ok)
	}
	m := metadataHeader(t, r)
	m["ce_comexampletenant"] = json.RawMessage(`"t2"`)
	b, _ := json.Marshal(m)
	setHeader(r, "ce_metadata", string(b))
	_, err := recordformat.Decode(r, envelope.Limits{})
	var ae *recordformat.AttributeError
	if !errors.As(err, &ae) || ae.Attribute != "ce_comexampletenant" {
		t.Fatalf("error %v, want an AttributeError on ce_comexampletenant", err)
	}
}

// Any metadata key and value the store accepts comes back from a
// CloudEvents record exactly (or, in ce_metadata, \u-escaped but equal as
// JSON when it holds characters a CloudEvents String may not).
func FuzzCloudEventsMetadataRoundTrip(f *testing.F) {
	for _, s := range [][2]string{
		{"ce_comexamplex", `"abc"`}, {"ce_kind", `"x"`}, {"ce_metadata", `"{}"`}, {"ce_datacontenttype", `"a"`},
		{"ce_x", `1`}, {"ce_x", `""`}, {"ce_x", `"a\u0062"`}, {"ce_x", "\"\u0085\""}, {"ce_" + strings.Repeat("z", 21), `"v"`},
		{"ce_commandid", `"c"`}, {"correlation_id", `"c"`}, {"ce_X", `"v"`}, {"ce_x", `{"a":[1]}`},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, key, value string) {
		e := full()
		e.Metadata[key] = json.RawMessage(value)
		want, err := envelope.Prepare(e, envelope.Limits{}, func() time.Time { return time.Unix(1_800_000_000, 0) })
		if err != nil {
			return // the store refuses it
		}
		line, err := envelope.Marshal(want)
		if err != nil {
			return
		}
		if want, err = envelope.Parse(line, envelope.Limits{}); err != nil {
			return
		}
		r := recordformat.Encode(recordformat.CloudEvents, want, line)
		got, err := recordformat.Decode(r, envelope.Limits{})
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		sameEnvelope(t, got, want, func(string) bool { return true })
		seen := map[string]bool{}
		for _, h := range r.Headers {
			if seen[h.Key] {
				t.Fatalf("header %s written twice", h.Key)
			}
			seen[h.Key] = true
			if name, ok := strings.CutPrefix(h.Key, "ce_"); ok && len(name) > 20 {
				t.Fatalf("header %s: the name exceeds 20 characters", h.Key)
			}
		}
	})
}

// sameEnvelope fails t unless got equals want, metadata byte for byte
// except the keys for which jsonOK allows an equal JSON value in another
// spelling. Neither envelope is changed.
func sameEnvelope(t *testing.T, got, want envelope.Envelope, jsonOK func(key string) bool) {
	t.Helper()
	gm, wm := got.Metadata, want.Metadata
	got.Metadata, want.Metadata = nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("envelope differs:\n got %+v\nwant %+v", got, want)
	}
	if !slices.Equal(keys(gm), keys(wm)) {
		t.Fatalf("metadata keys %v, want %v", keys(gm), keys(wm))
	}
	for k, w := range wm {
		if g := gm[k]; !bytes.Equal(g, w) && !(jsonOK(k) && jsonEqual(t, g, w)) {
			t.Fatalf("metadata %q = %s, want %s", k, g, w)
		}
	}
}
