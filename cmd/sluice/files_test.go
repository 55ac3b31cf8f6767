package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// A file named on the command line that is not there is a name that does
// not exist: exit code 3 with the path in the message, before anything is
// connected to (they exited 1, like any other failure).
func TestMissingNamedFilesExit3(t *testing.T) {
	bin := buildSluice(t)
	missing := filepath.Join(t.TempDir(), "nope")
	schema := filepath.Join("..", "..", "examples", "schemas", "OrderPlaced", "v2.json")
	projection := filepath.Join("..", "..", "examples", "projections", "daily_counts.yaml")
	for _, tc := range []struct {
		name string
		args []string
		code int
	}{
		{"schema check of a missing file", []string{"schema", "check", missing + ".json"}, 3},
		{"schema check against a missing --previous", []string{"schema", "check", schema, "--previous", missing + ".json"}, 3},
		{"schema check with a missing --upcaster", []string{"schema", "check", schema, "--upcaster", missing + ".yaml"}, 3},
		{"schema register of a missing file", []string{"schema", "register", "OrderPlaced", missing + ".json"}, 3},
		{"schema upcaster set of a missing file", []string{"schema", "upcaster", "set", missing + ".yaml"}, 3},
		{"projection test of a missing file", []string{"projection", "test", missing + ".yaml", "--events", "-"}, 3},
		{"projection test of missing events", []string{"projection", "test", projection, "--events", missing + ".jsonl"}, 3},
		{"schema check of a file that is there", []string{"schema", "check", schema}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stderr := runExit(t, bin, []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr: %s", code, tc.code, stderr)
			}
			if tc.code == 3 && !strings.Contains(stderr, missing) {
				t.Errorf("stderr does not name the missing file %s: %s", missing, stderr)
			}
		})
	}
}
