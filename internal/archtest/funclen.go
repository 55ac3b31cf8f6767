package archtest

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path"
	"sort"
	"strings"
)

// MaxFuncLines is the longest a production function may be, from its func
// line to its closing brace (docs/architecture.md, "Long functions").
const MaxFuncLines = 120

// ListFuncLines is the length above which a production function is listed,
// with why it stays whole, in docs/architecture.md's "Long functions".
const ListFuncLines = 80

// LongFuncAllowlist holds the production functions allowed over
// MaxFuncLines, by Func.ID, with the reason. It is empty and stays so:
// split a long function at its steps instead (an entry no longer that long
// fails the check).
func LongFuncAllowlist() map[string]string { return map[string]string{} }

// Func is one function or method declared in a non-test Go file.
type Func struct {
	// File is the module-relative path of its file.
	File string
	// ID names it as docs/architecture.md does: the package directory, the
	// receiver's type (without *) and the name, joined by dots
	// ("relay.Relay.recheckGaps", "cmd/sluice.runDev").
	ID string
	// Line is where it starts; Lines how many lines it spans.
	Line, Lines int
}

func (f Func) String() string {
	return fmt.Sprintf("%s:%d %s (%d lines)", f.File, f.Line, f.ID, f.Lines)
}

// ProductionFiles reads every non-test .go file under root (the module
// root), the nested esserver module included, but hidden directories and
// testdata.
func ProductionFiles(root string) ([]SourceFile, error) {
	return moduleFiles(root, func(rel string) bool { return strings.HasSuffix(rel, "_test.go") })
}

// Funcs returns every function with a body declared in files (test files
// are skipped), in file order.
func Funcs(files []SourceFile) ([]Func, error) {
	var out []Func
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f.Path, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f.Path, f.Src, parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("archtest: %w", err)
		}
		for _, d := range af.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			start, end := fset.Position(fd.Pos()).Line, fset.Position(fd.End()).Line
			out = append(out, Func{File: f.Path, ID: funcID(f.Path, fd), Line: start, Lines: end - start + 1})
		}
	}
	return out, nil
}

func funcID(file string, fd *ast.FuncDecl) string {
	id := path.Dir(file)
	if fd.Recv != nil && len(fd.Recv.List) == 1 {
		t := fd.Recv.List[0].Type
		if s, ok := t.(*ast.StarExpr); ok {
			t = s.X
		}
		switch x := t.(type) {
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		}
		if n, ok := t.(*ast.Ident); ok {
			id += "." + n.Name
		}
	}
	return id + "." + fd.Name.Name
}

// CheckFuncLengths returns every function of funcs longer than max that
// allow does not name, and every name of allow that is not such a function
// (the list only shrinks).
func CheckFuncLengths(funcs []Func, max int, allow map[string]string) []string {
	var out []string
	seen := map[string]bool{}
	for _, f := range funcs {
		if f.Lines <= max {
			continue
		}
		seen[f.ID] = true
		if _, ok := allow[f.ID]; !ok {
			out = append(out, fmt.Sprintf("%s is longer than %d lines: split it at its steps (docs/architecture.md, \"Long functions\")", f, max))
		}
	}
	for id := range allow {
		if !seen[id] {
			out = append(out, fmt.Sprintf("%s is allowed over %d lines but is not that long (or gone): remove it from the allowlist", id, max))
		}
	}
	sort.Strings(out)
	return out
}

// LongFuncsHeading is the heading of the list in docs/architecture.md.
const LongFuncsHeading = "### Long functions"

// ListedLongFuncs reads the list under LongFuncsHeading in the Markdown
// page md: table rows "| `ID` | why |", up to the next heading. It returns
// the reason by ID.
func ListedLongFuncs(md []byte) (map[string]string, error) {
	out := map[string]string{}
	in, found := false, false
	sc := bufio.NewScanner(bytes.NewReader(md))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			in = strings.TrimSpace(line) == LongFuncsHeading
			found = found || in
			continue
		}
		if !in || !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), "|")
		if len(cells) < 2 {
			return nil, fmt.Errorf("archtest: %q: want | `ID` | why |", line)
		}
		id := strings.Trim(strings.TrimSpace(cells[0]), "`")
		why := strings.TrimSpace(cells[len(cells)-1])
		if why == "" {
			return nil, fmt.Errorf("archtest: %s is listed without a reason", id)
		}
		if _, dup := out[id]; dup {
			return nil, fmt.Errorf("archtest: %s is listed twice", id)
		}
		out[id] = why
	}
	if !found {
		return nil, fmt.Errorf("archtest: no %q heading", LongFuncsHeading)
	}
	return out, nil
}

// CheckLongFuncList returns the differences between the functions of funcs
// longer than min and the list: one unlisted, or one listed that is not
// (or no longer) that long.
func CheckLongFuncList(funcs []Func, min int, listed map[string]string) []string {
	var out []string
	long := map[string]bool{}
	for _, f := range funcs {
		if f.Lines > min {
			long[f.ID] = true
			if _, ok := listed[f.ID]; !ok {
				out = append(out, fmt.Sprintf("%s is longer than %d lines: list it under %q in docs/architecture.md with why it stays whole, or split it", f, min, LongFuncsHeading))
			}
		}
	}
	for id := range listed {
		if !long[id] {
			out = append(out, fmt.Sprintf("%s is listed under %q but is not longer than %d lines (or gone): remove it from the list", id, LongFuncsHeading, min))
		}
	}
	sort.Strings(out)
	return out
}
