package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/envelope"
)

// oneTopic starts a kfake cluster with a fresh one-partition topic and
// returns its brokers, the topic (its DLQ topic topic.dlq exists too) and
// a func producing records to it (synchronously).
// The registry satisfies the runtime's own interface (the workers pass it in).
var _ Registry = (*registry.Registry)(nil)

func oneTopic(t *testing.T, prefix string) (brokers []string, topic string, produce func(recs ...*kgo.Record)) {
	t.Helper()
	topic = testenv.UniqueName(prefix)
	k := testenv.NewKafka(t, kfake.SeedTopics(1, topic, topic+".dlq"))
	pcl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pcl.Close)
	return k.Brokers, topic, func(recs ...*kgo.Record) {
		t.Helper()
		if err := pcl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// thingRecord is a record carrying a valid domain event of aggregate
// thing/agg at sequence seq and position pos, with event id id (a new one
// when empty), keyed by agg.
func thingRecord(t *testing.T, id, agg string, seq, pos int64) *kgo.Record {
	t.Helper()
	if id == "" {
		id = uuid.NewString()
	}
	e := envelope.Envelope{EventID: id, EventType: "THING_HAPPENED", Kind: envelope.KindDomain, AggregateType: "thing",
		AggregateID: agg, SequenceNumber: seq, Position: pos,
		OccurredAt: envelope.NewTimestamp(time.Unix(1_700_000_000, 0)), Data: json.RawMessage(`{}`), SchemaVersion: 1}
	raw, err := envelope.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return &kgo.Record{Key: []byte(agg), Value: raw}
}

// committedOffset is the offset c last committed on partition 0 of topic
// (-1 when unknown).
func committedOffset(c *Consumer, topic string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ps := c.parts[topic][0]; ps != nil {
		return ps.committed
	}
	return -1
}

// startConsumer runs a consumer of topic with cfg's bounds, d's registry
// and handler, and the tests' defaults (group topic-g, DLQ topic.dlq,
// handler name "h", no logs unless d has a Logger; skip-stale and 5 ms
// backoff unless cfg sets them). stop ends Run and reports its error; it
// runs again at the end of the test (then it does nothing).
func startConsumer(t *testing.T, brokers []string, topic string, cfg Config, d Deps, opts ...Option) (c *Consumer, stop func()) {
	t.Helper()
	cfg.Kafka.Brokers, cfg.Topic, cfg.Group, cfg.DLQTopic, cfg.HandlerName = brokers, topic, topic+"-g", topic+".dlq", "h"
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if !cfg.Policy.Valid() {
		cfg.Policy = claim.SkipStale
	}
	if cfg.RetryBackoffBase == 0 {
		cfg.RetryBackoffBase = 5 * time.Millisecond
	}
	c, err := New(cfg, d, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c, testenv.RunInBackground(t, "consumer Run", c.Run)
}

// msgCounter is a slog.Handler (all levels) counting the records of each
// message: tests wait for the loop's own lines ("poll" once per turn) as
// evidence that it went on.
type msgCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func newMsgCounter() *msgCounter { return &msgCounter{n: map[string]int{}} }

func (m *msgCounter) Enabled(context.Context, slog.Level) bool { return true }
func (m *msgCounter) Handle(_ context.Context, r slog.Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.n[r.Message]++
	return nil
}
func (m *msgCounter) WithAttrs([]slog.Attr) slog.Handler { return m }
func (m *msgCounter) WithGroup(string) slog.Handler      { return m }

// count is how many records with message msg were logged.
func (m *msgCounter) count(msg string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n[msg]
}
