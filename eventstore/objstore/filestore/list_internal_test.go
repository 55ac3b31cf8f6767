package filestore

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"
)

// A listing reads a folder's names only. ReadDir and Readdir on a folder
// opened in an os.Root lstat every entry inside the os package, where the
// typed counter of TestListAfterSortsOnlyWhatFollows cannot see it: with
// list.go of 73901f5 (ReadDir(-1)) that test passes, so this one keeps
// the calls out of list.go.
func TestListReadsNamesOnly(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "list.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			switch sel.Sel.Name {
			case "ReadDir", "Readdir", "ReadDirFS", "WalkDir", "Walk":
				t.Errorf("list.go calls %s, which types every entry of a folder opened in an os.Root", sel.Sel.Name)
			}
		}
		return true
	})
}

// The listing compares a folder's key prefix, an entry's name and, for a
// subfolder, "/" with the prefix and startAfter without joining them;
// every split of every pair of these strings in two or three parts must
// answer as the joined key does.
func TestJoinedComparisons(t *testing.T) {
	words := []string{"", "s", "segments", "segments/", "segments/0001", "segments/0001-0002.jsonl",
		"segments/0002", "segments-", "segments/n4/", "segments/n4/0000-1", "t", "a/b/c"}
	for _, key := range words {
		// Every split in two parts, then in three.
		var splits [][]string
		for cut := 0; cut <= len(key); cut++ {
			splits = append(splits, []string{key[:cut], key[cut:]})
			for cut2 := cut; cut2 <= len(key); cut2++ {
				splits = append(splits, []string{key[:cut], key[cut:cut2], key[cut2:]})
			}
		}
		for _, parts := range splits {
			for _, s := range words {
				if got, want := compareJoined(s, parts...), strings.Compare(key, s); got != want {
					t.Errorf("compareJoined(%q, %q) = %d, want %d", s, parts, got, want)
				}
				if got, want := hasPrefixJoined(s, parts...), strings.HasPrefix(key, s); got != want {
					t.Errorf("hasPrefixJoined(%q, %q) = %v, want %v", s, parts, got, want)
				}
				if got, want := isPrefixOfJoined(s, parts...), strings.HasPrefix(s, key); got != want {
					t.Errorf("isPrefixOfJoined(%q, %q) = %v, want %v", s, parts, got, want)
				}
			}
		}
	}
}
