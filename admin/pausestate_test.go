package admin

import (
	"fmt"
	"testing"
)

// A group's pause state from its flag and the workers seen: paused only
// when every worker seen (at least one) reports the pause in effect.
func TestPauseState(t *testing.T) {
	for _, tc := range []struct {
		flag          bool
		seen, stopped int
		want          string
	}{
		{false, 0, 0, PauseRunning},
		{false, 2, 0, PauseRunning},
		{false, 2, 1, PauseResuming},
		{false, 1, 1, PauseResuming},
		{true, 0, 0, PauseRequested},
		{true, 2, 0, PausePausing},
		{true, 2, 1, PausePausing},
		{true, 2, 2, PausePaused},
		{true, 1, 1, PausePaused},
	} {
		t.Run(fmt.Sprintf("flag=%t/%d of %d", tc.flag, tc.stopped, tc.seen), func(t *testing.T) {
			if got := pauseState(tc.flag, PauseWorkers{Seen: tc.seen, Paused: tc.stopped}); got != tc.want {
				t.Errorf("%q, want %q", got, tc.want)
			}
		})
	}
}
