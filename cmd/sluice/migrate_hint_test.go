package main

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testenv"
)

// TestErrorMessageNamesMigrations: a command run on a database without
// sluice's schema says to check DATABASE_URL or run sluice migrate up; it
// printed only Postgres's `relation "sluice.processed_events" does not
// exist (SQLSTATE 42P01)`.
func TestErrorMessageNamesMigrations(t *testing.T) {
	setEnvConfig(t, map[string]string{"DATABASE_URL": testenv.NewDatabase(t), "EVENT_STORE_BACKEND": "file", "EVENT_STORE_FILE_DIR": t.TempDir()})
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"registry prune", []string{"registry", "prune", "--dry-run"}},
		{"registry show", []string{"registry", "show", "0b9f6a2e-6c1d-4f5e-9a3b-2d7c8e1f4a60"}},
		{"relay parked list", []string{"relay", "parked", "list"}},
		{"store segments", []string{"store", "segments"}}, // says so itself: not twice
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := run(t, tc.args...)
			if err == nil {
				t.Fatalf("sluice %s on a database without the migrations succeeded", tc.name)
			}
			if msg := errorMessage(err); strings.Count(msg, "sluice migrate up") != 1 {
				t.Errorf("sluice %s: %q; want it to say once to run sluice migrate up", tc.name, msg)
			}
		})
	}
}
