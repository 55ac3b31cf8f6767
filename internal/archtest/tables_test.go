package archtest

import (
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/migrations"
)

// Every object of the schema has an owner, and only its owner names it in
// SQL.
func TestTableOwnership(t *testing.T) {
	objects, err := SchemaObjects("../../migrations")
	if err != nil {
		t.Fatal(err)
	}
	if len(objects) < 8 {
		t.Fatalf("found %d schema objects in the migrations (%v): not the schema", len(objects), objects)
	}
	for _, o := range objects {
		if OwnerOf(o) == "" {
			t.Errorf("sluice.%s has no owner: add it to TableOwners in internal/archtest and to docs/architecture.md", o)
		}
	}
	files, err := ModuleFiles("../..")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 100 {
		t.Fatalf("found %d Go files: not the module", len(files))
	}
	for _, u := range CheckTables(files, objects) {
		t.Error(u)
	}
}

// The check finds SQL that names another package's table, and leaves the
// owner's own SQL, prose and comments alone (synthetic sources).
func TestTableOwnershipViolations(t *testing.T) {
	objects := []string{"appends", "sequences", "processed_events", "relay_parked", "registry_claim_batch"}
	src := func(body string) []byte { return []byte("package p\n\n" + body + "\n") }
	for _, tc := range []struct {
		name string
		file SourceFile
		want []string // substrings, in order; none: clean
	}{
		{"the owner's own SQL", SourceFile{"eventstore/reads.go", src("const q = `SELECT max(position) FROM sluice.appends`")}, nil},
		{"an owner's subpackage", SourceFile{"eventstore/objstore/x.go", src("const q = `SELECT 1 FROM sluice.appends`")}, nil},
		{"the API reads sequences", SourceFile{"api/api.go", src("const q = `SELECT coalesce(max(last_sequence), 0) FROM sluice.sequences WHERE aggregate_id = $1`")},
			[]string{"api/api.go:3: SQL names sluice.sequences, owned by eventstore"}},
		{"a worker test forges a registry row", SourceFile{"instanceworker/x_test.go", src("func f() {\n\t_ = \"x\"\n\t_ = `UPDATE sluice.processed_events SET owner = 'thief'`\n}")},
			[]string{"instanceworker/x_test.go:5: SQL names sluice.processed_events, owned by registry"}},
		{"unqualified, after a keyword", SourceFile{"relay/x.go", src("var q = \"DELETE FROM appends WHERE position = 3\"")},
			[]string{"relay/x.go:3: SQL names sluice.appends, owned by eventstore"}},
		{"two owners' tables in one statement", SourceFile{"acceptance/x_test.go", src("const q = `SELECT count(*) FROM sluice.appends a WHERE NOT EXISTS (SELECT 1 FROM sluice.processed_events pe)`")},
			[]string{"sluice.appends, owned by eventstore", "sluice.processed_events, owned by registry"}},
		{"a registry function", SourceFile{"shared/consumer/x.go", src("const q = `SELECT * FROM sluice.registry_claim_batch($1)`")},
			[]string{"sluice.registry_claim_batch, owned by registry"}},
		{"the relay's own table", SourceFile{"relay/parked.go", src("const q = `SELECT count(*) FROM sluice.relay_parked`")}, nil},
		{"prose in a help text", SourceFile{"cmd/sluice/x.go", src("const help = `reindex replaces sluice.appends with one row per line`")}, nil},
		{"a comment", SourceFile{"api/x.go", src("// SELECT * FROM sluice.appends\nconst x = 1")}, nil},
		{"a column named like a table", SourceFile{"api/x.go", src("const q = `SELECT appends_total FROM sluice.metrics_view`")}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := CheckTables([]SourceFile{tc.file}, objects)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d uses %v, want %d %v", len(got), got, len(tc.want), tc.want)
			}
			for i, u := range got {
				if !strings.Contains(u.String(), tc.want[i]) {
					t.Errorf("use %d = %q, want it to contain %q", i, u, tc.want[i])
				}
			}
		})
	}
}

// Every object of the schema has a Postgres role through its owner
// (OwnerRoles), and docs/scale-out.md's table of objects says the same:
// one row per object, with its owner and role, and no other row.
func TestTableRoles(t *testing.T) {
	objects, err := SchemaObjects("../../migrations")
	if err != nil {
		t.Fatal(err)
	}
	known := map[migrations.Role]bool{}
	for _, r := range migrations.Roles() {
		known[r] = true
	}
	for owner, r := range OwnerRoles() {
		if !known[r] {
			t.Errorf("owner %s has role %q, not one of migrations.Roles()", owner, r)
		}
	}
	doc, err := os.ReadFile("../../docs/scale-out.md")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := RoleTable(string(doc))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objects {
		role := RoleOf(o)
		if role == "" {
			t.Errorf("sluice.%s (owner %q) has no role: add its owner to OwnerRoles in internal/archtest and to docs/scale-out.md", o, OwnerOf(o))
			continue
		}
		row, ok := rows[o]
		if !ok {
			t.Errorf("docs/scale-out.md: no row for sluice.%s (owner %s, role %s) in the table of objects", o, OwnerOf(o), role)
			continue
		}
		if row.Owner != OwnerOf(o) || row.Role != role {
			t.Errorf("docs/scale-out.md: sluice.%s is owned by %q in role %q, the code says %q in %q", o, row.Owner, row.Role, OwnerOf(o), role)
		}
		delete(rows, o)
	}
	for o := range rows {
		t.Errorf("docs/scale-out.md: a row for sluice.%s, which no migration creates", o)
	}
}

// RoleTable reads the table of objects, and only it: the rows under its
// heading whose first cell is a name in backticks.
func TestRoleTableParses(t *testing.T) {
	doc := "# x\n\n| `EARLIER` | a | b |\n\n" + RoleTableHeading + "\n\n| object | owner | role |\n|---|---|---|\n| `appends` | eventstore | store |\n| `registry_*` functions | registry | registry |\n\nprose `x` | y | z\n\n## Next\n\n| `LATER` | a | b |\n"
	rows, err := RoleTable(doc)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows["appends"] != (RoleRow{Owner: "eventstore", Role: migrations.RoleStore}) {
		t.Fatalf("rows %v", rows)
	}
	if _, err := RoleTable("no table here"); err == nil {
		t.Fatal("a document without the table: no error")
	}
}
