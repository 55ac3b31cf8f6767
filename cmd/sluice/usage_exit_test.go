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
		// Flag values and combinations the commands refuse themselves,
		// before they connect to anything (they exited 1).
		{"key without a grant", []string{"auth", "key", "create", "--principal", "p"}, 2, "give at least one --grant"},
		{"key expiring in the past", []string{"auth", "key", "create", "--principal", "p", "--grant", "read=*", "--expires-in", "-1h"}, 2, "--expires-in"},
		{"dlq without --topic", []string{"dlq", "list"}, 2, "--topic is required"},
		{"redrive without --offset or --all", []string{"dlq", "redrive", "--topic", "x"}, 2, "or --offset) or --all"},
		{"rebuild without --version", []string{"projection", "rebuild", "history"}, 2, "--version N"},
		{"checkpoint set without a target", []string{"relay", "checkpoint", "set"}, 2, "--position or --time"},
		{"checkpoint set to a negative position", []string{"relay", "checkpoint", "set", "--position", "-1", "--yes"}, 2, "--position -1"},
		{"checkpoint set to a time that is not one", []string{"relay", "checkpoint", "set", "--time", "yesterday"}, 2, `--time "yesterday"`},
		{"republish of an empty range", []string{"relay", "republish", "--from-position", "5", "--to-position", "2"}, 2, "want 1 <= from <= to"},
		{"verify of a bad db name", []string{"verify", "--db", "BAD!", "--class", "orders"}, 2, "--db"},
		{"online check with a mode it would not use", []string{"schema", "check", "--online", "--compatibility", "NONE", "x.json"}, 2, "apply offline"},
		{"online check with earlier files it would not read", []string{"schema", "check", "--online", "--previous", "v1.json", "x.json"}, 2, "apply offline"},
		{"reset to a bad target", []string{"consumer", "reset", "--group", "g", "--to", "yesterday"}, 2, `--to "yesterday"`},
		{"cat of a bad cursor", []string{"store", "cat", "--cursor", "zzz"}, 2, "--cursor"},
		{"cat of an id without a type", []string{"store", "cat", "--aggregate-id", "x"}, 2, "--aggregate-id needs --aggregate-type"},
		{"cat of a bad kind", []string{"store", "cat", "--aggregate-type", "T", "--aggregate-id", "x", "--kind", "weird"}, 2, "--kind"},
		{"a required flag left out", []string{"relay", "parked", "drop", "--yes"}, 2, `required flag(s) "position" not set`},
		{"a letter at a negative offset", []string{"dlq", "show", "--topic", "t", "--offset", "-2"}, 2, "--offset -2"},
		{"a letter at a negative partition", []string{"dlq", "drop", "--topic", "t", "--partition", "-3", "--offset", "1"}, 2, "--partition -3"},
		{"redrive of a negative offset", []string{"dlq", "redrive", "--topic", "t", "--offset", "-2"}, 2, "--offset -2"},
		{"dlq list of a negative limit", []string{"dlq", "list", "--topic", "t", "--limit", "-1"}, 2, "--limit -1"},
		{"parked records of a bad state", []string{"relay", "parked", "list", "--state", "bogus"}, 2, `--state "bogus"`},
		{"parked records, limit 0", []string{"relay", "parked", "list", "--limit", "0"}, 2, "--limit 0"},
		{"parked record at position 0", []string{"relay", "parked", "drop", "--position", "0", "--yes"}, 2, "--position 0"},
		{"parked record shown at position -1", []string{"relay", "parked", "show", "--position", "-1"}, 2, "--position -1"},
		{"rotate with a negative grace", []string{"auth", "key", "rotate", "k", "--grace", "-1h"}, 2, "--grace"},
		{"rebuild with a negative settle", []string{"projection", "rebuild", "history", "--version", "5", "--settle", "-1s", "--dry-run"}, 2, "--settle -1s"},
		{"rollback with a negative settle", []string{"projection", "rollback", "history", "--settle", "-1s", "--dry-run"}, 2, "--settle -1s"},
		{"prune with a negative age", []string{"registry", "prune", "--older-than", "-1h", "--dry-run"}, 2, "--older-than -1h"},
		{"repair with a negative age", []string{"store", "repair", "--older-than", "-1s"}, 2, "--older-than -1s"},
		{"schema delete of version -1", []string{"schema", "delete", "Order", "--version", "-1"}, 2, "--version -1"},
		{"verify of index version -1", []string{"verify", "--db", "shop", "--class", "orders", "--index-version", "-1"}, 2, "--index-version -1"},
		{"verify with concurrency 0", []string{"verify", "--db", "shop", "--class", "orders", "--concurrency", "0"}, 2, "--concurrency 0"},
		{"help of an unknown topic", []string{"help", "nosuch"}, 2, `unknown help topic "nosuch"`},
		{"help of an unknown subcommand", []string{"help", "consumer", "lagg"}, 2, `unknown help topic "consumer lagg"`},
		{"help of a command", []string{"help", "consumer", "lag"}, 0, ""},
		{"a group alone shows its help", []string{"consumer"}, 0, ""},
		// healthcheck is a Docker HEALTHCHECK: 2 is reserved there, so its
		// usage errors exit 1 (unhealthy).
		{"healthcheck with a bad flag", []string{"healthcheck", "--bogus"}, 1, "unknown flag: --bogus"},
		{"healthcheck with a bad --url", []string{"healthcheck", "--url", "notaurl"}, 1, "--url"},
		{"healthcheck with an argument", []string{"healthcheck", "extra"}, 1, "extra"},
		{"help", []string{"--help"}, 0, ""},
		{"version", []string{"version"}, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Nothing to connect to: a refusal must come before any
			// connection is tried.
			code, stderr := runExit(t, bin, []string{"PATH=/usr/bin:/bin", "DATABASE_URL=postgres://127.0.0.1:1/none?connect_timeout=1",
				"EVENT_STORE_BACKEND=file", "EVENT_STORE_FILE_DIR=" + t.TempDir(), "KAFKA_BROKERS=127.0.0.1:1"}, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Errorf("sluice %s: exit %d, stderr %q; want exit %d naming %q", strings.Join(tc.args, " "), code, stderr, tc.code, tc.want)
			}
		})
	}
}

// runExit runs the built binary with env and args and returns its exit
// code and standard error.
func runExit(t *testing.T, bin string, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), stderr.String()
	case err != nil:
		t.Fatal(err)
	}
	return 0, stderr.String()
}
