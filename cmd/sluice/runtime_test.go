package main

import (
	"io"
	"runtime/debug"
	"testing"

	"github.com/spf13/cobra"
)

// TestLoadConfigAppliesGOGC: every command's configuration sets the
// collector's target, 400 unless GOGC says otherwise.
func TestLoadConfigAppliesGOGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	for _, tc := range []struct {
		gogc string
		want int
	}{{"", 400}, {"150", 150}, {"off", -1}} {
		t.Setenv("PROCESSED_EVENT_OWNER", "w1")
		t.Setenv("GOGC", tc.gogc)
		debug.SetGCPercent(100)
		cmd := &cobra.Command{}
		cmd.SetErr(io.Discard)
		if _, _, err := loadConfig(cmd); err != nil {
			t.Fatalf("GOGC=%q: %v", tc.gogc, err)
		}
		if got := debug.SetGCPercent(100); got != tc.want {
			t.Errorf("GOGC=%q: the collector's target is %d, want %d", tc.gogc, got, tc.want)
		}
	}
}
