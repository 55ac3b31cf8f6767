package topics_test

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/shared/testenv"
	"github.com/sluicehq/sluice/shared/topics"
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
	if err := topics.Ensure(ctx, cl, 3, 1, a); err != nil {
		t.Fatal(err)
	}
	if err := topics.Ensure(ctx, cl, 5, 1, a, b); err != nil { // a exists: not an error, not changed
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
	if err := topics.Ensure(ctx, cl, 0, 1, testenv.UniqueName("bad-")); err == nil {
		t.Error("0 partitions: want an error")
	}
	if err := topics.Ensure(ctx, cl, 3, 1); err != nil {
		t.Errorf("no topics: %v", err)
	}
}
