package testskip

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod at %s", root)
	}
	return root
}

// directSkip matches a call of a Skip method; one not on testskip bypasses
// the allowlist.
var directSkip = regexp.MustCompile(`(\w+)\.(Skip|Skipf|SkipNow)\(`)

// TestEverySkipGoesThroughTheHelper fails on a t.Skip, t.Skipf or
// t.SkipNow anywhere in the repository's tests but in this package: a
// direct skip would pass unseen by the allowlist.
func TestEverySkipGoesThroughTheHelper(t *testing.T) {
	root := repoRoot(t)
	here, _ := filepath.Abs(".")
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p == here || (p != root && strings.HasPrefix(d.Name(), ".")) || d.Name() == "testdata" || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			if p != root && nestedModule(p) {
				// A nested module (esserver) cannot import this one's
				// internal packages: its skips are plain, and skipcheck
				// holds them to the allowlist from the run's events.
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(data), "\n") {
			code, _, _ := strings.Cut(line, "//")
			for _, m := range directSkip.FindAllStringSubmatch(code, -1) {
				if m[1] != "testskip" {
					rel, _ := filepath.Rel(root, p)
					t.Errorf("%s:%d: a direct skip; call testskip.Skip(t, reason) and list the test in internal/testskip/allowlist.txt", rel, i+1)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestAllowlistNamesExistingTests checks each line statically: it parses,
// its package exists, its top-level test function is declared there and
// calls (directly or through a helper of the package) testskip.Skip.
func TestAllowlistNamesExistingTests(t *testing.T) {
	entries, err := Allowlist()
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) == 0 {
		t.Fatal("empty allowlist")
	}
	root := repoRoot(t)
	seen := map[string]bool{}
	for _, e := range entries {
		if seen[e.Package+" "+e.Test] {
			t.Errorf("%s: listed twice", e)
		}
		seen[e.Package+" "+e.Test] = true
		files, _ := filepath.Glob(filepath.Join(root, e.Package, "*_test.go"))
		var src strings.Builder
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			src.Write(b)
		}
		top, _, _ := strings.Cut(strings.TrimSuffix(e.Test, "/*"), "/")
		if !strings.Contains(src.String(), "func "+top+"(t *testing.T)") {
			t.Errorf("%s: no func %s in %s", e, top, e.Package)
		}
		if !strings.Contains(src.String(), "testskip.Skip(") && !(nestedModule(filepath.Join(root, e.Package)) && strings.Contains(src.String(), "t.Skip(")) {
			t.Errorf("%s: package %s never calls testskip.Skip", e, e.Package)
		}
	}
}

func TestCheck(t *testing.T) {
	entries, err := Parse(`
# comment
a TestA always reason a
a TestB/* always reason b
b TestC env:X reason c
`)
	if err != nil {
		t.Fatal(err)
	}
	noEnv := func(string) string { return "" }
	withX := func(k string) string {
		if k == "X" {
			return "1"
		}
		return ""
	}
	cases := []struct {
		name    string
		skipped []Skipped
		env     func(string) string
		want    []string // substrings, one per difference
	}{
		{"exact", []Skipped{{"a", "TestA"}, {"a", "TestB/one"}, {"a", "TestB/two"}}, noEnv, nil},
		{"env holds", []Skipped{{"a", "TestA"}, {"a", "TestB/x"}, {"b", "TestC"}}, withX, nil},
		{"unlisted skip", []Skipped{{"a", "TestA"}, {"a", "TestB/x"}, {"a", "TestD"}}, noEnv, []string{"a TestD skipped but is not on the allowlist"}},
		{"same name, other package", []Skipped{{"a", "TestA"}, {"a", "TestB/x"}, {"c", "TestA"}}, noEnv, []string{"c TestA skipped"}},
		{"prefix is not a subtest", []Skipped{{"a", "TestA"}, {"a", "TestB"}}, noEnv, []string{"a TestB skipped", "TestB/* (always): listed, but no longer skips"}},
		{"listed no longer skips", []Skipped{{"a", "TestB/x"}}, noEnv, []string{"a TestA (always): listed, but no longer skips"}},
		{"env test skips without its env", []Skipped{{"a", "TestA"}, {"a", "TestB/x"}, {"b", "TestC"}}, noEnv, []string{"its condition does not hold"}},
		{"env test does not skip with its env", []Skipped{{"a", "TestA"}, {"a", "TestB/x"}}, withX, []string{"b TestC (env:X): listed, but no longer skips"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Check(entries, tc.skipped, tc.env)
			if len(got) != len(tc.want) {
				t.Fatalf("got %q, want %d differences %q", got, len(tc.want), tc.want)
			}
			for _, w := range tc.want {
				found := false
				for _, g := range got {
					found = found || strings.Contains(g, w)
				}
				if !found {
					t.Errorf("got %q, want one containing %q", got, w)
				}
			}
		})
	}
	if _, err := Parse("a TestA sometimes reason"); err == nil {
		t.Error("a bad when parsed")
	}
	if _, err := Parse("a TestA always"); err == nil {
		t.Error("a line without reason parsed")
	}
}

// nestedModule reports whether dir is the root of a Go module of its own
// (a go.mod of its own: the esserver module).
func nestedModule(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "go.mod"))
	return err == nil
}

// TestCheckMaybe: a "maybe" entry passes whether its test skipped or not,
// and still covers the skip it allows.
func TestCheckMaybe(t *testing.T) {
	entries, err := Parse("a TestM maybe measured at run time\n")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		skipped []Skipped
	}{{"skipped", []Skipped{{Package: "a", Test: "TestM"}}}, {"ran", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			if d := Check(entries, tc.skipped, func(string) string { return "" }); len(d) != 0 {
				t.Fatalf("diffs %v, want none", d)
			}
		})
	}
	if d := Check(entries, []Skipped{{Package: "a", Test: "TestOther"}}, func(string) string { return "" }); len(d) != 1 {
		t.Fatalf("an unlisted skip: diffs %v, want one", d)
	}
}
