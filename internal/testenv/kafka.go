package testenv

import (
	"context"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
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

// ReadTopic returns every record of topic present now (each partition from
// its start offset to its end offset), in offset order per partition and
// partitions in order.
func ReadTopic(t testing.TB, brokers []string, topic string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatalf("testenv: read %s: %v", topic, err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	var ends kadm.ListedOffsets
	if err == nil {
		if ends, err = adm.ListEndOffsets(ctx, topic); err == nil {
			err = ends.Error()
		}
	}
	if err != nil {
		t.Fatalf("testenv: read %s: %v", topic, err)
	}
	parts := map[int32]kgo.Offset{}
	left := map[int32]int64{}
	ends.Each(func(e kadm.ListedOffset) {
		s, _ := starts.Lookup(topic, e.Partition)
		if s.Offset < e.Offset {
			parts[e.Partition] = kgo.NewOffset().At(s.Offset)
			left[e.Partition] = e.Offset
		}
	})
	if len(parts) == 0 {
		return nil
	}
	cc, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}))
	if err != nil {
		t.Fatalf("testenv: read %s: %v", topic, err)
	}
	defer cc.Close()
	byPart := map[int32][]*kgo.Record{}
	for len(left) > 0 {
		fs := cc.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("testenv: read %s: %v", topic, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := left[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			byPart[r.Partition] = append(byPart[r.Partition], r)
			if r.Offset >= end-1 {
				delete(left, r.Partition)
			}
		})
	}
	var out []*kgo.Record
	for _, p := range slices.Sorted(maps.Keys(byPart)) {
		out = append(out, byPart[p]...)
	}
	return out
}
