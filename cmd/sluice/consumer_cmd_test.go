package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testenv"
)

// consumer lag and reset end to end on kfake: lag numbers of a group with
// committed offsets; reset --dry-run, and reset without --yes (a dry run
// by default, issue 27.2), change nothing; reset to earliest,
// latest, offset:N (clamped) and time:T sets exactly those offsets; a group
// with a live member is refused (and --force meets Kafka's own refusal);
// once the member is gone reset works again.
func TestConsumerLagAndReset(t *testing.T) {
	ctx := context.Background()
	k := newKafkaFixture(t)
	topic, group := testenv.UniqueName("events."), testenv.UniqueName("projection-x-")
	k.createTopic(t, topic, 2)
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	var rs []*kgo.Record
	for p, n := range []int{10, 6} {
		for i := range n {
			rs = append(rs, &kgo.Record{Topic: topic, Partition: int32(p), Value: []byte("v"), Timestamp: t0.Add(time.Duration(i) * time.Second)})
		}
	}
	pk, err := kgo.NewClient(append(k.kopts, kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer pk.Close()
	if err := pk.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	commit := func(p0, p1 int64) { t.Helper(); testenv.CommitOffsets(t, k.adm, group, topic, p0, p1) }
	committed := func() [2]int64 { t.Helper(); return [2]int64(testenv.CommittedOffsets(t, k.adm, group, topic, 2)) }
	commit(4, 6)

	out, _, err := runOps(t, "consumer", "lag", "--group", group)
	if err != nil || !opHasLine(out, topic, "0", "4", "10", "6") || !opHasLine(out, topic, "1", "6", "6", "0") ||
		!strings.Contains(out, "2 partitions of "+topic+", total lag 6 (0 members") {
		t.Fatalf("lag: %v\n%s", err, out)
	}

	out, _, err = runOps(t, "consumer", "reset", "--group", group, "--to", "earliest", "--dry-run")
	if err != nil || !opHasLine(out, topic, "0", "4", "0") || !strings.Contains(out, "nothing changed") || committed() != [2]int64{4, 6} {
		t.Fatalf("dry run: %v %v\n%s", err, committed(), out)
	}
	out, _, err = runOps(t, "consumer", "reset", "--group", group, "--to", "earliest")
	if err != nil || !opHasLine(out, topic, "0", "4", "0") || !strings.Contains(out, "nothing changed (pass --yes to commit)") || committed() != [2]int64{4, 6} {
		t.Fatalf("reset without --yes must be a dry run: %v %v\n%s", err, committed(), out)
	}

	cases := []struct {
		to   string
		want [2]int64
	}{
		{"earliest", [2]int64{0, 0}},
		{"latest", [2]int64{10, 6}},
		{"offset:3", [2]int64{3, 3}},
		{"offset:8", [2]int64{8, 6}}, // clamped to the end of partition 1
		{"time:" + t0.Add(5*time.Second).Format(time.RFC3339), [2]int64{5, 5}},
		{"time:" + t0.Add(time.Hour).Format(time.RFC3339), [2]int64{10, 6}}, // nothing after: the end
	}
	for _, tc := range cases {
		commit(1, 1)
		out, _, err := runOps(t, "consumer", "reset", "--group", group, "--topic", topic, "--to", tc.to, "--yes")
		if err != nil || !strings.Contains(out, "2 partitions set to "+tc.to) {
			t.Fatalf("reset --to %s: %v\n%s", tc.to, err, out)
		}
		if got := committed(); got != tc.want {
			t.Errorf("reset --to %s: committed %v, want %v", tc.to, got, tc.want)
		}
	}
	for _, bad := range []string{"yesterday", "offset:-1", "time:noon"} {
		if _, _, err := runOps(t, "consumer", "reset", "--group", group, "--to", bad); err == nil || !strings.Contains(err.Error(), "--to") {
			t.Errorf("--to %s: want a usage error, got %v", bad, err)
		}
	}

	// A live member: refused, and --force meets the broker's refusal.
	commit(2, 2)
	leave := testenv.JoinGroup(t, k.brokers, group, topic)
	_, _, err = runOps(t, "consumer", "reset", "--group", group, "--to", "earliest", "--yes")
	if opExitCode(err) != exitGroupActive || !strings.Contains(err.Error(), "1 live members") {
		t.Fatalf("reset with a live member: exit %d %v", opExitCode(err), err)
	}
	out, errOut, err := runOps(t, "consumer", "reset", "--group", group, "--to", "earliest", "--dry-run")
	if err != nil || !strings.Contains(errOut, "warning: group") || !opHasLine(out, topic, "0", "2", "0") {
		t.Fatalf("dry run with a live member: %v\n%s\n%s", err, out, errOut)
	}
	_, _, err = runOps(t, "consumer", "reset", "--group", group, "--to", "earliest", "--force", "--yes")
	if err == nil || !strings.Contains(err.Error(), "commit offsets") {
		t.Fatalf("reset --force with a live member: want the broker's refusal, got %v", err)
	}
	if got := committed(); got != [2]int64{2, 2} {
		t.Fatalf("refused resets changed offsets: %v", got)
	}
	leave()
	out, _, err = runOps(t, "consumer", "reset", "--group", group, "--to", "earliest", "--yes")
	if err != nil || committed() != [2]int64{0, 0} {
		t.Fatalf("reset after the member left: %v %v\n%s", err, committed(), out)
	}
}
