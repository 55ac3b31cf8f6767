package main

import (
	"testing"

	"github.com/sluicehq/sluice/internal/testenv"
)

// store cat and store segments refuse a flag they cannot honour with a
// usage error (exit code 2) naming it: --limit without a read by cursor
// was ignored, --from -1 read from the start, --after -5 listed every
// segment. The flags they honour still work.
func TestStoreFlagRefusals(t *testing.T) {
	url, _ := testenv.NewMigratedDatabase(t)
	setEnvConfig(t, map[string]string{"DATABASE_URL": url, "EVENT_STORE_BACKEND": "file", "EVENT_STORE_FILE_DIR": t.TempDir()})
	cases := []struct {
		name string
		args []string
		code int
		says string
	}{
		{"cat --limit without --cursor", []string{"store", "cat", "--limit", "5"}, exitUsage, "--limit bounds a read by --cursor"},
		{"cat --limit with --from", []string{"store", "cat", "--from", "1", "--limit", "5"}, exitUsage, "--limit"},
		{"cat --limit with --event-id", []string{"store", "cat", "--event-id", "0b9f6a2e-6c1d-4f5e-9a3b-2d7c8e1f4a60", "--limit", "5"}, exitUsage, "--limit"},
		{"cat --from -1", []string{"store", "cat", "--from", "-1"}, exitUsage, "--from -1"},
		{"cat --from 0", []string{"store", "cat", "--from", "0"}, exitUsage, "--from 0"},
		{"cat --to -2", []string{"store", "cat", "--to", "-2"}, exitUsage, "--to -2"},
		{"cat --to before --from", []string{"store", "cat", "--from", "5", "--to", "3"}, exitUsage, "before --from"},
		{"cat --limit -1", []string{"store", "cat", "--cursor", "", "--limit", "-1"}, exitUsage, "--limit -1"},
		{"cat --from-seq 0", []string{"store", "cat", "--aggregate-type", "T", "--aggregate-id", "a", "--from-seq", "0"}, exitUsage, "--from-seq 0"},
		{"cat --to-seq -1", []string{"store", "cat", "--aggregate-type", "T", "--aggregate-id", "a", "--to-seq", "-1"}, exitUsage, "--to-seq -1"},
		{"cat --kind without --aggregate-id", []string{"store", "cat", "--kind", "domain"}, exitUsage, "--kind applies with --aggregate-id"},
		{"cat --event-id not a UUID", []string{"store", "cat", "--event-id", "nosuch"}, exitUsage, `--event-id "nosuch": want a UUID`},
		{"cat --event-id empty", []string{"store", "cat", "--event-id", ""}, exitUsage, "--event-id"},
		{"cat --cursor with --from", []string{"store", "cat", "--cursor", "", "--from", "2"}, exitUsage, "not both"},
		{"reindex --quiet-for -1s", []string{"store", "reindex", "--quiet-for", "-1s", "--dry-run"}, exitUsage, "--quiet-for -1s"},
		// 0 is neither the default nor a silent way past the live-writer
		// check: a window of 0 sees no writer as live.
		{"reindex --quiet-for 0", []string{"store", "reindex", "--quiet-for", "0", "--dry-run"}, exitUsage, "--quiet-for 0s: want at least 30s"},
		{"reindex --quiet-for 0s --yes", []string{"store", "reindex", "--quiet-for", "0s", "--yes"}, exitUsage, "leave it out for 2 × EVENT_STORE_APPEND_TIMEOUT (1m0s)"},
		{"reindex --quiet-for=0ms", []string{"store", "reindex", "--quiet-for=0ms", "--dry-run"}, exitUsage, "--quiet-for 0s"},
		// Nor is a window shorter than the append timeout (1ns passed):
		// a live writer's append may be in flight that long.
		{"reindex --quiet-for 1ns", []string{"store", "reindex", "--quiet-for", "1ns", "--yes"}, exitUsage, "--quiet-for 1ns: want at least 30s, EVENT_STORE_APPEND_TIMEOUT"},
		{"reindex --quiet-for 1s", []string{"store", "reindex", "--quiet-for", "1s", "--dry-run"}, exitUsage, "--quiet-for 1s: want at least 30s"},
		{"reindex --quiet-for 29.999s", []string{"store", "reindex", "--quiet-for", "29.999s", "--dry-run"}, exitUsage, "want at least 30s"},
		{"reindex, the default window", []string{"store", "reindex", "--dry-run"}, 0, "no writer reserved within 1m0s"},
		{"reindex --quiet-for 30s", []string{"store", "reindex", "--quiet-for", "30s", "--dry-run"}, 0, "no writer reserved within 30s"},
		{"segments --after -5", []string{"store", "segments", "--after", "-5"}, exitUsage, "--after -5"},
		{"segments --limit 0", []string{"store", "segments", "--limit", "0"}, exitUsage, "--limit 0"},
		{"cat --cursor --limit", []string{"store", "cat", "--cursor", "", "--limit", "5"}, 0, "0 events"},
		{"cat --from --to", []string{"store", "cat", "--from", "1", "--to", "3"}, 0, ""},
		{"segments --after 0", []string{"store", "segments", "--after", "0"}, 0, "0 segments"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, err := run(t, c.args...)
			if c.code != 0 && exitCode(err) != c.code {
				t.Fatalf("exit %d (%v), want %d", exitCode(err), err, c.code)
			}
			checkGuardStep(t, c.name, out+errOut, err, c.code, c.says)
		})
	}
}
