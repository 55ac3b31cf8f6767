package testenv

import (
	"os"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Kafka is a Kafka cluster for one test: an in-process kfake cluster (real
// wire protocol, with fault injection through Cluster), or a real broker
// when SLUICE_TEST_KAFKA_BROKERS is set (then Cluster is nil and tests that
// need fault injection must say so).
type Kafka struct {
	Brokers []string
	Cluster *kfake.Cluster
}

// NewKafka starts a kfake cluster for the test (closed at its end), or
// returns the external brokers. Extra kfake options (seed topics, number of
// brokers) apply to the in-process cluster only.
func NewKafka(t testing.TB, opts ...kfake.Opt) *Kafka {
	t.Helper()
	if b := os.Getenv("SLUICE_TEST_KAFKA_BROKERS"); b != "" {
		return &Kafka{Brokers: strings.Split(b, ",")}
	}
	opts = append([]kfake.Opt{kfake.NumBrokers(1), kfake.AllowAutoTopicCreation()}, opts...)
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("testenv: kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return &Kafka{Brokers: c.ListenAddrs(), Cluster: c}
}

// UniqueName returns prefix plus a random suffix, so tests that share an
// external broker or bucket never see each other's topics or keys.
func UniqueName(prefix string) string { return prefix + RandomSuffix(10) }
