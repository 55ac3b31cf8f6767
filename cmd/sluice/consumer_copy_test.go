package main

import (
	"context"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testenv"
)

// consumer copy-offsets end to end on kfake (issue 27 item 3, the manual
// migration to prefixed group ids): without --yes it is a dry run that
// prints the plan and changes nothing; --yes copies; a second copy onto the
// group that now has offsets is refused as unsafe, and --force overwrites.
func TestConsumerCopyOffsets(t *testing.T) {
	ctx := context.Background()
	k := newKafkaFixture(t)
	topic := testenv.UniqueName("sluice.commands.")
	k.createTopic(t, topic, 2)
	from, to := testenv.UniqueName("instance-worker-"), testenv.UniqueName("sluice.instance-worker-")
	commit := func(p0, p1 int64) { t.Helper(); testenv.CommitOffsets(t, k.adm, from, topic, p0, p1) }
	target := func() string {
		t.Helper()
		r, err := k.adm.FetchOffsets(ctx, to)
		if err != nil {
			return "none"
		}
		o0, ok0 := r.Lookup(topic, 0)
		o1, ok1 := r.Lookup(topic, 1)
		if !ok0 || !ok1 {
			return "none"
		}
		return strings.Join([]string{offsetOrDash(o0.At), offsetOrDash(o1.At)}, ",")
	}
	commit(0, 0)
	args := []string{"consumer", "copy-offsets", "--from", from, "--to", to, "--topic", topic}
	for _, extra := range [][]string{nil, {"--dry-run"}, {"--dry-run", "--yes"}} {
		out, _, err := runOps(t, append(args, extra...)...)
		if err != nil || !opHasLine(out, topic, "0", "0", "-") || !strings.Contains(out, "nothing changed") || target() != "none" {
			t.Fatalf("%v must be a dry run: %v %s\n%s", extra, err, target(), out)
		}
	}
	out, _, err := runOps(t, append(args, "--yes")...)
	if err != nil || !strings.Contains(out, "2 partitions of "+topic+" committed") || target() != "0,0" {
		t.Fatalf("copy: %v %s\n%s", err, target(), out)
	}
	commit(5, 3)
	if _, _, err := runOps(t, append(args, "--yes")...); opExitCode(err) != exitUnsafe || !strings.Contains(err.Error(), "already has committed offsets") || target() != "0,0" {
		t.Fatalf("copy onto a group with offsets: exit %d %v, target %s", opExitCode(err), err, target())
	}
	if _, _, err := runOps(t, append(args, "--yes", "--force")...); err != nil || target() != "5,3" {
		t.Fatalf("forced copy: %v, target %s", err, target())
	}

	// A live member of either group is refused with exit 5, as consumer
	// reset refuses one (copy-offsets exited 7, the code of a guard that
	// --yes cannot pass, while stopping the workers is all it takes).
	fresh := testenv.UniqueName("sluice.instance-worker-")
	for _, tc := range []struct {
		name  string
		group string   // the group with the live member
		args  []string // after copy-offsets --from from --topic topic --yes
	}{
		{"a live member of --from", from, []string{"--to", fresh}},
		{"a live member of --to", to, []string{"--to", to, "--force"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leave := testenv.JoinGroup(t, k.brokers, tc.group, topic)
			defer leave()
			_, _, err := runOps(t, append([]string{"consumer", "copy-offsets", "--from", from, "--topic", topic, "--yes"}, tc.args...)...)
			if opExitCode(err) != exitGroupActive || !strings.Contains(err.Error(), "live members") || target() != "5,3" {
				t.Fatalf("copy with %s: exit %d %v, target %s; want exit %d and nothing copied", tc.name, opExitCode(err), err, target(), exitGroupActive)
			}
			if r, err := k.adm.FetchOffsets(ctx, fresh); err == nil && len(r) > 0 {
				t.Fatalf("copy with %s committed %v to %s", tc.name, r, fresh)
			}
		})
	}
}
