package envelope

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// badTopics are metadata.kafka_topic values Kafka refuses.
var badTopics = []struct{ name, topic string }{
	{"empty", ``},
	{"dot", `.`},
	{"dot dot", `..`},
	{"250 bytes", strings.Repeat("t", 250)},
	{"1000 bytes", strings.Repeat("a.", 500)},
	{"slash", `a/b`},
	{"space", `a b`},
	{"colon", `a:b`},
	{"plus", `a+b`},
	{"at", `orders@eu`},
	{"star", `*`},
	{"unicode", `café`},
	{"emoji", `t🚀`},
	{"nul", "a\u0000b"},
	{"newline", "a\nb"},
	{"backslash", `a\b`},
	{"quote", `a"b`},
	{"comma", `a,b`},
}

// TestKafkaTopicRefusedAtAppend: a topic name Kafka refuses is a typed
// validation error naming metadata.kafka_topic, from Parse (the store's
// wire path) and Prepare (envelopes built in Go), so it never reaches the
// relay.
func TestKafkaTopicRefusedAtAppend(t *testing.T) {
	for _, tc := range badTopics {
		t.Run(tc.name, func(t *testing.T) {
			q, _ := json.Marshal(tc.topic)
			in := withField(t, "metadata", `{"kafka_topic":`+string(q)+`}`)
			_, err := Parse([]byte(in), DefaultLimits())
			var ve *ValidationError
			if !errors.As(err, &ve) || ve.Code != CodeInvalid || ve.Field != "metadata.kafka_topic" || ve.Limit == "" {
				t.Fatalf("Parse with kafka_topic %q = %v, want invalid metadata.kafka_topic", tc.topic, err)
			}
			e, perr := Parse([]byte(minimalValid), DefaultLimits())
			if perr != nil {
				t.Fatal(perr)
			}
			e.Metadata.SetString(MetaKafkaTopic, tc.topic)
			if _, err := Prepare(e, DefaultLimits(), nil); !errors.As(err, &ve) || ve.Field != "metadata.kafka_topic" {
				t.Fatalf("Prepare with kafka_topic %q = %v", tc.topic, err)
			}
			if err := ValidateKafkaTopic(tc.topic); err == nil {
				t.Fatalf("ValidateKafkaTopic(%q) accepted", tc.topic)
			}
		})
	}
	for _, ok := range []string{"a", "sluice.orders", "sluice_orders", "A-b_c.9", "...", ".a", strings.Repeat("t", 249)} {
		if err := ValidateKafkaTopic(ok); err != nil {
			t.Errorf("ValidateKafkaTopic(%q): %v", ok, err)
		}
		if _, err := Parse([]byte(withField(t, "metadata", `{"kafka_topic":"`+ok+`"}`)), DefaultLimits()); err != nil {
			t.Errorf("Parse with kafka_topic %q: %v", ok, err)
		}
	}
}

// TestKafkaTopicCollision: with the configured topics known, a name that
// differs from one only by '.' versus '_' is refused; the configured name
// itself and unrelated names are fine.
func TestKafkaTopicCollision(t *testing.T) {
	configured := []string{"sluice.commands", "sluice.events", "sluice.commands.dlq", "sluice.events.dlq"}
	for _, c := range []string{"sluice_commands", "sluice_events", "sluice.commands_dlq", "sluice_events.dlq", "sluice_events_dlq"} {
		err := ValidateKafkaTopic(c, configured...)
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Field != "metadata.kafka_topic" || !strings.Contains(ve.Reason, "collides") {
			t.Errorf("ValidateKafkaTopic(%q) = %v, want a collision", c, err)
		}
	}
	for _, ok := range append([]string{"sluice.orders", "sluice-commands", "sluice.commandsx"}, configured...) {
		if err := ValidateKafkaTopic(ok, configured...); err != nil {
			t.Errorf("ValidateKafkaTopic(%q): %v", ok, err)
		}
	}
}
