package testenv

import (
	"context"
	"testing"

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
