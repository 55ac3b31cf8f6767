package docs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// repoRoot is the repository root as seen from this package's directory.
const repoRoot = ".."

// specSection is how the external specification's sections were cited
// (written in two parts so that this file does not match itself).
const specSection = "SPEC " + "§"

// selfTest is this file: its fixtures name references that must not
// resolve.
var selfTest = filepath.Join(repoRoot, "docs", "links_test.go")

func TestSlug(t *testing.T) {
	cases := []struct{ heading, want string }{
		{"The guarantees", "the-guarantees"},
		{"Append protocol (group commit)", "append-protocol-group-commit"},
		{"`sluice dlq`", "sluice-dlq"},
		{"Shutdown (SIGTERM)", "shutdown-sigterm"},
		{"Abandoned is final (issue 21 item 2)", "abandoned-is-final-issue-21-item-2"},
		{"Failures: outage or poison", "failures-outage-or-poison"},
		{"A [link](x.md) and *emphasis*", "a-link-and-emphasis"},
		{"event_id and snake_case", "event_id-and-snake_case"},
		{"Höhe — Ünïcode", "höhe--ünïcode"},
	}
	for _, c := range cases {
		if got := Slug(c.heading); got != c.want {
			t.Errorf("Slug(%q) = %q, want %q", c.heading, got, c.want)
		}
	}
}

func TestAnchors(t *testing.T) {
	md := "# Title\n\n## Part\n\n```sh\n# not a heading\n```\n\n## Part\n    # indented code\n####### seven\n#nospace\n### Trailing ###\n"
	got := Anchors([]byte(md))
	for _, want := range []string{"title", "part", "part-1", "trailing"} {
		if !got[want] {
			t.Errorf("anchor %q missing from %v", want, got)
		}
	}
	for _, not := range []string{"not-a-heading", "indented-code", "seven", "nospace"} {
		if got[not] {
			t.Errorf("anchor %q must not exist (%v)", not, got)
		}
	}
}

// TestCheckerFindsBrokenReferences proves the checks fail on a deliberate
// violation: a missing file, a missing anchor, a broken Markdown link.
func TestCheckerFindsBrokenReferences(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.md", "# A\n\n<a id=\"explicit\"></a>\n## Real heading\n\nSee [b](b.md#there), [self](#real-heading), [gone](c.md), [bad](#nowhere), `[code](x.md)`.\n")
	write("b.md", "# B\n\n## There\n")
	c := NewChecker(dir)
	errs, err := c.CheckMarkdown("a.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(errs) != 2 || !strings.Contains(errs[0].Error(), "c.md") || !strings.Contains(errs[1].Error(), "nowhere") {
		t.Fatalf("CheckMarkdown errors = %v, want the missing c.md and #nowhere", errs)
	}
	text := "see docs/b.md#there, docs/a.md#real-heading, docs/a.md#explicit and docs/a.md#real-, but not docs/b.md#missing or docs/z.md"
	errs = c.CheckText(text)
	if len(errs) != 2 || !strings.Contains(errs[0].Error(), "missing") || !errors.Is(errs[1], fs.ErrNotExist) {
		t.Fatalf("CheckText errors = %v, want b.md#missing and z.md", errs)
	}
}

// TestDocsLinksResolve checks every relative link of every page in docs/
// and of the README.
func TestDocsLinksResolve(t *testing.T) {
	pages, err := filepath.Glob("*.md")
	if err != nil || len(pages) < 5 {
		t.Fatalf("docs pages: %v (%d found)", err, len(pages))
	}
	c := NewChecker(".")
	for _, p := range pages {
		errs, err := c.CheckMarkdown(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range errs {
			t.Error(e)
		}
	}
	errs, err := NewChecker(repoRoot).CheckMarkdown("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range errs {
		t.Error(e)
	}
}

// TestGoCitesTheRepository checks every Go and SQL file of the module
// (test data aside, which keeps history as it was): no reference
// to the external specification's sections ("SPEC §"), and every
// docs/<page>.md#<anchor> it names resolves.
func TestGoCitesTheRepository(t *testing.T) {
	c := NewChecker(".")
	files := 0
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bin", "node_modules", "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		if !(strings.HasSuffix(path, ".go") || strings.HasSuffix(path, ".sql")) || path == selfTest {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		for i, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, specSection) {
				t.Errorf("%s:%d cites a section of a file outside the repository; cite docs/ instead: %s", path, i+1, strings.TrimSpace(line))
			}
			for _, e := range c.CheckText(line) {
				t.Errorf("%s:%d: %v", path, i+1, e)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("walked only %d Go files from %s", files, repoRoot)
	}
}
