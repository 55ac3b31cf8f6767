package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestProjectionTestPrintsDocuments(t *testing.T) {
	out, errOut, err := run(t, "projection", "test", "../../examples/projections/device_status.yaml",
		"--events", "../../examples/projections/device_status.events.jsonl")
	if err != nil {
		t.Fatalf("%v: %s", err, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"_id":"dev-1"`) || !strings.Contains(lines[0], `"status":"ok"`) ||
		!strings.Contains(lines[1], `"_id":"dev-2"`) || !strings.Contains(lines[1], `"deleted":true`) {
		t.Fatalf("output:\n%s", out)
	}
}

// A compile error refuses to start, naming the file, line and column.
func TestProjectionWorkerRefusesABadFile(t *testing.T) {
	f := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(f, []byte("name: p\nversion: 1\nevent_types: [E]\nkey: event.aggregate_id\nupdates:\n  - increment: n\n    by: event.data.amount +\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"projection-worker", "--projections-file", f},
		{"projection", "test", f, "--events", "-"},
	} {
		_, _, err := run(t, args...)
		if err == nil || !strings.Contains(err.Error(), f+":7:28: projection p: updates[0].by") {
			t.Errorf("%v: error %v", args, err)
		}
	}
}
