package migrations_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/pressly/goose/v3"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/migrations"
)

// prereleaseDir holds the migration chain the baseline replaced, as it was
// applied to databases before the squash. It is test data only: the binary
// embeds the baseline (*.sql of this directory) and nothing under testdata.
const prereleaseDir = "testdata/prerelease"

// prereleaseLast is the chain's last version, versionTable goose's table.
const (
	prereleaseLast = 11
	versionTable   = "sluice.schema_migrations"
)

// superseded are the functions of the pre-release chain that the baseline
// does not define: earlier generations of the reservation and of the claim.
var superseded = []string{
	"sluice.eventstore_reserve(text[],text[],text[],text[],integer[],boolean[],bigint[],bytea[],timestamp with time zone[],text)",
	"sluice.eventstore_reserve_v2(text[],text[],text[],text[],integer[],boolean[],bigint[],bytea[],timestamp with time zone[],text)",
	"sluice.registry_claim(text[],text[],text[],bigint[],boolean[],text,uuid,bigint)",
}

// renamed maps a function of the pre-release chain to its name in the
// baseline.
var renamed = map[string]string{"eventstore_reserve_v3": "eventstore_reserve"}

// added are the functions the baseline adds: the slot rules, which the
// chain wrote inline in the reservation and again in Go, defined once.
var added = []string{"sluice.eventstore_slot_refusal(uuid,text,text)"}

// rewritten maps, in function bodies of the chain (comments removed,
// white space collapsed), an expression to what the baseline writes for it.
var rewritten = map[string]string{
	"(c.event_id IS NULL OR c.state = 'abandoned' OR (u.cause <> '' AND u.cause <> c.event_id::text))": "sluice.eventstore_slot_refusal(c.event_id, c.state, u.cause) IS NOT NULL",
}

func openDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := migrations.Open(testenv.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// baselineLast is the last version of the baseline; migrations after it
// are not part of the comparison with the pre-release chain.
const baselineLast = 15

// applyPrerelease runs the pre-release chain up to version to, the way a
// binary of that time did (schema first, goose's table in it).
func applyPrerelease(t *testing.T, db *sql.DB, to int64) {
	t.Helper()
	applyDir(t, db, prereleaseDir, to)
}

// applyBaseline runs this directory's migrations (the files the binary
// embeds) up to the end of the baseline.
func applyBaseline(t *testing.T, db *sql.DB) {
	t.Helper()
	applyDir(t, db, ".", baselineLast)
}

func applyDir(t *testing.T, db *sql.DB, dir string, to int64) {
	t.Helper()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE SCHEMA IF NOT EXISTS sluice`); err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, os.DirFS(dir),
		goose.WithTableName(versionTable), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, to); err != nil {
		t.Fatalf("%s up to %d: %v", dir, to, err)
	}
}

func up(t *testing.T, db *sql.DB) []migrations.Result {
	t.Helper()
	res, err := migrations.Up(context.Background(), db, nil)
	if err != nil {
		t.Fatalf("Up: %v", err)
	}
	return res
}

// catalog is the schema sluice as catalog rows, one string per object
// property, keyed by what it describes. Goose's own table is in it too.
type catalog map[string]string

// catalogQueries read every kind of object the migrations create: tables
// and their options, columns (type, nullability, default, collation),
// indexes, constraints, functions (full definition, settings included),
// triggers, sequences, and the comments on all of them.
var catalogQueries = []string{
	`SELECT 'relation ' || c.relname, c.relkind::text || ' ' || coalesce(array_to_string(c.reloptions, ','), '')
	   FROM pg_class c WHERE c.relnamespace = 'sluice'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')`,
	`SELECT 'column ' || c.relname || '.' || a.attname,
	        a.attnum || ' ' || format_type(a.atttypid, a.atttypmod) || ' notnull=' || a.attnotnull ||
	        ' default=' || coalesce(pg_get_expr(d.adbin, d.adrelid), '') || ' collation=' || coalesce(co.collname, '')
	   FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
	   LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
	   LEFT JOIN pg_collation co ON co.oid = a.attcollation AND a.attcollation <> 0
	  WHERE c.relnamespace = 'sluice'::regnamespace AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped`,
	`SELECT 'index ' || indexname, indexdef FROM pg_indexes WHERE schemaname = 'sluice'`,
	`SELECT 'constraint ' || conrelid::regclass || '.' || conname, pg_get_constraintdef(oid)
	   FROM pg_constraint WHERE connamespace = 'sluice'::regnamespace`,
	`SELECT 'function ' || p.oid::regprocedure, pg_get_functiondef(p.oid)
	   FROM pg_proc p WHERE p.pronamespace = 'sluice'::regnamespace`,
	`SELECT 'trigger ' || tgrelid::regclass || '.' || tgname, pg_get_triggerdef(oid)
	   FROM pg_trigger WHERE NOT tgisinternal AND tgrelid IN (SELECT oid FROM pg_class WHERE relnamespace = 'sluice'::regnamespace)`,
	`SELECT 'sequence ' || sequencename, data_type || ' ' || start_value || ' ' || increment_by || ' ' || min_value || ' ' || max_value || ' ' || cycle
	   FROM pg_sequences WHERE schemaname = 'sluice'`,
	`SELECT 'comment schema sluice', coalesce(obj_description('sluice'::regnamespace, 'pg_namespace'), '')`,
	`SELECT 'comment relation ' || c.relname, obj_description(c.oid, 'pg_class')
	   FROM pg_class c WHERE c.relnamespace = 'sluice'::regnamespace AND obj_description(c.oid, 'pg_class') IS NOT NULL`,
	`SELECT 'comment column ' || c.relname || '.' || a.attname, col_description(c.oid, a.attnum)
	   FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
	  WHERE c.relnamespace = 'sluice'::regnamespace AND a.attnum > 0 AND col_description(c.oid, a.attnum) IS NOT NULL`,
	`SELECT 'comment function ' || p.oid::regprocedure, obj_description(p.oid, 'pg_proc')
	   FROM pg_proc p WHERE p.pronamespace = 'sluice'::regnamespace AND obj_description(p.oid, 'pg_proc') IS NOT NULL`,
}

func readCatalog(t *testing.T, db *sql.DB) catalog {
	t.Helper()
	out := catalog{}
	for _, q := range catalogQueries {
		rows, err := db.QueryContext(context.Background(), q)
		if err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
		for rows.Next() {
			var k, v string
			if err := rows.Scan(&k, &v); err != nil {
				t.Fatal(err)
			}
			if _, dup := out[k]; dup {
				t.Fatalf("catalog key %q twice", k)
			}
			out[k] = v
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
	}
	return out
}

// diff lists every key whose value differs or that only one side has.
func diff(a, b catalog) []string {
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	var out []string
	for k := range keys {
		va, oka := a[k]
		vb, okb := b[k]
		switch {
		case !oka:
			out = append(out, "only in the second: "+k)
		case !okb:
			out = append(out, "only in the first: "+k)
		case va != vb:
			out = append(out, fmt.Sprintf("%s differs:\n--- first\n%s\n--- second\n%s", k, va, vb))
		}
	}
	sort.Strings(out)
	return out
}

var (
	sqlComment = regexp.MustCompile(`--[^\n]*`)
	spaces     = regexp.MustCompile(`\s+`)
)

// withoutDocs is c without what only documents the schema: comments on
// objects, and comments inside function bodies. Functions of the
// pre-release chain are named as in the baseline, and the superseded ones
// are dropped.
func withoutDocs(c catalog) catalog {
	out := catalog{}
	for k, v := range c {
		if strings.HasPrefix(k, "comment ") {
			continue
		}
		if strings.HasPrefix(k, "function ") {
			gone := false
			for _, s := range superseded {
				gone = gone || k == "function "+s
			}
			if gone {
				continue
			}
			for from, to := range renamed {
				k = strings.ReplaceAll(k, from+"(", to+"(")
				v = strings.ReplaceAll(v, from, to)
			}
			v = strings.TrimSpace(spaces.ReplaceAllString(sqlComment.ReplaceAllString(v, ""), " "))
			for from, to := range rewritten {
				v = strings.ReplaceAll(v, from, to)
			}
			for _, a := range added {
				gone = gone || k == "function "+a
			}
			if gone {
				continue
			}
		}
		out[k] = v
	}
	return out
}

// TestBaselineIsThePrereleaseSchema applies the pre-release chain to one
// database and the baseline to another and compares their catalogs: the
// same tables, columns, types, defaults, collations, storage options,
// indexes, constraints, triggers, sequences and function definitions
// (settings included), apart from what the squash removed on purpose —
// the superseded function generations, the version suffix of the
// reservation, the slot rules defined once (added, rewritten), and
// documentation (object comments, comments in bodies).
func TestBaselineIsThePrereleaseSchema(t *testing.T) {
	old, fresh := openDB(t), openDB(t)
	applyPrerelease(t, old, prereleaseLast)
	applyBaseline(t, fresh)
	oc, fc := readCatalog(t, old), readCatalog(t, fresh)
	for _, s := range superseded {
		if _, ok := oc["function "+s]; !ok {
			t.Errorf("the pre-release chain has no function %s: the test's list is stale", s)
		}
		if _, ok := fc["function "+s]; ok {
			t.Errorf("the baseline still defines the superseded %s", s)
		}
	}
	for _, a := range added {
		if _, ok := fc["function "+a]; !ok {
			t.Errorf("the baseline does not define %s", a)
		}
	}
	if d := diff(withoutDocs(oc), withoutDocs(fc)); len(d) > 0 {
		t.Fatalf("the baseline's schema differs from the pre-release chain's (first: chain, second: baseline):\n%s", strings.Join(d, "\n"))
	}
	if len(fc) < 60 {
		t.Fatalf("the catalog has only %d entries; the queries read too little", len(fc))
	}
}

// TestPrereleaseDatabaseUpgrades is the path of an existing database that
// ran the whole pre-release chain: Up applies the baseline over it, keeps
// its data, and leaves exactly the schema of a new database — comments and
// function bodies included.
func TestPrereleaseDatabaseUpgrades(t *testing.T) {
	ctx := context.Background()
	old, fresh := openDB(t), openDB(t)
	applyPrerelease(t, old, prereleaseLast)
	if _, err := old.ExecContext(ctx, `
UPDATE sluice.log_head SET next_position = 42;
INSERT INTO sluice.relay_leases (name, holder, epoch, expires_at) VALUES ('r', 'h', 7, now());
INSERT INTO sluice.aggregate_versions (handler, aggregate_id, last_sequence) VALUES ('h', 'Order:1', 3)`); err != nil {
		t.Fatal(err)
	}
	res := up(t, old)
	var baseline []int64
	for _, r := range res {
		if r.Version > prereleaseLast && r.Version <= baselineLast {
			baseline = append(baseline, r.Version)
		}
	}
	if fmt.Sprint(baseline) != "[12 13 14 15]" {
		t.Fatalf("Up over the pre-release chain applied %+v, want the baseline 12 to 15 among them", res)
	}
	up(t, fresh)
	if d := diff(readCatalog(t, old), readCatalog(t, fresh)); len(d) > 0 {
		t.Fatalf("an upgraded pre-release database differs from a new one (first: upgraded, second: new):\n%s", strings.Join(d, "\n"))
	}
	var pos, epoch, last int64
	if err := old.QueryRowContext(ctx, `SELECT (SELECT next_position FROM sluice.log_head), (SELECT epoch FROM sluice.relay_leases WHERE name = 'r'),
		(SELECT last_sequence FROM sluice.aggregate_versions WHERE handler = 'h')`).Scan(&pos, &epoch, &last); err != nil {
		t.Fatal(err)
	}
	if pos != 42 || epoch != 7 || last != 3 {
		t.Fatalf("data after the upgrade: next_position %d epoch %d last_sequence %d, want 42 7 3", pos, epoch, last)
	}
	st, err := migrations.StatusOf(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if !s.Applied {
			t.Errorf("after the upgrade %d %s is not applied", s.Version, s.Name)
		}
	}
	if again := up(t, old); len(again) != 0 {
		t.Fatalf("a second Up applied %d migrations", len(again))
	}
}

// TestPartialPrereleaseIsRefused: a database that stopped part-way through
// the pre-release chain is refused with a *migrations.PrereleaseError naming its
// version, and nothing is applied to it.
func TestPartialPrereleaseIsRefused(t *testing.T) {
	for _, v := range []int64{1, 4, 9, 10} {
		t.Run(fmt.Sprint(v), func(t *testing.T) {
			db := openDB(t)
			applyPrerelease(t, db, v)
			_, err := migrations.Up(context.Background(), db, nil)
			var pe *migrations.PrereleaseError
			if !errors.As(err, &pe) || pe.Version != v {
				t.Fatalf("Up over pre-release version %d: %v, want a *migrations.PrereleaseError for %d", v, err, v)
			}
			var n int
			if err := db.QueryRow(`SELECT count(*) FROM `+versionTable+` WHERE version_id > $1`, prereleaseLast).Scan(&n); err != nil || n != 0 {
				t.Fatalf("baseline versions recorded: %d (%v), want none", n, err)
			}
		})
	}
}
