package main

import (
	"strings"
	"testing"
)

// TestHelpUsageLines: the usage of a group (a command whose subcommand is
// what it runs: the root, store, dlq, relay checkpoint, completion) is
// its "[command]" line alone, as kubectl's and git's; usageExits makes a
// group runnable to refuse an unknown subcommand with exit 2, and cobra
// showed a runnable command's "sluice [flags]" line above it. A command
// that runs itself keeps its [flags] line, and a command that also has
// subcommands (relay) keeps both. The flags a group has are still listed.
func TestHelpUsageLines(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want []string // the lines under "Usage:"
		also []string // elsewhere in the help
	}{
		{"root --help", []string{"--help"}, []string{"sluice [command]"}, []string{"-h, --help", "version "}},
		{"root alone", nil, []string{"sluice [command]"}, nil},
		{"help", []string{"help"}, []string{"sluice [command]"}, nil},
		{"a group", []string{"store", "--help"}, []string{"sluice store [command]"}, nil},
		{"a group with a persistent flag", []string{"dlq", "--help"}, []string{"sluice dlq [command]"}, []string{"--topic string"}},
		{"a nested group", []string{"relay", "checkpoint", "--help"}, []string{"sluice relay checkpoint [command]"}, nil},
		{"help of a group", []string{"help", "consumer"}, []string{"sluice consumer [command]"}, nil},
		{"cobra's completion group", []string{"completion", "--help"}, []string{"sluice completion [command]"}, nil},
		{"a command", []string{"store", "cat", "--help"}, []string{"sluice store cat [flags]"}, nil},
		{"a command with subcommands", []string{"relay", "--help"}, []string{"sluice relay [flags]", "sluice relay [command]"}, nil},
		{"a subcommand of a group with a persistent flag", []string{"dlq", "list", "--help"}, []string{"sluice dlq list [flags]"}, []string{"Global Flags:", "--topic string"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := run(t, tc.args...)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if got := usageLines(out); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("usage lines %q, want %q\n%s", got, tc.want, out)
			}
			for _, w := range tc.also {
				if !strings.Contains(out, w) {
					t.Errorf("help lacks %q\n%s", w, out)
				}
			}
		})
	}
}

// usageLines are the lines of help's "Usage:" section, trimmed.
func usageLines(help string) []string {
	_, rest, ok := strings.Cut(help, "Usage:\n")
	if !ok {
		return nil
	}
	section, _, _ := strings.Cut(rest, "\n\n")
	var lines []string
	for _, l := range strings.Split(section, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}
