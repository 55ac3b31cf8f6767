package kafka_test

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/shared/kafka"
)

func TestEnsureCreatesMissingAndAcceptsExisting(t *testing.T) {
	k := testenv.NewKafka(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	a, b := testenv.UniqueName("a-"), testenv.UniqueName("b-")
	if err := kafka.EnsureSpec(ctx, cl, kafka.Spec{Partitions: 3, Replication: 1}, a); err != nil {
		t.Fatal(err)
	}
	if err := kafka.EnsureSpec(ctx, cl, kafka.Spec{Partitions: 5, Replication: 1}, a, b); err != nil { // a exists: not an error, not changed
		t.Fatal(err)
	}
	td, err := kadm.NewClient(cl).ListTopics(ctx, a, b)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(td[a].Partitions); got != 3 {
		t.Errorf("%s has %d partitions, want 3 (kept from its creation)", a, got)
	}
	if got := len(td[b].Partitions); got != 5 {
		t.Errorf("%s has %d partitions, want 5", b, got)
	}
	if err := kafka.EnsureSpec(ctx, cl, kafka.Spec{Partitions: 0, Replication: 1}, testenv.UniqueName("bad-")); err == nil {
		t.Error("0 partitions: want an error")
	}
	if err := kafka.EnsureSpec(ctx, cl, kafka.Spec{Partitions: 3, Replication: 1}); err != nil {
		t.Errorf("no topics: %v", err)
	}
}
