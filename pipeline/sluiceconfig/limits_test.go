package sluiceconfig

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/kafka"
)

// TestCheckLimits: `sluice config check` fails when the Kafka budget is set
// below what an envelope at the store's limit needs.
func TestCheckLimits(t *testing.T) {
	cases := []struct {
		name     string
		maxMsg   int
		attempts int
		wantErr  string
	}{
		{"derived", 0, 3, ""},
		{"explicit and large enough", 2 << 20, 3, ""},
		{"below the envelope limit", 1_000_012, 3, "KAFKA_MAX_MESSAGE_BYTES=1000012"},
		{"no attempts", 0, 0, "EVENT_PUBLISHER_PARK_AFTER_ATTEMPTS"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &Config{EventStore: eventstore.Config{Limits: envelope.Limits{MaxEnvelopeBytes: 1 << 20, MaxMetadataBytes: 16384}}}
			cfg.Kafka.MaxMessageBytes = tc.maxMsg
			cfg.Relay.ParkAfterAttempts = tc.attempts
			err := cfg.CheckLimits()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("error %v, want one naming %s", err, tc.wantErr)
			}
			if tc.wantErr == "" {
				if got, want := kafka.Budget(cfg.Kafka), max(tc.maxMsg, 1<<20+16384+4096); got != want {
					t.Errorf("Budget = %d, want %d", got, want)
				}
			}
		})
	}
}

// TestBudgetDerivedByConfig holds the derivation of
// KAFKA_MAX_MESSAGE_BYTES to MessageBudget: unset, it is the envelope limit
// plus the key and header bound; set, it is kept.
func TestBudgetDerivedByConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want int
	}{
		{"defaults", nil, kafka.MessageBudget(envelope.DefaultLimits().MaxEnvelopeBytes, envelope.DefaultLimits().MaxMetadataBytes)},
		{"raised envelope limit", map[string]string{"EVENT_STORE_MAX_ENVELOPE_BYTES": "4194304", "EVENT_STORE_MAX_METADATA_BYTES": "32768"}, kafka.MessageBudget(4194304, 32768)},
		{"explicit", map[string]string{"KAFKA_MAX_MESSAGE_BYTES": "9000000"}, 9000000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"PROCESSED_EVENT_OWNER": "w1"}
			for k, v := range tc.env {
				env[k] = v
			}
			cfg, err := Load(env)
			if err != nil {
				t.Fatal(err)
			}
			if got := kafka.Budget(cfg.Kafka); got != tc.want {
				t.Errorf("Budget = %d, want %d", got, tc.want)
			}
		})
	}
}
