package archtest

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"path"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ConfigProblem is one breach of "configuration declared once per
// component" (docs/architecture.md, "How a component declares its
// settings").
type ConfigProblem struct {
	Pos    string // file:line
	Reason string
}

func (p ConfigProblem) String() string { return p.Pos + ": " + p.Reason }

// mechanism is the package of the configuration mechanism, which declares
// no section of its own.
const mechanism = "shared/config"

// sectionVar is one env-tagged field of a section.
type sectionVar struct {
	pos, section string
	field, key   string
	def          constant.Value // nil: no envDefault, or one of a type not compared
}

// CheckConfig returns, sorted, every place among files (module-relative,
// tests excluded) where the configuration is declared other than once, in
// the package it configures:
//   - a section (a struct with env-tagged fields) declared in shared/config,
//     which is only the mechanism;
//   - a variable declared by two fields;
//   - the default of a variable written again in Go: a constant expression
//     equal to a field's envDefault assigned to a field or composite-literal
//     key of the same name (or a suffix of it after a short qualifier,
//     Region for S3Region),
//     directly or through a named constant. Such code reads the default
//     from the tags instead (config.Defaults, config.FillZero); a value
//     that only happens to equal a default (another knob's) says so in a
//     comment on its line containing "not the default".
func CheckConfig(files []SourceFile) []ConfigProblem {
	all, out := parseConfigSources(files)
	// The constants of every package, by directory and by package name,
	// for the defaults written through a named constant.
	consts := newConstTable()
	for _, p := range all {
		consts.add(path.Dir(p.path), p.f)
	}
	vars, problems := configSections(all)
	out = append(out, problems...)
	out = append(out, declaredTwice(vars)...)
	defaults := newDefaultIndex(vars)
	for _, p := range all {
		out = append(out, defaults.restated(p, consts)...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// parsedSource is one parsed file of CheckConfig.
type parsedSource struct {
	path string
	fset *token.FileSet
	f    *ast.File
}

// parseConfigSources parses the files but the tests; one that does not
// parse is a problem.
func parseConfigSources(files []SourceFile) ([]parsedSource, []ConfigProblem) {
	var all []parsedSource
	var out []ConfigProblem
	for _, f := range files {
		if strings.HasSuffix(f.Path, "_test.go") {
			continue
		}
		fset := token.NewFileSet()
		af, err := parser.ParseFile(fset, f.Path, f.Src, parser.SkipObjectResolution|parser.ParseComments)
		if err != nil {
			out = append(out, ConfigProblem{Pos: f.Path, Reason: "does not parse: " + err.Error()})
			continue
		}
		all = append(all, parsedSource{f.Path, fset, af})
	}
	return all, out
}

// configSections returns the env-tagged fields of every section (a struct
// type with such fields); a section declared in the mechanism is a
// problem.
func configSections(all []parsedSource) ([]sectionVar, []ConfigProblem) {
	var vars []sectionVar
	var out []ConfigProblem
	for _, p := range all {
		dir := path.Dir(p.path)
		for _, d := range p.f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, sp := range gd.Specs {
				ts := sp.(*ast.TypeSpec)
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					continue
				}
				sv := sectionVars(p, dir+"."+ts.Name.Name, st)
				if len(sv) == 0 {
					continue
				}
				if dir == mechanism {
					out = append(out, ConfigProblem{Pos: fmt.Sprintf("%s:%d", p.path, p.fset.Position(ts.Pos()).Line),
						Reason: fmt.Sprintf("section %s is declared in %s, which is only the mechanism: move it to the package it configures", ts.Name.Name, mechanism)})
				}
				vars = append(vars, sv...)
			}
		}
	}
	return vars, out
}

// sectionVars returns the env-tagged fields of the struct st, the section
// named section, with their envDefault.
func sectionVars(p parsedSource, section string, st *ast.StructType) []sectionVar {
	var sv []sectionVar
	for _, fl := range st.Fields.List {
		if fl.Tag == nil || len(fl.Names) != 1 {
			continue
		}
		tag, err := strconv.Unquote(fl.Tag.Value)
		if err != nil {
			continue
		}
		key, _, _ := strings.Cut(reflect.StructTag(tag).Get("env"), ",")
		if key == "" {
			continue
		}
		v := sectionVar{
			pos:     fmt.Sprintf("%s:%d", p.path, p.fset.Position(fl.Pos()).Line),
			section: section, field: fl.Names[0].Name, key: key,
		}
		if d, ok := reflect.StructTag(tag).Lookup("envDefault"); ok {
			v.def = tagValue(types(fl.Type), d)
		}
		sv = append(sv, v)
	}
	return sv
}

// declaredTwice reports every variable declared by a second field.
func declaredTwice(vars []sectionVar) []ConfigProblem {
	var out []ConfigProblem
	byKey := map[string]sectionVar{}
	for _, v := range vars {
		if first, ok := byKey[v.key]; ok {
			out = append(out, ConfigProblem{Pos: v.pos, Reason: fmt.Sprintf("%s is declared twice: by %s.%s (%s) and by %s.%s", v.key, first.section, first.field, first.pos, v.section, v.field)})
			continue
		}
		byKey[v.key] = v
	}
	return out
}

// defaultIndex holds the variables with a non-zero default (a zero is no
// default to restate) by field name.
type defaultIndex struct {
	byField map[string][]sectionVar
	fields  []string // sorted
}

func newDefaultIndex(vars []sectionVar) defaultIndex {
	byField := map[string][]sectionVar{}
	for _, v := range vars {
		if v.def != nil && !isZero(v.def) {
			byField[v.field] = append(byField[v.field], v)
		}
	}
	fields := make([]string, 0, len(byField))
	for f := range byField {
		fields = append(fields, f)
	}
	sort.Strings(fields)
	return defaultIndex{byField, fields}
}

// match finds the variable whose default val restates, assigned to name: a
// field of that name, else one that name ends with after a short
// qualifier (S3Region, RetryBackoffBase).
func (x defaultIndex) match(name string, val constant.Value) (sectionVar, bool) {
	if val == nil || len(name) < 4 {
		return sectionVar{}, false
	}
	for _, exact := range []bool{true, false} {
		for _, field := range x.fields {
			if exact && field != name || !exact && (!strings.HasSuffix(field, name) || len(field)-len(name) > 5) {
				continue
			}
			for _, v := range x.byField[field] {
				if sameValue(v.def, val) {
					return v, true
				}
			}
		}
	}
	return sectionVar{}, false
}

// restated reports every place in p that writes a default again: assigned
// to a field, or as a composite-literal key.
func (x defaultIndex) restated(p parsedSource, consts *constTable) []ConfigProblem {
	var out []ConfigProblem
	dir := path.Dir(p.path)
	// A line whose comment says "not the default" is a value that only
	// happens to equal one (another knob's), and is left alone.
	exempt := map[int]bool{}
	for _, cg := range p.f.Comments {
		for _, c := range cg.List {
			if strings.Contains(c.Text, "not the default") {
				exempt[p.fset.Position(c.Pos()).Line] = true
			}
		}
	}
	report := func(n ast.Node, name string, val constant.Value) {
		if exempt[p.fset.Position(n.End()).Line] {
			return
		}
		if v, ok := x.match(name, val); ok {
			out = append(out, ConfigProblem{Pos: fmt.Sprintf("%s:%d", p.path, p.fset.Position(n.Pos()).Line),
				Reason: fmt.Sprintf("the default of %s (%s, declared at %s) is written again: read it from the tags (DefaultConfig, config.Defaults, config.FillZero)", v.key, v.def.ExactString(), v.pos)})
		}
	}
	ast.Inspect(p.f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			if len(n.Lhs) != len(n.Rhs) {
				return true
			}
			for i, l := range n.Lhs {
				if sel, ok := l.(*ast.SelectorExpr); ok {
					report(n, sel.Sel.Name, consts.eval(dir, n.Rhs[i]))
				}
			}
		case *ast.KeyValueExpr:
			if id, ok := n.Key.(*ast.Ident); ok {
				report(n, id.Name, consts.eval(dir, n.Value))
			}
		}
		return true
	})
	return out
}

// types returns the source form of a field's type ("time.Duration").
func types(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return types(e.X) + "." + e.Sel.Name
	}
	return ""
}

// tagValue is the envDefault d of a field of type typ as a constant, as
// the mechanism parses it (durations: a bare number is seconds); nil for
// the types not compared.
func tagValue(typ, d string) constant.Value {
	switch typ {
	case "time.Duration":
		if f, err := strconv.ParseFloat(d, 64); err == nil {
			return constant.MakeInt64(int64(f * float64(time.Second)))
		}
		if v, err := time.ParseDuration(d); err == nil {
			return constant.MakeInt64(int64(v))
		}
	case "int", "int64", "int32":
		if n, err := strconv.ParseInt(d, 10, 64); err == nil {
			return constant.MakeInt64(n)
		}
	case "string":
		if d != "" {
			return constant.MakeString(d)
		}
	}
	return nil
}

func isZero(v constant.Value) bool {
	if v.Kind() == constant.String {
		return constant.StringVal(v) == ""
	}
	return constant.Sign(v) == 0
}

func sameValue(a, b constant.Value) bool {
	if a.Kind() == constant.String || b.Kind() == constant.String {
		return a.Kind() == b.Kind() && constant.StringVal(a) == constant.StringVal(b)
	}
	if (a.Kind() != constant.Int && a.Kind() != constant.Float) || (b.Kind() != constant.Int && b.Kind() != constant.Float) {
		return false
	}
	return constant.Compare(a, token.EQL, b)
}

// constTable resolves the package-level constants of the module.
type constTable struct {
	byDir  map[string]map[string]ast.Expr // dir → name → expression
	byName map[string][]string            // package name → dirs
	seen   map[string]bool                // guards against cycles
}

func newConstTable() *constTable {
	return &constTable{byDir: map[string]map[string]ast.Expr{}, byName: map[string][]string{}, seen: map[string]bool{}}
}

func (c *constTable) add(dir string, f *ast.File) {
	if c.byDir[dir] == nil {
		c.byDir[dir] = map[string]ast.Expr{}
		c.byName[f.Name.Name] = append(c.byName[f.Name.Name], dir)
	}
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, sp := range gd.Specs {
			vs := sp.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if i < len(vs.Values) {
					c.byDir[dir][n.Name] = vs.Values[i]
				}
			}
		}
	}
}

var timeUnits = map[string]int64{
	"Nanosecond": int64(time.Nanosecond), "Microsecond": int64(time.Microsecond), "Millisecond": int64(time.Millisecond),
	"Second": int64(time.Second), "Minute": int64(time.Minute), "Hour": int64(time.Hour),
}

// eval returns the value of the constant expression e of a file in dir, or
// nil when it is not one this check follows.
func (c *constTable) eval(dir string, e ast.Expr) constant.Value {
	switch e := e.(type) {
	case *ast.BasicLit:
		v := constant.MakeFromLiteral(e.Value, e.Kind, 0)
		if v.Kind() == constant.Unknown {
			return nil
		}
		return v
	case *ast.ParenExpr:
		return c.eval(dir, e.X)
	case *ast.UnaryExpr:
		x := c.eval(dir, e.X)
		if x == nil || (e.Op != token.SUB && e.Op != token.ADD) {
			return nil
		}
		return constant.UnaryOp(e.Op, x, 0)
	case *ast.BinaryExpr:
		x, y := c.eval(dir, e.X), c.eval(dir, e.Y)
		if x == nil || y == nil {
			return nil
		}
		switch e.Op {
		case token.SHL, token.SHR:
			s, ok := constant.Uint64Val(y)
			if !ok {
				return nil
			}
			return constant.Shift(x, e.Op, uint(s))
		case token.ADD, token.SUB, token.MUL:
			if (x.Kind() == constant.String) != (y.Kind() == constant.String) {
				return nil
			}
			return constant.BinaryOp(x, e.Op, y)
		}
		return nil
	case *ast.CallExpr: // a conversion: time.Duration(x), int64(x)
		if len(e.Args) == 1 && (types(e.Fun) == "time.Duration" || types(e.Fun) == "int" || types(e.Fun) == "int64") {
			return c.eval(dir, e.Args[0])
		}
		return nil
	case *ast.Ident:
		return c.lookup(dir, e.Name)
	case *ast.SelectorExpr:
		pkg, ok := e.X.(*ast.Ident)
		if !ok {
			return nil
		}
		if pkg.Name == "time" {
			if u, ok := timeUnits[e.Sel.Name]; ok {
				return constant.MakeInt64(u)
			}
			return nil
		}
		if dirs := c.byName[pkg.Name]; len(dirs) == 1 {
			return c.lookup(dirs[0], e.Sel.Name)
		}
	}
	return nil
}

func (c *constTable) lookup(dir, name string) constant.Value {
	x, ok := c.byDir[dir][name]
	k := dir + "." + name
	if !ok || c.seen[k] {
		return nil
	}
	c.seen[k] = true
	defer delete(c.seen, k)
	return c.eval(dir, x)
}

// exemptFromConfig: this package's tests hold deliberate violations.
func exemptFromConfig(path string) bool {
	return strings.HasPrefix(path, "internal/archtest/")
}

// ConfigFiles reads the module's .go files for CheckConfig.
func ConfigFiles(root string) ([]SourceFile, error) { return moduleFiles(root, exemptFromConfig) }
