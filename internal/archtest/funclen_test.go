package archtest

import (
	"os"
	"strings"
	"testing"
)

// No production function of either module (the product and esserver/) is
// longer than MaxFuncLines but those of the allowlist, and every one longer
// than ListFuncLines is listed, with why it stays whole, in
// docs/architecture.md.
func TestFunctionLengths(t *testing.T) {
	files, err := ProductionFiles("../..")
	if err != nil {
		t.Fatal(err)
	}
	funcs, err := Funcs(files)
	if err != nil {
		t.Fatal(err)
	}
	var es int
	for _, f := range funcs {
		if strings.HasPrefix(f.File, "esserver/") {
			es++
		}
	}
	if len(funcs) < 1000 || es < 100 {
		t.Fatalf("found %d functions, %d of them in esserver/: not the two modules", len(funcs), es)
	}
	t.Run("at most 120 lines", func(t *testing.T) {
		for _, p := range CheckFuncLengths(funcs, MaxFuncLines, LongFuncAllowlist()) {
			t.Error(p)
		}
	})
	t.Run("over 80 lines listed in docs/architecture.md", func(t *testing.T) {
		md, err := os.ReadFile("../../docs/architecture.md")
		if err != nil {
			t.Fatal(err)
		}
		listed, err := ListedLongFuncs(md)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range CheckLongFuncList(funcs, ListFuncLines, listed) {
			t.Error(p)
		}
	})
}

// The checks fail on a long function, on a stale allowlist or list entry,
// and name methods by their receiver's type (synthetic sources).
func TestFunctionLengthViolations(t *testing.T) {
	fn := func(name string, lines int) string {
		return "func " + name + " {\n" + strings.Repeat("\t_ = 1\n", lines-2) + "}\n"
	}
	src := "package p\n\n" + fn("long()", 121) + fn("(s *Server) edge()", 120) + fn("(l list[T]) generic()", 81) +
		"type Server struct{}\ntype list[T any] []T\n"
	funcs, err := Funcs([]SourceFile{{Path: "a/b/p.go", Src: []byte(src)}, {Path: "a/b/p_test.go", Src: []byte("package p\n\n" + fn("inTest()", 200))}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, f := range funcs {
		got[f.ID] = f.Lines
	}
	if len(got) != 3 || got["a/b.long"] != 121 || got["a/b.Server.edge"] != 120 || got["a/b.list.generic"] != 81 {
		t.Fatalf("functions %v", got)
	}
	for _, tc := range []struct {
		name  string
		probs []string
		want  []string
	}{
		{"121 lines fail, 120 pass", CheckFuncLengths(funcs, MaxFuncLines, nil), []string{"a/b.long (121 lines) is longer than 120 lines"}},
		{"allowlisted", CheckFuncLengths(funcs, MaxFuncLines, map[string]string{"a/b.long": "why"}), nil},
		{"stale allowlist entry", CheckFuncLengths(funcs, MaxFuncLines, map[string]string{"a/b.long": "why", "a/b.Server.edge": "why"}),
			[]string{"a/b.Server.edge is allowed over 120 lines but is not that long"}},
		{"unlisted over 80", CheckLongFuncList(funcs, ListFuncLines, map[string]string{"a/b.long": "x", "a/b.Server.edge": "y"}),
			[]string{"a/b.list.generic (81 lines) is longer than 80 lines: list it"}},
		{"listed but short", CheckLongFuncList(funcs, ListFuncLines, map[string]string{"a/b.long": "x", "a/b.Server.edge": "y", "a/b.list.generic": "z", "a/b.gone": "w"}),
			[]string{"a/b.gone is listed under"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.probs) != len(tc.want) {
				t.Fatalf("got %q, want %q", tc.probs, tc.want)
			}
			for i, p := range tc.probs {
				if !strings.Contains(p, tc.want[i]) {
					t.Errorf("problem %d = %q, want it to contain %q", i, p, tc.want[i])
				}
			}
		})
	}
	t.Run("the list in the page", func(t *testing.T) {
		md := "## A\n| `x.y` | no |\n" + LongFuncsHeading + "\n\n| function | why |\n|---|---|\n| `a/b.long` | one switch |\n| `a/b.Server.edge` | reads in order |\n## Next\n| `c.d` | other |\n"
		listed, err := ListedLongFuncs([]byte(md))
		if err != nil || len(listed) != 2 || listed["a/b.long"] != "one switch" {
			t.Fatalf("listed %v, %v", listed, err)
		}
		if _, err := ListedLongFuncs([]byte("## Other\n")); err == nil {
			t.Fatal("no error without the heading")
		}
		if _, err := ListedLongFuncs([]byte(LongFuncsHeading + "\n| `a` | |\n")); err == nil {
			t.Fatal("no error for an entry without a reason")
		}
	})
}
