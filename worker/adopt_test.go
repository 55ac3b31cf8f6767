package worker

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/internal/testenv"
)

// CopyOffsets and AdoptOffsets on kfake (issue 27 item 3): a dry run
// changes nothing; a copy commits the source's offsets on the topic; a
// target that already committed is refused (ErrTargetHasOffsets) unless
// Force; a target with a live member is refused (ErrGroupActive).
// AdoptOffsets copies only into a group that committed nothing, and does
// nothing when the legacy group has nothing.
func TestCopyAndAdoptOffsets(t *testing.T) {
	ctx := context.Background()
	k := testenv.NewKafka(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topic := testenv.UniqueName("cmds.")
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	recs := make([]*kgo.Record, 0, 20)
	for i := range 20 {
		recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(i % 2), Value: []byte("v")})
	}
	pcl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	if err := pcl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	commit := func(group string, p0, p1 int64) { t.Helper(); testenv.CommitOffsets(t, adm, group, topic, p0, p1) }
	offsets := func(group string) [2]int64 {
		t.Helper()
		got := [2]int64{-1, -1}
		r, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			return got
		}
		for p := range int32(2) {
			if o, ok := r.Lookup(topic, p); ok {
				got[p] = o.At
			}
		}
		return got
	}
	legacy, next := testenv.UniqueName("instance-worker-"), testenv.UniqueName("sluice.instance-worker-")
	commit(legacy, 7, 4)

	res, err := CopyOffsets(ctx, adm, CopyOptions{From: legacy, To: next, Topic: topic, DryRun: true})
	if err != nil || len(res.Partitions) != 2 || res.Partitions[0].From != 7 || res.Partitions[0].Current != -1 || res.Committed {
		t.Fatalf("dry run: %v %+v", err, res)
	}
	if got := offsets(next); got != [2]int64{-1, -1} {
		t.Fatalf("a dry run committed %v", got)
	}
	if res, err = CopyOffsets(ctx, adm, CopyOptions{From: legacy, To: next, Topic: topic}); err != nil || !res.Committed {
		t.Fatalf("copy: %v %+v", err, res)
	}
	if got := offsets(next); got != [2]int64{7, 4} {
		t.Fatalf("copied %v, want [7 4]", got)
	}
	commit(legacy, 9, 9)
	if _, err = CopyOffsets(ctx, adm, CopyOptions{From: legacy, To: next, Topic: topic}); !errors.Is(err, ErrTargetHasOffsets) {
		t.Fatalf("copy onto a group with offsets: %v", err)
	}
	if got := offsets(next); got != [2]int64{7, 4} {
		t.Fatalf("a refused copy changed %v", got)
	}
	if _, err = CopyOffsets(ctx, adm, CopyOptions{From: legacy, To: next, Topic: topic, Force: true}); err != nil || offsets(next) != [2]int64{9, 9} {
		t.Fatalf("forced copy: %v %v", err, offsets(next))
	}

	// Adoption: only into a group that committed nothing.
	fresh := testenv.UniqueName("sluice.instance-worker-")
	if res, err := AdoptOffsets(ctx, adm, legacy, fresh, topic); err != nil || !res.Committed || offsets(fresh) != [2]int64{9, 9} {
		t.Fatalf("adopt into a fresh group: %v %+v %v", err, res, offsets(fresh))
	}
	commit(legacy, 10, 10)
	if res, err := AdoptOffsets(ctx, adm, legacy, fresh, topic); err != nil || res.Committed || offsets(fresh) != [2]int64{9, 9} {
		t.Fatalf("adopt into a group with offsets must do nothing: %v %+v %v", err, res, offsets(fresh))
	}
	none := testenv.UniqueName("never-")
	if res, err := AdoptOffsets(ctx, adm, none, testenv.UniqueName("sluice.x-"), topic); err != nil || res.Committed {
		t.Fatalf("adopt from a group without offsets: %v %+v", err, res)
	}

	// A live member of the target: refused.
	testenv.JoinGroup(t, k.Brokers, next, topic)
	if res, err := CopyOffsets(ctx, adm, CopyOptions{From: legacy, To: next, Topic: topic, Force: true}); !errors.Is(err, ErrGroupActive) || len(res.ToMembers) != 1 {
		t.Fatalf("copy onto a live group: %v %+v", err, res)
	} else if n := strings.Count(err.Error(), "live members"); n != 1 {
		t.Fatalf("the refusal says %q %d times, want once: %v", "live members", n, err)
	}
}

// TestAdoptRetriesDroppedRequests: a Kafka that drops the adoption's
// requests at start-up (the chaos soak's kafka_drop faults made both
// workers exit 1 there: "describe groups: ... broker closed the
// connection") does not fail New: the adoption is repeated within its
// budget, and the legacy group's offsets are adopted once.
func TestAdoptRetriesDroppedRequests(t *testing.T) {
	ctx := context.Background()
	k := testenv.NewKafka(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topic := testenv.UniqueName("cmds.")
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	legacy, group := testenv.UniqueName("instance-worker-"), testenv.UniqueName("sluice.instance-worker-")
	testenv.CommitOffsets(t, adm, legacy, topic, 0, 0) // offsets of an empty topic: 0 is a committed offset
	// Drop the connection of the next 3 DescribeGroups requests: the
	// client does not repeat one whose connection broke.
	const drops = 3
	var dropped atomic.Int32
	k.Cluster.ControlKey(int16(kmsg.DescribeGroups), func(kmsg.Request) (kmsg.Response, error, bool) {
		if dropped.Load() >= drops {
			return nil, nil, false
		}
		k.Cluster.KeepControl()
		dropped.Add(1)
		return nil, errors.New("test: injected connection drop"), true
	})
	c := &Consumer{cfg: Config{AdoptGroup: legacy, Group: group, Topic: topic}, deps: Deps{Logger: slog.New(slog.DiscardHandler)}}
	c.cfg.Kafka.Brokers = k.Brokers
	if err := c.adoptBeforeJoin(); err != nil {
		t.Fatalf("adoption failed on %d dropped requests: %v", dropped.Load(), err)
	}
	if n := dropped.Load(); n != drops {
		t.Fatalf("%d requests dropped, want %d (the fault did not happen)", n, drops)
	}
	r, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	for p := range int32(2) {
		if o, ok := r.Lookup(topic, p); !ok || o.At != 0 {
			t.Errorf("partition %d: adopted offset %+v (found %v), want 0", p, o, ok)
		}
	}
}
