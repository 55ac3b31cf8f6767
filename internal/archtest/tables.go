package archtest

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/migrations"
)

// TableOwners is who owns each Postgres object of the schema sluice
// (docs/architecture.md, "The parts"): only its owner's package (and that
// package's subpackages and tests) names it in SQL; everyone else goes
// through the owner's Go API. Objects named in the migrations but not here
// are matched by prefix (ownerPrefixes), else the check fails.
func TableOwners() map[string]string {
	return map[string]string{
		"log_head":         "eventstore",
		"sequences":        "eventstore",
		"appends":          "eventstore",
		"eventstore_flush": "eventstore",
		// 00023_eventstore_shards.sql
		"eventstore_layout": "eventstore",
		// 00026_eventstore_open_blocks.sql
		"appends_open":       "eventstore",
		"processed_events":   "registry",
		"aggregate_versions": "registry",
		"relay_leases":       "relay",
		"relay_parked":       "relay",
		"event_schemas":      "schema",
		"event_schema_types": "schema",
		"event_schema_rev":   "schema",
		// 00021_schema_upcasters.sql
		"event_schema_upcasters": "schema",
	}
}

// ownerPrefixes gives the owner of the schema's functions and any later
// table by its name's prefix.
func ownerPrefixes() map[string]string {
	return map[string]string{"eventstore_": "eventstore", "registry_": "registry", "relay_": "relay", "admin_": "admin", "auth_": "auth"}
}

// OwnerRoles maps each owner of schema objects to the Postgres role its
// objects live in (docs/scale-out.md#the-roles): the database a process
// reaches through that role's URL. An owner talks to one pool, so all its
// objects share one role; objects that must be transactional together
// share an owner, hence a role. TestTableRoles fails when an owned object
// has no role or docs/scale-out.md's table disagrees.
func OwnerRoles() map[string]migrations.Role {
	return map[string]migrations.Role{
		"eventstore": migrations.RoleStore,
		"relay":      migrations.RoleStore,
		"registry":   migrations.RoleRegistry,
		"schema":     migrations.RoleMain,
		"auth":       migrations.RoleMain,
		"admin":      migrations.RoleMain,
	}
}

// RoleOf returns the role of schema object name, or "" when it has no
// owner or its owner no role.
func RoleOf(name string) migrations.Role {
	return OwnerRoles()[OwnerOf(name)]
}

// OwnerOf returns the package (module-relative) that owns object name, or
// "" when none does.
func OwnerOf(name string) string {
	if o, ok := TableOwners()[name]; ok {
		return o
	}
	for p, o := range ownerPrefixes() {
		if strings.HasPrefix(name, p) {
			return o
		}
	}
	return ""
}

var createObject = regexp.MustCompile(`(?i)CREATE\s+(?:OR\s+REPLACE\s+)?(?:TABLE|FUNCTION|VIEW|SEQUENCE|TYPE)\s+(?:IF\s+NOT\s+EXISTS\s+)?sluice\.(\w+)`)

// SchemaObjects returns the tables, functions, views, sequences and types
// the migrations in dir create in schema sluice.
func SchemaObjects(dir string) ([]string, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.sql"))
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		for _, m := range createObject.FindAllStringSubmatch(string(b), -1) {
			seen[m[1]] = true
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}

// SourceFile is one Go file to check: its module-relative path and text.
type SourceFile struct {
	Path string
	Src  []byte
}

// TableUse is one SQL string literal that names an object outside its
// owner.
type TableUse struct {
	Pos    string // file:line
	Object string
	Owner  string
}

func (u TableUse) String() string {
	return fmt.Sprintf("%s: SQL names sluice.%s, owned by %s: use %s's Go API (or its test helpers)", u.Pos, u.Object, u.Owner, u.Owner)
}

// sqlWords marks a string literal as SQL (upper case, as the module writes
// SQL; prose in help texts and messages is left alone).
var sqlWords = regexp.MustCompile(`\b(SELECT|INSERT|UPDATE|DELETE|TRUNCATE|ALTER|LOCK|COPY|FROM|JOIN|INTO|WITH|CALL|REFERENCES)\b`)

// component returns the owner-comparable component of a module-relative
// file path: its first directory.
func component(path string) string {
	first, _, _ := strings.Cut(filepath.ToSlash(path), "/")
	return first
}

// CheckTables returns every string literal of files that looks like SQL
// and names one of objects outside the object's owner, sorted. A file
// that does not parse is reported too.
func CheckTables(files []SourceFile, objects []string) []TableUse {
	type pat struct {
		name, owner string
		re          *regexp.Regexp
	}
	var pats []pat
	for _, o := range objects {
		q := regexp.QuoteMeta(o)
		pats = append(pats, pat{o, OwnerOf(o), regexp.MustCompile(`\bsluice\.` + q + `\b|\b(FROM|JOIN|INTO|UPDATE|TABLE|TRUNCATE)\s+(ONLY\s+)?` + q + `\b`)})
	}
	var out []TableUse
	for _, f := range files {
		fset := token.NewFileSet()
		af, err := parser.ParseFile(fset, f.Path, f.Src, parser.SkipObjectResolution)
		if err != nil {
			out = append(out, TableUse{Pos: f.Path, Object: "?", Owner: "? (does not parse: " + err.Error() + ")"})
			continue
		}
		comp := component(f.Path)
		ast.Inspect(af, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil || !sqlWords.MatchString(s) {
				return true
			}
			for _, p := range pats {
				if p.owner == comp || !p.re.MatchString(s) {
					continue
				}
				out = append(out, TableUse{Pos: fmt.Sprintf("%s:%d", f.Path, fset.Position(lit.Pos()).Line), Object: p.name, Owner: p.owner})
			}
			return true
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// exemptFromTables are the components that may name every object: the
// migrations (the schema itself) and this package (its tests hold
// deliberate violations).
func exemptFromTables(path string) bool {
	p := filepath.ToSlash(path)
	return component(p) == "migrations" || strings.HasPrefix(p, "internal/archtest/")
}

// ModuleFiles reads every .go file under root (the module root), with
// module-relative paths, but those of exempt components, hidden
// directories and testdata.
func ModuleFiles(root string) ([]SourceFile, error) {
	return moduleFiles(root, exemptFromTables)
}

// moduleFiles reads every .go file under root but those exempt says,
// hidden directories and testdata.
func moduleFiles(root string, exempt func(rel string) bool) ([]SourceFile, error) {
	var out []SourceFile
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || exempt(rel) {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out = append(out, SourceFile{Path: filepath.ToSlash(rel), Src: b})
		return nil
	})
	return out, err
}

// RoleRow is one row of docs/scale-out.md's table of objects.
type RoleRow struct {
	Owner string
	Role  migrations.Role
}

// roleRow matches a row of the table of objects: | `name` | owner | role |.
var roleRow = regexp.MustCompile("(?m)^\\|\\s*`(\\w+)`\\s*\\|\\s*([\\w/]+)\\s*\\|\\s*(\\w+)\\s*\\|")

// RoleTableHeading is the heading of docs/scale-out.md's table of objects.
const RoleTableHeading = "### Which role holds each object"

// RoleTable reads the table of objects of docs/scale-out.md (its rows
// "| `object` | owner | role |" under RoleTableHeading, up to the next
// heading): object → owner and role.
func RoleTable(doc string) (map[string]RoleRow, error) {
	_, section, ok := strings.Cut(doc, "\n"+RoleTableHeading+"\n")
	if !ok {
		return nil, fmt.Errorf("no heading %q", RoleTableHeading)
	}
	if i := strings.Index(section, "\n#"); i >= 0 {
		section = section[:i]
	}
	out := map[string]RoleRow{}
	for _, m := range roleRow.FindAllStringSubmatch(section, -1) {
		if _, dup := out[m[1]]; dup {
			return nil, fmt.Errorf("two rows for %s", m[1])
		}
		out[m[1]] = RoleRow{Owner: m[2], Role: migrations.Role(m[3])}
	}
	if len(out) == 0 {
		return nil, errors.New("no table of objects (rows \"| `object` | owner | role |\")")
	}
	return out, nil
}
