package main

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// TestUsageErrorsExit2 runs the built binary with usage errors cobra finds
// itself (a flag it cannot parse, an argument or subcommand no command
// takes) and checks each exits 2 naming what is wrong, as
// docs/operator-commands.md says, and that the commands' help still exits 0.
func TestUsageErrorsExit2(t *testing.T) {
	bin := buildSluice(t)
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string // in stderr
	}{
		{"unknown flag on the root", []string{"--bogus"}, 2, "unknown flag: --bogus"},
		{"unknown flag on a command", []string{"store", "cat", "--bogus"}, 2, "unknown flag: --bogus"},
		{"bad flag value", []string{"store", "cat", "--from", "abc"}, 2, `invalid argument "abc" for "--from"`},
		{"bad flag value, dlq", []string{"dlq", "list", "--limit", "x"}, 2, `"--limit"`},
		{"unknown command", []string{"nosuchcmd"}, 2, `unknown command "nosuchcmd" for "sluice"`},
		{"unknown command with a suggestion", []string{"stor"}, 2, `did you mean "store"?`},
		{"an argument a command does not take", []string{"version", "extra"}, 2, `unknown command "extra"`},
		{"unknown subcommand of a group", []string{"consumer", "lagg"}, 2, `unknown command "lagg" for "sluice consumer"; did you mean "lag"?`},
		{"unknown subcommand of a nested group", []string{"relay", "checkpoint", "sho"}, 2, `unknown command "sho" for "sluice relay checkpoint"`},
		{"unknown subcommand of completion", []string{"completion", "nosuch"}, 2, `unknown command "nosuch"`},
		{"a group alone shows its help", []string{"consumer"}, 0, ""},
		{"help", []string{"--help"}, 0, ""},
		{"version", []string{"version"}, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bin, tc.args...)
			cmd.Env = []string{"PATH=/usr/bin:/bin"}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			err := cmd.Run()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("sluice %s: exit %d, stderr %q; want exit %d naming %q", strings.Join(tc.args, " "), code, stderr.String(), tc.code, tc.want)
			}
		})
	}
}
