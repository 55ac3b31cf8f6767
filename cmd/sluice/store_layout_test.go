package main

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testenv"
)

// TestStoreCommandsDoNotWaitForTheLayout: an operator command opening the
// event store on a database without the migrations fails at once saying
// the layout cannot be read and what to run; it logged a service's line,
// "checking it in the background", then failed with "not checked yet:
// waiting for …", which it was not.
func TestStoreCommandsDoNotWaitForTheLayout(t *testing.T) {
	setEnvConfig(t, map[string]string{"DATABASE_URL": testenv.NewDatabase(t), "EVENT_STORE_BACKEND": "file", "EVENT_STORE_FILE_DIR": t.TempDir()})
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"store segments", []string{"store", "segments"}},
		{"store cat", []string{"store", "cat", "--from", "1"}},
		{"store repair", []string{"store", "repair"}},
		{"store reindex", []string{"store", "reindex", "--dry-run"}},
		{"relay checkpoint show", []string{"relay", "checkpoint", "show"}},
		{"relay gaps", []string{"relay", "gaps"}},
		{"verify", []string{"verify", "--db", "shop", "--class", "orders"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, err := run(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), "cannot read the store's layout") || !strings.Contains(err.Error(), "sluice migrate up") {
				t.Errorf("sluice %s: %v; want it to say the layout cannot be read and to run sluice migrate up", tc.name, err)
			}
			if strings.Contains(stderr, "background") || (err != nil && strings.Contains(err.Error(), "waiting for")) {
				t.Errorf("sluice %s says it waits: %v\n%s", tc.name, err, stderr)
			}
		})
	}
}
