package eventstore

import (
	"errors"
	"testing"
	"time"
)

// TestPlanReindexQuietWindow: a writer that appended just now is live for
// any quiet window of at least the append timeout (30s here); a shorter
// window is refused (ErrNoQuietWindow): 0 or less sees no writer as live
// (sluice store reindex --quiet-for 0 passed the check), and 1ns or 1s
// miss a live writer whose reservation is older but still in flight
// (--quiet-for 1ns passed too).
func TestPlanReindexQuietWindow(t *testing.T) {
	e := newEnv(t)
	s := e.store(t, testConfig())
	mustAppend(t, s, command("Instance", "db:c:1", 1))
	cases := []struct {
		name  string
		quiet time.Duration
		want  error
	}{
		{"zero", 0, ErrNoQuietWindow},
		{"negative", -time.Second, ErrNoQuietWindow},
		{"a nanosecond", time.Nanosecond, ErrNoQuietWindow},
		{"a second", time.Second, ErrNoQuietWindow},
		{"just below the append timeout", 30*time.Second - time.Millisecond, ErrNoQuietWindow},
		{"the append timeout", 30 * time.Second, ErrWriterLive},
		{"an hour", time.Hour, ErrWriterLive},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.PlanReindex(ctxT(t), tc.quiet)
			if !errors.Is(err, tc.want) {
				t.Fatalf("PlanReindex(%s): %v, want %v", tc.quiet, err, tc.want)
			}
		})
	}
}
