package instanceworker_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/shared/envelope"
)

// Two pipelines on one Kafka cluster, told apart by KAFKA_TOPIC_PREFIX
// (staging and production): their instance workers join two groups
// ({prefix}instance-worker, issue 27 item 3), each of one member that owns
// every partition of its own commands topic and none of the other's, and
// each pipeline's commands are processed. With one shared group id the two
// workers were members of one group.
func TestGroupIDsFollowTheTopicPrefix(t *testing.T) {
	const partitions = 3
	e := newEnv(t, partitions)
	topicB, dlqB := testenv.UniqueName("cmds-b-"), testenv.UniqueName("cmds-dlq-b-")
	adm := kadm.NewClient(e.producer())
	if _, err := adm.CreateTopics(ctxT(t), partitions, 1, nil, topicB, dlqB); err != nil {
		t.Fatal(err)
	}
	staging := map[string]string{"KAFKA_TOPIC_PREFIX": "staging."}
	prod := map[string]string{"KAFKA_TOPIC_PREFIX": "prod.", "COMMANDS_TOPIC": topicB, "COMMANDS_DLQ_TOPIC": dlqB, "PROCESSED_EVENT_OWNER": "worker-b"}
	groups := map[string]string{ // group → its topic
		e.config(staging).Kafka.Group(instanceworker.GroupName): e.topic,
		e.config(prod).Kafka.Group(instanceworker.GroupName):    topicB,
	}
	e.startInProcess(staging)
	e.startInProcess(prod)

	a := e.appendCmd(instanceworker.CreateInstance, "shop", "orders", "a", create("shop", "orders", strp("a"), map[string]any{"n": 1}))
	b := e.appendCmd(instanceworker.CreateInstance, "shop", "orders", "b", create("shop", "orders", strp("b"), map[string]any{"n": 2}))
	e.publish(a)
	if err := e.producer().ProduceSync(ctxT(t), &kgo.Record{Topic: topicB, Key: envelope.KafkaKey(b.ev.Envelope), Value: b.ev.Raw}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 60*time.Second, "both pipelines processed their command", func() bool { return e.allDone(a, b) })

	var last string
	t.Cleanup(func() {
		if t.Failed() {
			t.Log("last seen: " + last)
		}
	})
	testenv.WaitFor(t, 60*time.Second, "each group owns its own topic alone", func() bool {
		names := make([]string, 0, len(groups))
		for g := range groups {
			names = append(names, g)
		}
		dg, err := adm.DescribeGroups(context.Background(), names...)
		if err != nil {
			last = err.Error()
			return false
		}
		for g, topic := range groups {
			d := dg[g]
			if d.State != "Stable" || len(d.Members) != 1 {
				last = fmt.Sprintf("group %s: state %s, %d members", g, d.State, len(d.Members))
				return false
			}
			as, ok := d.Members[0].Assigned.AsConsumer()
			if !ok {
				last = "group " + g + ": no consumer assignment"
				return false
			}
			owned := map[string][]int32{}
			for _, tp := range as.Topics {
				owned[tp.Topic] = append(owned[tp.Topic], tp.Partitions...)
			}
			sort.Slice(owned[topic], func(i, j int) bool { return owned[topic][i] < owned[topic][j] })
			if len(owned) != 1 || fmt.Sprint(owned[topic]) != "[0 1 2]" {
				last = fmt.Sprintf("group %s owns %v, want all of %s only", g, owned, topic)
				return false
			}
		}
		return true
	})
}
