package testenv

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Client returns a client of the cluster with opts, closed at the end of
// the test.
func (k *Kafka) Client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(k.Brokers...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// CreateTopics creates topics with partitions each (replication factor 1)
// through cl.
func CreateTopics(t testing.TB, cl *kgo.Client, partitions int, topics ...string) {
	t.Helper()
	if _, err := kadm.NewClient(cl).CreateTopics(context.Background(), int32(partitions), 1, nil, topics...); err != nil {
		t.Fatal(err)
	}
}

// JoinGroup starts a member of group consuming topic (polling, never
// committing) and waits until the group is stable with it as its only
// member. leave stops the member and closes its client, so that it leaves
// the group; it is also called at the end of the test.
func JoinGroup(t testing.TB, brokers []string, group, topic string) (leave func()) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	member, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit())
	if err != nil {
		stop()
		t.Fatal(err)
	}
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for ctx.Err() == nil {
			member.PollFetches(ctx)
		}
	}()
	var once sync.Once
	leave = func() { once.Do(func() { stop(); <-polled; member.Close() }) }
	t.Cleanup(leave)
	adm := kadm.NewClient(member)
	WaitForEvery(t, 20*time.Second, 100*time.Millisecond, "the member to join "+group, func() bool {
		dg, err := adm.DescribeGroups(ctx, group)
		return err == nil && len(dg[group].Members) == 1 && dg[group].State == "Stable"
	})
	return leave
}
