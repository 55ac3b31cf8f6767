package suggest

import (
	"errors"
	"fmt"
	"testing"
)

func TestNearest(t *testing.T) {
	groups := []string{"sluice.instance-worker", "sluice.projection-history-v1", "sluice.projection-history-v2", "other.instance-worker-x"}
	tests := []struct {
		name     string
		existing []string
		want     string
	}{
		{"instance-worker", groups, "sluice.instance-worker"},             // the unprefixed id of earlier versions
		{"projection-history-v1", groups, "sluice.projection-history-v1"}, // suffix, exact version
		{"sluice.instance-worker", groups, ""},                            // exists: nothing to suggest
		{"sluice.instanse-worker", groups, "sluice.instance-worker"},      // a typo
		{"SLUICE.INSTANCE-WORKER", groups, "sluice.instance-worker"},      // case
		{"sluice.projection-history-v3", groups, "sluice.projection-history-v1"},
		{"billing", groups, ""}, // nothing near
		{"", groups, ""},
		{"histroy", []string{"history", "instances"}, "history"},
		{"instance", []string{"history", "instances"}, "instances"},
		{"sluice.commands.dql", []string{"sluice.commands", "sluice.commands.dlq", "sluice.events.dlq"}, "sluice.commands.dlq"},
		{"commands.dlq", []string{"sluice.commands", "sluice.commands.dlq", "sluice.events.dlq"}, "sluice.commands.dlq"},
		{"x", []string{"y"}, "y"}, // distance 1 is always near
		{"abc", nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Nearest(tc.name, tc.existing); got != tc.want {
				t.Errorf("Nearest(%q) = %q, want %q", tc.name, got, tc.want)
			}
		})
	}
}

func TestNotFoundError(t *testing.T) {
	tests := []struct {
		name string
		err  *NotFoundError
		want string
	}{
		{"with nearest", NotFound("consumer group", "instance-worker", []string{"sluice.instance-worker"}),
			`consumer group "instance-worker" not found; did you mean "sluice.instance-worker"?`},
		{"none near", NotFound("topic", "billing", []string{"sluice.commands"}), `topic "billing" not found`},
		{"note", &NotFoundError{Kind: "projection", Name: "histry", Nearest: "history", Note: "known: history, instances"},
			`projection "histry" not found (known: history, instances); did you mean "history"?`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.err.Error(); got != tc.want {
				t.Errorf("got %q\nwant %q", got, tc.want)
			}
			if !IsNotFound(fmt.Errorf("wrapped: %w", tc.err)) || IsNotFound(errors.New(tc.want)) {
				t.Error("IsNotFound")
			}
		})
	}
}
