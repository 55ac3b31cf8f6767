package crashpoint

import (
	"strings"

	"github.com/sluicehq/sluice/shared/config"
)

// Config holds the crash-point knobs used by the crash tests (docs/worker-runtime.md#crash-points).
type Config struct {
	CrashPoint     string `env:"SLUICE_CRASH_POINT" doc:"<worker>:<point>: exit with code 42 at that point, once. Tests only."`
	CrashMarkerDir string `env:"SLUICE_CRASH_MARKER_DIR" doc:"Directory of the once-only crash marker files."`
}

// Validate checks the section; every problem is a *config.VarError.
func (c Config) Validate() error {
	k := &config.Checker{}
	if cp := c.CrashPoint; cp != "" {
		if wk, p, ok := strings.Cut(cp, ":"); !ok || wk == "" || p == "" {
			k.Fail("SLUICE_CRASH_POINT", cp, "must be <worker>:<point>, e.g. instanceworker:after_claim")
		}
		if c.CrashMarkerDir == "" {
			k.Fail("SLUICE_CRASH_MARKER_DIR", "", "must be set when SLUICE_CRASH_POINT is set")
		}
	}
	return k.Err()
}
