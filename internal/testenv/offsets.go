package testenv

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
)

// CommitOffsets commits group's offsets on topic: at[p] for partition p.
func CommitOffsets(t testing.TB, adm *kadm.Client, group, topic string, at ...int64) {
	t.Helper()
	var os kadm.Offsets
	for p, o := range at {
		os.AddOffset(topic, int32(p), o, -1)
	}
	if err := adm.CommitAllOffsets(context.Background(), group, os); err != nil {
		t.Fatal(err)
	}
}

// CommittedOffsets returns group's committed offsets on partitions 0 to
// n-1 of topic (0 where it committed none); it fails the test when they
// cannot be fetched.
func CommittedOffsets(t testing.TB, adm *kadm.Client, group, topic string, n int) []int64 {
	t.Helper()
	r, err := adm.FetchOffsets(context.Background(), group)
	if err != nil || r.Error() != nil {
		t.Fatalf("fetch offsets: %v %v", err, r.Error())
	}
	got := make([]int64, n)
	for p := range got {
		o, _ := r.Lookup(topic, int32(p))
		got[p] = o.At
	}
	return got
}
