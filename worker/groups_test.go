package worker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testenv"
)

// Lag and ResetOffsets on kfake: the lag of a group with committed
// offsets; a dry run changes nothing; each target sets exactly its offsets
// (offset:N clamped, time:T the first at or after T, else the end); a group
// with a live member is refused with ErrGroupActive and its members named.
func TestGroupLagAndReset(t *testing.T) {
	ctx := context.Background()
	k := testenv.NewKafka(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topic, group := testenv.UniqueName("events."), testenv.UniqueName("projection-x-")
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	var rs []*kgo.Record
	for p, n := range []int{10, 6} {
		for i := range n {
			rs = append(rs, &kgo.Record{Topic: topic, Partition: int32(p), Value: []byte("v"), Timestamp: t0.Add(time.Duration(i) * time.Second)})
		}
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	commit := func(p0, p1 int64) { t.Helper(); testenv.CommitOffsets(t, adm, group, topic, p0, p1) }
	committed := func() [2]int64 { t.Helper(); return [2]int64(testenv.CommittedOffsets(t, adm, group, topic, 2)) }

	commit(4, 6)
	l, err := Lag(ctx, adm, group, "")
	if err != nil || l.Total != 6 || len(l.Partitions) != 2 || l.Partitions[0] != (PartitionLag{Topic: topic, Partition: 0, Committed: 4, End: 10, Lag: 6}) ||
		l.Partitions[1].Lag != 0 || !l.MembersKnown || l.Members != 0 {
		t.Fatalf("lag: %+v %v", l, err)
	}
	if l, err := Lag(ctx, adm, group, topic); err != nil || l.Total != 6 || len(l.Topics) != 1 {
		t.Fatalf("lag of one topic: %+v %v", l, err)
	}

	earliest := ResetTarget{Kind: ResetEarliest}
	res, err := ResetOffsets(ctx, adm, ResetOptions{Group: group, To: earliest, DryRun: true})
	if err != nil || res.Committed || len(res.Partitions) != 2 || res.Partitions[0].Current != 4 || res.Partitions[0].New != 0 || committed() != [2]int64{4, 6} {
		t.Fatalf("dry run: %+v %v %v", res, err, committed())
	}
	for _, tc := range []struct {
		to   string
		want [2]int64
	}{
		{"earliest", [2]int64{0, 0}},
		{"latest", [2]int64{10, 6}},
		{"offset:3", [2]int64{3, 3}},
		{"offset:8", [2]int64{8, 6}},
		{"time:" + t0.Add(5*time.Second).Format(time.RFC3339), [2]int64{5, 5}},
		{"time:" + t0.Add(time.Hour).Format(time.RFC3339), [2]int64{10, 6}},
	} {
		commit(1, 1)
		to, err := ParseResetTarget(tc.to)
		if err != nil || to.String() != tc.to {
			t.Fatalf("parse %q: %+v (%s) %v", tc.to, to, to, err)
		}
		if res, err := ResetOffsets(ctx, adm, ResetOptions{Group: group, Topic: topic, To: to}); err != nil || !res.Committed {
			t.Fatalf("reset to %s: %+v %v", tc.to, res, err)
		}
		if got := committed(); got != tc.want {
			t.Errorf("reset to %s: committed %v, want %v", tc.to, got, tc.want)
		}
	}
	for _, bad := range []string{"yesterday", "offset:-1", "time:noon", ""} {
		if _, err := ParseResetTarget(bad); err == nil {
			t.Errorf("ParseResetTarget(%q): no error", bad)
		}
	}

	// A live member: refused, nothing changed.
	commit(2, 2)
	testenv.JoinGroup(t, k.Brokers, group, topic)
	res, err = ResetOffsets(ctx, adm, ResetOptions{Group: group, To: earliest})
	if !errors.Is(err, ErrGroupActive) || len(res.Members) != 1 || res.State != "Stable" || committed() != [2]int64{2, 2} {
		t.Fatalf("reset with a live member: %+v %v %v", res, err, committed())
	}
	if res, err = ResetOffsets(ctx, adm, ResetOptions{Group: group, To: earliest, DryRun: true}); err != nil || len(res.Members) != 1 || len(res.Partitions) != 2 {
		t.Fatalf("dry run with a live member: %+v %v", res, err)
	}
}
