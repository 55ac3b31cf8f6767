// Package testskip is the one way a test of this repository skips. Skip
// checks the test against the committed allowlist (allowlist.txt, one line
// per allowed skip with its reason) and fails a test that is not on it;
// after a full run, `make test` compares the skipped tests with the list
// (Check, run by ./skipcheck over gotestsum's event file), so a listed
// test that no longer skips is noticed too. See
// docs/architecture.md#how-it-is-tested.
package testskip

import (
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// Module is the module path; packages are named relative to it.
const Module = "github.com/sluicehq/sluice"

//go:embed allowlist.txt
var allowlistText string

// Entry is one line of the allowlist.
type Entry struct {
	Line    int
	Package string // directory from the module root ("." for the root)
	Test    string // exact test name, or a prefix ending in "/*"
	When    string // "always", "maybe" (a condition the test measures) or "env:NAME"
	Reason  string
}

// Matches reports whether the entry covers test of package pkg.
func (e Entry) Matches(pkg, test string) bool {
	if pkg != e.Package {
		return false
	}
	if p, ok := strings.CutSuffix(e.Test, "/*"); ok {
		return strings.HasPrefix(test, p+"/")
	}
	return test == e.Test
}

// Expected reports whether the entry's test should skip in an environment
// read through getenv.
func (e Entry) Expected(getenv func(string) string) bool {
	if name, ok := strings.CutPrefix(e.When, "env:"); ok {
		return getenv(name) != ""
	}
	return true
}

func (e Entry) String() string {
	return fmt.Sprintf("allowlist.txt:%d: %s %s (%s)", e.Line, e.Package, e.Test, e.When)
}

// Parse reads an allowlist: '#' comments and blank lines are ignored; each
// other line is "package test when reason…".
func Parse(text string) ([]Entry, error) {
	var out []Entry
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 {
			return nil, fmt.Errorf("allowlist.txt:%d: want \"package test when reason\", got %q", i+1, line)
		}
		e := Entry{Line: i + 1, Package: f[0], Test: f[1], When: f[2], Reason: strings.Join(f[3:], " ")}
		if e.When != "always" && e.When != "maybe" && (!strings.HasPrefix(e.When, "env:") || e.When == "env:") {
			return nil, fmt.Errorf("allowlist.txt:%d: when %q, want always, maybe or env:NAME", e.Line, e.When)
		}
		out = append(out, e)
	}
	return out, nil
}

// Allowlist returns the committed allowlist.
func Allowlist() ([]Entry, error) { return Parse(allowlistText) }

// Skip skips t with reason if the allowlist names it (and its environment
// condition holds); otherwise it fails t: a skip nobody reviewed is a
// failure, not a silent pass.
func Skip(t testing.TB, reason string) {
	t.Helper()
	entries, err := Allowlist()
	if err != nil {
		t.Fatalf("testskip: %v", err)
	}
	pkg, err := packageDir()
	if err != nil {
		t.Fatalf("testskip: %v", err)
	}
	for _, e := range entries {
		if e.Matches(pkg, t.Name()) {
			if !e.Expected(os.Getenv) {
				t.Fatalf("testskip: %s %s would skip (%s), but its allowlist line says it skips only when %s", pkg, t.Name(), reason, e.When)
			}
			t.Skipf("%s [allowed: %s]", reason, e)
		}
	}
	t.Fatalf("testskip: %s %s wants to skip (%s) but is not on internal/testskip/allowlist.txt; make it run, or add a line with the reason", pkg, t.Name(), reason)
}

// packageDir returns the running test's package directory relative to the
// module root (go test runs a package's tests in its directory).
func packageDir() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			rel, err := filepath.Rel(dir, wd)
			return filepath.ToSlash(rel), err
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above %s", wd)
		}
		dir = parent
	}
}

// Skipped is one test that skipped in a run.
type Skipped struct{ Package, Test string }

// Check compares the tests that skipped in a full run with the allowlist:
// every skip must be listed, and every entry expected in this environment
// must have skipped at least once (an entry not expected must not have).
// It returns one message per difference, sorted.
func Check(entries []Entry, skipped []Skipped, getenv func(string) string) []string {
	var out []string
	hits := make([]int, len(entries))
	for _, s := range skipped {
		found := false
		for i, e := range entries {
			if e.Matches(s.Package, s.Test) {
				hits[i]++
				found = true
			}
		}
		if !found {
			out = append(out, fmt.Sprintf("%s %s skipped but is not on the allowlist", s.Package, s.Test))
		}
	}
	for i, e := range entries {
		switch exp := e.Expected(getenv); {
		case e.When == "maybe":
			// The test decides at run time from what it measured (a
			// server's buffering, say): both outcomes are allowed.
		case exp && hits[i] == 0:
			out = append(out, fmt.Sprintf("%s: listed, but no longer skips; remove the line", e))
		case !exp && hits[i] > 0:
			out = append(out, fmt.Sprintf("%s: skipped %d times, but its condition does not hold", e, hits[i]))
		}
	}
	sort.Strings(out)
	return out
}
