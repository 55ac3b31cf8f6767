package worker

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/shared/claim"
)

// TestDLQTooLargeNeverBlocks: a dead letter whose full form is too large
// (the original embedded as escaped JSON: a control character becomes six
// bytes) is written in pointer form, with the context and where the
// original is, and the partition moves on. Too large for the producer
// (checked before producing) and refused by the broker (a DLQ topic with a
// smaller max.message.bytes: MESSAGE_TOO_LARGE) both end so; before the
// bound both retried the dead letter forever and nothing after it was
// committed.
func TestDLQTooLargeNeverBlocks(t *testing.T) {
	for _, tc := range []struct {
		name       string
		random     bool // incompressible bytes (the broker measures compressed batches), else control characters
		origSize   int
		producer   int32 // consumer's ProducerBatchMaxBytes (0: default)
		topicLimit int   // the DLQ topic's max.message.bytes (0: default)
		reason     string
	}{
		{"over the producer limit", false, 40 << 10, 64 << 10, 0, truncSize},
		{"refused by the broker", true, 20 << 10, 0, 16 << 10, truncTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			brokers, topic, produce := oneTopic(t, "dlqsize-")
			if tc.topicLimit > 0 {
				adm, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
				if err != nil {
					t.Fatal(err)
				}
				v := strconv.Itoa(tc.topicLimit)
				res, err := kadm.NewClient(adm).AlterTopicConfigs(context.Background(),
					[]kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: &v}}, topic+".dlq")
				adm.Close()
				if err == nil {
					_, err = res.On(topic+".dlq", nil)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			// Not an envelope: a parse error, dead-lettered at once. Control
			// characters are six bytes each in the full form; random bytes
			// are base64 there (4/3) and do not compress.
			bad := []byte(strings.Repeat("\x01", tc.origSize))
			if tc.random {
				bad = make([]byte, tc.origSize)
				_, _ = rand.Read(bad)
			}
			id := uuid.NewString()
			produce(&kgo.Record{Key: []byte("bad-key"), Value: bad, Headers: []kgo.RecordHeader{
				{Key: "event_id", Value: []byte(id)}, {Key: "position", Value: []byte("4242")}}})
			good := uuid.NewString()
			produce(thingRecord(t, good, "good", 1, 4243))
			deps := Deps{Registry: realRegistry(t, "w1", 10*time.Second), Handler: HandlerFunc(func(context.Context, *Record) (claim.Outcome, error) {
				return claim.Applied(), nil
			})}
			var opts []Option
			if tc.producer > 0 {
				opts = append(opts, WithKafkaOpts(kgo.ProducerBatchMaxBytes(tc.producer)))
			}
			c, _ := startConsumer(t, brokers, topic, Config{}, deps, opts...)
			testenv.WaitFor(t, 30*time.Second, "the partition past the too-large dead letter", func() bool { return committedOffset(c, topic) == 2 })

			dl := readTopic(t, brokers, topic+".dlq")
			if len(dl) != 1 {
				t.Fatalf("%d dead letters, want 1", len(dl))
			}
			var d DLQRecord
			if err := json.Unmarshal(dl[0].Value, &d); err != nil {
				t.Fatal(err)
			}
			want := DLQRecord{OriginalTopic: topic, OriginalPartition: 0, OriginalOffset: 0, OriginalKey: "bad-key",
				OriginalHeaders: map[string]string{}, ErrorClass: ClassParse, AttemptCount: 1, Handler: "h",
				OriginalTruncated: true, TruncatedReason: tc.reason, OriginalSize: tc.origSize, OriginalEventID: id, OriginalPosition: 4242}
			got := d
			got.Error, got.FirstFailedAt, got.FailedAt = "", time.Time{}, time.Time{}
			if gb, wb := mustJSON(t, got), mustJSON(t, want); gb != wb {
				t.Errorf("dead letter\n got %.600s\nwant %s", gb, wb)
			}
			if !strings.HasPrefix(d.Error, "parse: ") || d.FailedAt.IsZero() || string(dl[0].Key) != "bad-key" {
				t.Errorf("dead letter context: error %q failed_at %v key %q", d.Error, d.FailedAt, dl[0].Key)
			}
			if len(dl[0].Value) > 4<<10 {
				t.Errorf("pointer-form dead letter is %d bytes", len(dl[0].Value))
			}
		})
	}
}

// TestDLQEncodingGrowth: the full form does not escape '<', '>' and '&'
// (six bytes each with HTML escaping); a dead letter that fits stays in
// full form and decodes to the original bytes.
func TestDLQEncodingGrowth(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		maxGrowth   int // bytes of the value in the dead letter per original byte, at most
	}{
		{"html characters", strings.Repeat("<&>", 1000), 1},
		{"json text", strings.Repeat(`{"a":"<b>"}`, 300), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := deadLetter{topic: "t.dlq", handler: "h", rec: &kgo.Record{Topic: "t", Value: []byte(tc.value)}, errText: "x", class: ClassParse, attempts: 1}
			r, ptr, err := d.record(1<<20, "")
			if err != nil || ptr != "" {
				t.Fatalf("record: %q %v", ptr, err)
			}
			var got DLQRecord
			if err := json.Unmarshal(r.Value, &got); err != nil {
				t.Fatal(err)
			}
			if got.OriginalValue != tc.value || got.OriginalTruncated {
				t.Fatalf("original value not kept in full")
			}
			if limit := tc.maxGrowth*len(tc.value) + 400; len(r.Value) > limit {
				t.Errorf("dead letter %d bytes for a %d-byte value, want ≤ %d", len(r.Value), len(tc.value), limit)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestDLQRecordShape(t *testing.T) {
	at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name, value, wantValue, wantEnc string
	}{
		{"utf8", `{"a":1}`, `{"a":1}`, ""},
		{"binary", "\xff\xfe", "//4=", "base64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &kgo.Record{Topic: "cmds", Partition: 2, Offset: 7, Key: []byte("k"), Value: []byte(tt.value),
				Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("v")}}}
			d := deadLetter{topic: "cmds.dlq", handler: "h1", rec: r, errText: "boom", class: ClassPermanent, attempts: 3, first: at, failed: at.Add(time.Second)}
			out, ptr, err := d.record(1<<20, "")
			if err != nil || ptr != "" {
				t.Fatal(ptr, err)
			}
			var m map[string]any
			if err := json.Unmarshal(out.Value, &m); err != nil {
				t.Fatal(err)
			}
			want := []string{"original_topic", "original_partition", "original_offset", "original_key", "original_value",
				"original_headers", "error", "error_class", "attempt_count", "handler", "first_failed_at", "failed_at"}
			if len(m) != len(want) {
				t.Errorf("fields %v", m)
			}
			for _, f := range want {
				if _, ok := m[f]; !ok {
					t.Errorf("missing %s", f)
				}
			}
			enc := ""
			for _, h := range out.Headers {
				if h.Key == "sluice-original-value-encoding" {
					enc = string(h.Value)
				}
			}
			if m["original_value"] != tt.wantValue || enc != tt.wantEnc || string(out.Key) != "k" || out.Topic != "cmds.dlq" ||
				m["original_offset"] != float64(7) || m["attempt_count"] != float64(3) {
				t.Errorf("record %s headers %v", out.Value, out.Headers)
			}
		})
	}
}
