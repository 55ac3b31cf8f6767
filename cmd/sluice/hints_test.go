package main

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testenv"
)

// A name that does not exist — a consumer group, a topic, a projection —
// is refused with the nearest that does and exit code 3 (issue 36.3);
// before, `consumer lag --group instance-worker` (the unprefixed group id
// of earlier versions) printed everything retained as the lag of a group
// that does not exist, marked "(?)".
func TestNotFoundNamesTheNearest(t *testing.T) {
	k := newKafkaFixture(t)
	envDatabase(t) // consumer pause sets its flag in Postgres
	worker := testenv.UniqueName("worker")
	group := "sluice." + worker // as KAFKA_GROUP_PREFIX names it
	topic := testenv.UniqueName("events.")
	k.createTopic(t, topic, 2)
	testenv.CommitOffsets(t, k.adm, group, topic, 1, 0)
	_, dlq := k.dlqTopics(t, 1)

	tests := []struct {
		name string
		args []string
		want string // "" when the command succeeds
	}{
		{"lag of the group", []string{"consumer", "lag", "--group", group}, ""},
		{"lag of the unprefixed id", []string{"consumer", "lag", "--group", worker},
			`consumer group "` + worker + `" not found (no worker has joined it and it has no committed offsets); did you mean "` + group + `"?`},
		{"lag of a typo", []string{"consumer", "lag", "--group", group + "x"}, `did you mean "` + group + `"?`},
		{"lag on a topic that does not exist", []string{"consumer", "lag", "--group", group, "--topic", strings.ToUpper(topic)},
			`topic "` + strings.ToUpper(topic) + `" not found; did you mean "` + topic + `"?`},
		{"reset of the unprefixed id", []string{"consumer", "reset", "--group", worker, "--to", "earliest"}, `did you mean "` + group + `"?`},
		{"copy-offsets from the unprefixed id", []string{"consumer", "copy-offsets", "--from", worker, "--to", group + "-2", "--topic", topic},
			`did you mean "` + group + `"?`},
		{"dlq list of the dead-letter topic", []string{"dlq", "list", "--topic", dlq}, ""},
		{"dlq list of a configured dead-letter topic not created yet", []string{"dlq", "list", "--topic", "sluice.commands.dlq"},
			`topic "sluice.commands.dlq" not found (a configured dead-letter topic, created when its worker starts: it has no letters)`},
		{"dlq list of a topic that does not exist", []string{"dlq", "list", "--topic", strings.ToUpper(dlq)},
			`topic "` + strings.ToUpper(dlq) + `" not found; did you mean "` + dlq + `"?`},
		{"pause of the unprefixed id", []string{"consumer", "pause", "--group", worker, "--yes"},
			`consumer group "` + worker + `" not found (no worker has joined it and it has no committed offsets; pass --allow-new to set the flag before its workers start); did you mean "` + group + `"?`},
		{"pause of a group that exists", []string{"consumer", "pause", "--group", group}, ""},
		{"pause of a new group with --allow-new", []string{"consumer", "pause", "--group", worker + "-new", "--allow-new", "--yes"}, ""},
		{"pause again of a flagged group needs no --allow-new", []string{"consumer", "pause", "--group", worker + "-new", "--yes"}, ""},
		{"resume of a flagged group needs no --allow-new", []string{"consumer", "resume", "--group", worker + "-new", "--yes"}, ""},
		{"projection status of a typo", []string{"projection", "status", "histroy"},
			`projection "histroy" not found (known: instances, history); did you mean "history"?`},
		{"projection rebuild of a typo", []string{"projection", "rebuild", "instance", "--version", "2", "--dry-run"},
			`did you mean "instances"?`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := runOps(t, tc.args...)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("%v\n%s", err, out)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %s\n%s", err, tc.want, out)
			}
			if code := exitCode(err); code != exitNotFound {
				t.Errorf("exit code %d, want %d", code, exitNotFound)
			}
		})
	}
}
