package main

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/shared/claim"
)

// dlq redrive and drop in the README's dev environment: one Kafka broker and
// KAFKA_TOPIC_REPLICATION_FACTOR unset (config default 3). The sidecar topic
// of handled letters must not ask for more replicas than the cluster has
// (issue 27.4: they failed with INVALID_REPLICATION_FACTOR).
func TestDLQRedriveAndDropOnOneBrokerWithDefaultEnv(t *testing.T) {
	ctx := context.Background()
	_, reg := envRegistry(t, "test")
	k := newKafkaFixture(t)
	if err := os.Unsetenv("KAFKA_TOPIC_REPLICATION_FACTOR"); err != nil { // restored by newKafkaFixture's t.Setenv
		t.Fatal(err)
	}
	if rf := opConfig(t).Kafka.ReplicationFactor; rf <= 1 {
		t.Fatalf("config default replication factor is %d: the test needs the default above one broker", rf)
	}
	orig, dlq := k.dlqTopics(t, 1)
	const handler = "instanceworker"
	origs := make([]*kgo.Record, 2)
	for i := range origs {
		id := uuid.NewString()
		agg := "shop:orders:" + id[:8]
		origs[i] = &kgo.Record{Topic: orig, Key: []byte("Instance:" + agg),
			Value:   []byte(`{"event_id":"` + id + `","event_type":"CREATE_INSTANCE","kind":"command","aggregate_id":"` + agg + `"}`),
			Headers: []kgo.RecordHeader{{Key: "event_id", Value: []byte(id)}, {Key: "kind", Value: []byte("command")}}}
		res, err := reg.Claim(ctx, claim.Request{Handler: handler, EventID: id, AggregateID: agg, Seq: 1, Policy: claim.SkipStale})
		if err != nil || res.Kind != claim.Claimed {
			t.Fatalf("claim %s: %v %v", id, res.Kind, err)
		}
		if _, err := reg.MarkFailed(ctx, res.Lease, claim.Failure{Err: errors.New("permanent: boom")}); err != nil {
			t.Fatal(err)
		}
	}
	k.produce(t, origs...)
	k.produce(t,
		dlqLetterRecord(dlq, handler, origs[0], "permanent", "permanent: unknown command type"),
		dlqLetterRecord(dlq, handler, origs[1], "permanent", "permanent: unknown command type"))

	tests := []struct {
		name string
		args []string
		want string
	}{
		{"redrive", []string{"dlq", "redrive", "--topic", dlq, "--offset", "0"}, "1 redriven, 0 skipped"},
		{"drop", []string{"dlq", "drop", "--topic", dlq, "--offset", "1", "--reason", "test data"}, "0:1: dropped"},
		{"list hides both", []string{"dlq", "list", "--topic", dlq}, "2 handled (redriven or dropped) hidden"},
	}
	for _, tc := range tests {
		out, _, err := runOps(t, tc.args...)
		if err != nil || !strings.Contains(out, tc.want) {
			t.Fatalf("%s: %v\n%s", tc.name, err, out)
		}
	}
	if got := len(k.records(t, orig)); got != 3 {
		t.Fatalf("%s holds %d records after the redrive, want the 2 originals and 1 re-produced", orig, got)
	}
}
