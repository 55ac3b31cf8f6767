package archtest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path"
	"sort"
	"strings"
)

// Components are the packages that build one component each and so follow
// the construction convention of docs/architecture.md ("One construction
// convention"): one exported constructor, New(cfg Config, deps Deps, opts
// ...Option) (*T, error).
func Components() []string {
	return []string{"admin", "api", "dlq", "eventstore", "inspect", "instanceworker",
		"projectionworker", "registry", "relay", "worker"}
}

// ConstructorProblem is one departure of a component from the convention.
type ConstructorProblem struct {
	Component string
	Reason    string
}

func (p ConstructorProblem) String() string { return p.Component + ": " + p.Reason }

// CheckConstructors returns, sorted, every component of components (module
// paths relative to the module, such as "eventstore") whose own non-test
// files among files do not follow the convention: exactly one exported
// constructor of the component, New(Config, Deps, ...Option) returning
// (*T, error) or (http.Handler, error), with Config, Deps and Option
// declared in the package; no other exported New… or Open… returning *T;
// no exported type Options. Constructors of parts (other result types) are
// allowed.
func CheckConstructors(files []SourceFile, components []string) []ConstructorProblem {
	byDir := map[string][]SourceFile{}
	for _, f := range files {
		if strings.HasSuffix(f.Path, "_test.go") {
			continue
		}
		d := path.Dir(f.Path)
		byDir[d] = append(byDir[d], f)
	}
	var out []ConstructorProblem
	for _, c := range components {
		out = append(out, checkComponent(c, byDir[c])...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

func checkComponent(c string, files []SourceFile) []ConstructorProblem {
	if len(files) == 0 {
		return []ConstructorProblem{{c, "no Go files: not a package of the module (update archtest.Components)"}}
	}
	var out []ConstructorProblem
	bad := func(format string, args ...any) {
		out = append(out, ConstructorProblem{c, fmt.Sprintf(format, args...)})
	}
	types := map[string]bool{}
	var funcs []*ast.FuncDecl
	fsets := map[*ast.FuncDecl]string{}
	for _, f := range files {
		fset := token.NewFileSet()
		af, err := parser.ParseFile(fset, f.Path, f.Src, parser.SkipObjectResolution)
		if err != nil {
			bad("%s does not parse: %v", f.Path, err)
			continue
		}
		for _, d := range af.Decls {
			switch d := d.(type) {
			case *ast.GenDecl:
				for _, sp := range d.Specs {
					if ts, ok := sp.(*ast.TypeSpec); ok {
						types[ts.Name.Name] = true
					}
				}
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.IsExported() {
					funcs = append(funcs, d)
					fsets[d] = fmt.Sprintf("%s:%d", f.Path, fset.Position(d.Pos()).Line)
				}
			}
		}
	}
	if types["Options"] {
		bad("declares an exported type Options: settings go in Config, resources in Deps, test hooks in Option")
	}
	for _, n := range []string{"Config", "Deps", "Option"} {
		if !types[n] {
			bad("declares no type %s", n)
		}
	}
	var newFn *ast.FuncDecl
	for _, fn := range funcs {
		if fn.Name.Name == "New" {
			newFn = fn
		}
	}
	if newFn == nil {
		bad("exports no constructor New(cfg Config, deps Deps, opts ...Option)")
		return out
	}
	if !newSignature(newFn.Type) {
		bad("%s: New must be New(cfg Config, deps Deps, opts ...Option) (*T, error)", fsets[newFn])
	}
	t := resultType(newFn.Type)
	for _, fn := range funcs {
		if fn == newFn || !(strings.HasPrefix(fn.Name.Name, "New") || strings.HasPrefix(fn.Name.Name, "Open")) {
			continue
		}
		if t != "" && resultType(fn.Type) == t {
			bad("%s: %s is a second constructor of %s: build it with New", fsets[fn], fn.Name.Name, t)
		}
	}
	return out
}

// newSignature reports whether ft is (Config, Deps, ...Option) (*T, error)
// or (…) (http.Handler, error).
func newSignature(ft *ast.FuncType) bool {
	var params []ast.Expr
	for _, f := range ft.Params.List {
		n := max(len(f.Names), 1)
		for range n {
			params = append(params, f.Type)
		}
	}
	if len(params) != 3 || !isIdent(params[0], "Config") || !isIdent(params[1], "Deps") {
		return false
	}
	el, ok := params[2].(*ast.Ellipsis)
	if !ok || !isIdent(el.Elt, "Option") {
		return false
	}
	if ft.Results == nil || len(ft.Results.List) != 2 || len(ft.Results.List[0].Names) > 1 {
		return false
	}
	return resultType(ft) != "" && isIdent(ft.Results.List[1].Type, "error")
}

// resultType is the component type a constructor returns: "*T" for a
// pointer to a type of the package, "http.Handler"; "" otherwise.
func resultType(ft *ast.FuncType) string {
	if ft.Results == nil || len(ft.Results.List) == 0 {
		return ""
	}
	switch r := ft.Results.List[0].Type.(type) {
	case *ast.StarExpr:
		if id, ok := r.X.(*ast.Ident); ok {
			return "*" + id.Name
		}
	case *ast.SelectorExpr:
		if x, ok := r.X.(*ast.Ident); ok && x.Name == "http" && r.Sel.Name == "Handler" {
			return "http.Handler"
		}
	}
	return ""
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}
