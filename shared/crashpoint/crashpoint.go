// Package crashpoint provides the crash points of docs/worker-runtime.md#crash-points for crash tests:
// with SLUICE_CRASH_POINT=<worker>:<point>, the process exits with code 42
// the first time it reaches that point, exactly once (a marker file in
// SLUICE_CRASH_MARKER_DIR remembers that it crashed, so the restarted
// process runs through). It exists so tests can prove the guarantees of
// docs/architecture.md#the-guarantees (no lost work, at most one side effect) across a crash at every
// step between claim and offset commit.
//
// Production code calls Hit at each point; with no crash point configured
// Hit costs one comparison. A component that can stop in-process at a point
// (the event store between its reservation and its commit) calls At
// instead, so that a test in the same process can crash it there with a
// Crasher of Func. It is the one fault-injection mechanism of the module
// (docs/architecture.md, "One construction convention").
package crashpoint

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// ExitCode is the exit status of a deliberate crash.
const ExitCode = 42

// Crasher decides whether a named point crashes the process.
type Crasher struct {
	worker, point string
	markerDir     string
	exit          func(code int)
	once          sync.Once
	fn            func(ctx context.Context, worker, point, detail string) error
}

// Func returns a Crasher for in-process crash tests: At calls fn at every
// point, and a non-nil error stops the component there exactly as a crash
// would (no clean-up); fn may also block to hold the component at the
// point. Hit, which cannot stop a component in-process, calls fn and
// ignores its error.
func Func(fn func(ctx context.Context, worker, point, detail string) error) *Crasher {
	return &Crasher{fn: fn}
}

// At is the crash point (worker, point) of a component that can stop
// there in-process; detail names what is at stake (a segment key). With a
// Crasher of New it is Hit and returns nil (or never returns); with one of
// Func it returns fn's error, and the caller stops at once, leaving
// everything as a crashed process would.
func (c *Crasher) At(ctx context.Context, worker, point, detail string) error {
	if c != nil && c.fn != nil {
		return c.fn(ctx, worker, point, detail)
	}
	c.Hit(worker, point)
	return nil
}

// New returns a Crasher for spec ("<worker>:<point>", empty for none) and
// the marker directory. A nil *Crasher is valid and never crashes.
func New(spec, markerDir string) (*Crasher, error) {
	if spec == "" {
		return nil, nil
	}
	w, p, ok := strings.Cut(spec, ":")
	if !ok || w == "" || p == "" {
		return nil, fmt.Errorf("crashpoint: SLUICE_CRASH_POINT %q: want <worker>:<point>", spec)
	}
	if markerDir == "" {
		return nil, fmt.Errorf("crashpoint: SLUICE_CRASH_MARKER_DIR must be set with SLUICE_CRASH_POINT")
	}
	return &Crasher{worker: w, point: p, markerDir: markerDir, exit: os.Exit}, nil
}

// Hit exits the process with ExitCode if (worker, point) is the configured
// crash point and it has not crashed there before.
func (c *Crasher) Hit(worker, point string) {
	if c != nil && c.fn != nil {
		_ = c.fn(context.Background(), worker, point, "")
		return
	}
	if c == nil || worker != c.worker || point != c.point {
		return
	}
	c.once.Do(func() {
		marker := filepath.Join(c.markerDir, "crashed-"+worker+"-"+point)
		f, err := os.OpenFile(marker, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return // crashed here before (or cannot record it): run through
		}
		_ = f.Sync()
		_ = f.Close()
		fmt.Fprintf(os.Stderr, "crashpoint: crashing at %s:%s (exit %d)\n", worker, point, ExitCode)
		c.exit(ExitCode)
	})
}
