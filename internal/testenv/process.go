package testenv

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Process is the test binary re-executed as a helper process: a worker under
// test running as a real process, so crash points (exit 42), SIGTERM drains
// and kill -9 can be exercised. The package's TestMain decides from its
// environment what the helper process runs.
type Process struct {
	cmd  *exec.Cmd
	done chan error
}

// StartHelperProcess re-runs the test binary with no tests selected and env
// appended to this process's environment; its output goes to the test log.
// It is killed when the test ends.
func StartHelperProcess(t testing.TB, env []string) *Process {
	t.Helper()
	c := exec.Command(os.Args[0], "-test.run=^$")
	c.Env = append(os.Environ(), env...)
	c.Stdout, c.Stderr = LogWriter{T: t}, LogWriter{T: t}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Process{cmd: c, done: make(chan error, 1)}
	go func() { p.done <- c.Wait() }()
	t.Cleanup(func() { _ = c.Process.Kill(); <-p.done })
	return p
}

// Signal sends sig to the process.
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// ExitCode waits for the process to exit and returns its code.
func (p *Process) ExitCode(t testing.TB, within time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		p.done <- nil
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(within):
		t.Fatalf("testenv: process did not exit within %s", within)
		return -1
	}
}

// Term sends SIGTERM and returns the exit code (waiting up to 30 s).
func (p *Process) Term(t testing.TB) int {
	t.Helper()
	_ = p.Signal(syscall.SIGTERM)
	return p.ExitCode(t, 30*time.Second)
}

// LogWriter writes each chunk it receives to the test log.
type LogWriter struct{ T testing.TB }

func (w LogWriter) Write(p []byte) (int, error) {
	w.T.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// WaitFor polls cond every 50 ms until it holds, failing the test after within.
func WaitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	WaitForEvery(t, within, 50*time.Millisecond, what, cond)
}

// WaitForEvery is WaitFor checking cond every period.
func WaitForEvery(t testing.TB, within, period time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(period)
	}
}

// RunInBackground runs run(ctx) — a service's or a consumer's Run — in a
// goroutine until stop is called or the test ends. stop cancels ctx, waits
// for run to return (at most 30 s), reports an error it returned, or that
// it did not stop, as a test error naming what, and then calls each of
// then (closing what run used). It does all that once; later calls do
// nothing.
func RunInBackground(t testing.TB, what string, run func(context.Context) error, then ...func()) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("%s: %v", what, err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("%s did not stop within 30s", what)
			}
			for _, f := range then {
				f()
			}
		})
	}
	t.Cleanup(stop)
	return stop
}
