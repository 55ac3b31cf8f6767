package main

import (
	"context"
	"strings"
	"testing"
)

// The pause and resume guard: without --yes, and with --dry-run, nothing
// changes; --yes sets the durable flag; repeating is a no-op.
func TestConsumerPauseGuard(t *testing.T) {
	ctx := context.Background()
	_, reg := envRegistry(t, "cli-test")
	for _, st := range []struct {
		name    string
		args    []string
		wantOut string
		paused  bool
	}{
		{"pause without --yes", []string{"pause"}, "(dry run): would be paused; nothing changed", false},
		{"pause --dry-run --yes", []string{"pause", "--dry-run", "--yes"}, "(dry run)", false},
		{"pause --yes", []string{"pause", "--yes", "--reason", "upgrade"}, "consumer pause g1: paused", true},
		{"pause again", []string{"pause", "--yes"}, "already paused; nothing changed", true},
		{"resume without --yes", []string{"resume"}, "would be resumed", true},
		{"resume --yes", []string{"resume", "--yes"}, "consumer resume g1: resumed", false},
	} {
		out, _, err := run(t, append(append([]string{"consumer"}, st.args...), "--group", "g1", "--allow-new")...)
		if err != nil || !strings.Contains(out, st.wantOut) {
			t.Errorf("%s: %q %v, want %q", st.name, out, err, st.wantOut)
		}
		p, err := reg.GroupPaused(ctx, "g1")
		if err != nil || p.Paused != st.paused {
			t.Errorf("%s: paused %+v %v, want %t", st.name, p, err, st.paused)
		}
	}
}
