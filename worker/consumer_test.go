package worker

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/kafka"
)

// KAFKA_SESSION_TIMEOUT reaches the group member; explicit WithKafkaOpts win.
func TestSessionTimeout(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    Settings
		opts []Option
		want time.Duration
	}{
		{"default (KAFKA_SESSION_TIMEOUT)", Settings{}, nil, 45 * time.Second},
		{"configured", Settings{SessionTimeout: 7 * time.Second}, nil, 7 * time.Second},
		{"KafkaOpts override", Settings{SessionTimeout: 7 * time.Second}, []Option{WithKafkaOpts(kgo.SessionTimeout(9 * time.Second))}, 9 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Settings: tc.s, Kafka: kafka.Config{Brokers: []string{"127.0.0.1:1"}}, Topic: "t", Group: "g", DLQTopic: "t.dlq", HandlerName: "h", Policy: claim.SkipStale}
			c, err := New(cfg, Deps{Registry: &fakeRegistry{}, Handler: batchFunc(nil)}, tc.opts...)
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
