package worker

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/shared/claim"
)

// KAFKA_SESSION_TIMEOUT reaches the group member; explicit KafkaOpts win.
func TestSessionTimeout(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		want time.Duration
	}{
		{"default (KAFKA_SESSION_TIMEOUT)", Options{}, 45 * time.Second},
		{"configured", Options{Config: Config{SessionTimeout: 7 * time.Second}}, 7 * time.Second},
		{"KafkaOpts override", Options{Config: Config{SessionTimeout: 7 * time.Second}, KafkaOpts: []kgo.Opt{kgo.SessionTimeout(9 * time.Second)}}, 9 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			o.Kafka.Brokers, o.Topic, o.Group, o.DLQTopic, o.HandlerName = []string{"127.0.0.1:1"}, "t", "g", "t.dlq", "h"
			o.Policy, o.Registry, o.Handler = claim.SkipStale, &fakeRegistry{}, batchFunc(nil)
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
