package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/relay"
)

// TestRelayCheckpointSetGuard (issue 27.2): on a file-backend store of 5
// events whose first segment expired, `relay checkpoint set` refuses a
// position past the head or below the retention floor even with --yes,
// refuses to act without --yes on a non-terminal, prints the plan on
// --dry-run, and moves the checkpoint with --yes.
func TestRelayCheckpointSetGuard(t *testing.T) {
	ctx := context.Background()
	url, pool := testenv.NewMigratedDatabase(t)
	env := map[string]string{"DATABASE_URL": url, "EVENT_STORE_BACKEND": "file", "EVENT_STORE_FILE_DIR": t.TempDir(), "SLUICE_LOG_LEVEL": "warn"}
	cfg, bucket, st := openEnvStore(t, pool, env, "")
	appendCommands(t, st, 5, func(i int) string { return fmt.Sprintf("o-%d", i) })
	segs, err := st.Segments(ctx, 0, 1)
	if err != nil || len(segs) != 1 || segs[0].First != 1 || segs[0].Last != 1 {
		t.Fatalf("want a first segment holding only position 1: %+v %v", segs, err)
	}
	if err := bucket.Delete(ctx, segs[0].Key); err != nil { // expired by a lifecycle rule
		t.Fatal(err)
	}
	cps := relay.NewCheckpointStore(bucket, cfg.Relay.CheckpointKey)
	position := func() int64 {
		cp, _, _, err := cps.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return cp.Position
	}
	steps := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
		wantPos  int64
	}{
		{"past the head", []string{"--position", "9", "--yes"}, exitUnsafe, "past the store's head 5", 0},
		{"below the retention floor", []string{"--position", "0", "--yes"}, exitUnsafe, "below the retention floor 1", 0},
		{"no --yes on a non-terminal", []string{"--position", "3"}, exitNeedsConfirmation, "pass --yes", 0},
		{"dry run", []string{"--position", "3", "--dry-run"}, 0, "3 positions (1..3) are skipped and never published", 0},
		{"act", []string{"--position", "3", "--yes"}, 0, "moved forward: 0 -> 3", 3},
		{"back with --yes", []string{"--position", "1", "--yes"}, 0, "2 positions (2..3) are published again", 1},
	}
	for _, s := range steps {
		out, err := runRelayCLI(ctx, append([]string{"checkpoint", "set"}, s.args...)...)
		checkGuardStep(t, s.name, out, err, s.wantCode, s.wantOut)
		if got := position(); got != s.wantPos {
			t.Fatalf("%s: checkpoint %d, want %d", s.name, got, s.wantPos)
		}
	}
}
