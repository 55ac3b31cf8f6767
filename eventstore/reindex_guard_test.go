package eventstore

import (
	"errors"
	"testing"
	"time"
)

// TestPlanReindexQuietWindow: a writer that appended just now is live for
// any positive quiet window; a window of 0 or less is refused
// (ErrNoQuietWindow) instead of seeing no writer as live and passing the
// check (sluice store reindex --quiet-for 0 did).
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
		{"a second", time.Second, ErrWriterLive},
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
