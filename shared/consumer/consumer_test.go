package consumer

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/registry"
)

func TestClassify(t *testing.T) {
	base := errors.New("x")
	tests := []struct {
		err  error
		want string
	}{
		{base, ClassRetryable},
		{Retryable(base), ClassRetryable},
		{Permanent(base), ClassPermanent},
		{fmt.Errorf("wrapped: %w", Permanent(base)), ClassPermanent},
		{ConflictErr("already applied", nil), ClassConflict},
		{Permanent(Retryable(base)), ClassPermanent},
		{Outage("elasticsearch", base), ClassOutage},
		{&PanicError{Value: "boom"}, ClassRetryable},
	}
	for _, tt := range tests {
		if got := Classify(tt.err); got != tt.want {
			t.Errorf("Classify(%v) = %s, want %s", tt.err, got, tt.want)
		}
	}
}

func TestBackoff(t *testing.T) {
	for n := range 40 {
		d := backoff(100*time.Millisecond, 2*time.Second, n)
		full := min(2*time.Second, 100*time.Millisecond<<min(n, 20))
		if d < full/2 || d >= full {
			t.Errorf("backoff(%d) = %s, want in [%s, %s)", n, d, full/2, full)
		}
	}
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

// KAFKA_SESSION_TIMEOUT reaches the group member; explicit KafkaOpts win.
func TestSessionTimeout(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		want time.Duration
	}{
		{"franz-go default", Options{}, 45 * time.Second},
		{"configured", Options{SessionTimeout: 7 * time.Second}, 7 * time.Second},
		{"KafkaOpts override", Options{SessionTimeout: 7 * time.Second, KafkaOpts: []kgo.Opt{kgo.SessionTimeout(9 * time.Second)}}, 9 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			o.Brokers, o.Topic, o.Group, o.DLQTopic, o.HandlerName = []string{"127.0.0.1:1"}, "t", "g", "t.dlq", "h"
			o.Policy, o.Registry, o.Handler = registry.SkipStale, &fakeRegistry{}, batchFunc(nil)
			c, err := New(o)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Client().Close()
			if got := c.Client().OptValue(kgo.SessionTimeout); got != tc.want {
				t.Fatalf("session timeout %v, want %v", got, tc.want)
			}
		})
	}
}
