package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSchemaCommands: register, list, show, the offline check of CI and
// the online one, delete; exit 4 for incompatible or invalid, 3 for
// missing.
func TestSchemaCommands(t *testing.T) {
	envDatabase(t)
	ex := filepath.Join("..", "..", "examples", "schemas", "OrderPlaced")
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"type":"strin"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		args []string
		code int // 0: success
		want string
	}{
		{"offline check, siblings", []string{"schema", "check", filepath.Join(ex, "v2.json")}, 0, "OrderPlaced v2 is compatible (BACKWARD)"},
		{"offline check, breaking", []string{"schema", "check", filepath.Join(ex, "v3-breaking.json"), "--previous", filepath.Join(ex, "v1.json"), "--previous", filepath.Join(ex, "v2.json")},
			4, "v3 requires property `currency`, which is optional in v2 events"},
		{"offline check, NONE", []string{"schema", "check", filepath.Join(ex, "v3-breaking.json"), "--previous", filepath.Join(ex, "v2.json"), "--compatibility", "none"}, 0, "compatible (NONE)"},
		{"offline check, invalid", []string{"schema", "check", bad}, 4, "invalid JSON Schema"},
		{"register v1", []string{"schema", "register", "OrderPlaced", filepath.Join(ex, "v1.json")}, 0, "OrderPlaced v1 registered (BACKWARD)"},
		{"register v2 dry run", []string{"schema", "register", "OrderPlaced", filepath.Join(ex, "v2.json"), "--dry-run"}, 0, "v2 would be registered"},
		{"register v2", []string{"schema", "register", "OrderPlaced", filepath.Join(ex, "v2.json")}, 0, "OrderPlaced v2 registered"},
		{"register breaking", []string{"schema", "register", "OrderPlaced", filepath.Join(ex, "v3-breaking.json")}, 4, "v3 requires property `currency`"},
		{"online check", []string{"schema", "check", "--online", filepath.Join(ex, "v3-breaking.json")}, 4, "OrderPlaced v3 breaks BACKWARD"},
		{"list", []string{"schema", "list"}, 0, "OrderPlaced  BACKWARD"},
		{"show", []string{"schema", "show", "OrderPlaced", "1"}, 0, `"version": 1`},
		{"show missing", []string{"schema", "show", "Nope"}, 3, "Nope has no registered schema"},
		{"delete v2", []string{"schema", "delete", "OrderPlaced", "--version", "2"}, 0, "OrderPlaced versions [2] deleted"},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			out, _, err := run(t, st.args...)
			text := out
			if err != nil {
				text = err.Error()
			}
			var ee *exitError
			code := 0
			if errors.As(err, &ee) {
				code = ee.code
			} else if err != nil {
				code = 1
			}
			if code != st.code || !strings.Contains(text, st.want) {
				t.Fatalf("exit %d %q, want %d containing %q", code, text, st.code, st.want)
			}
		})
	}
}

// TestSchemaUpcasterCommands walks docs/schemas.md's evolution of the
// example examples/schemas/OrderPlaced: the offline checks of CI (a
// schema with the upcaster into it, an upcaster alone, an upcaster whose
// output breaks the next version), the registrations with --upcaster,
// upcaster set/show/delete, and `sluice projection test` of the example's
// projection with upcast: latest over its stored v1, v2 and v3 events.
func TestSchemaUpcasterCommands(t *testing.T) {
	envDatabase(t)
	ex := filepath.Join("..", "..", "examples", "schemas", "OrderPlaced")
	// A copy of the example whose v2→v3 upcaster forgets to remove total.
	broken := t.TempDir()
	for _, f := range []string{"v1.json", "v2.json", "v3.json", "upcast-v2.yaml"} {
		b, err := os.ReadFile(filepath.Join(ex, f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "upcast-v2.yaml" {
			b = []byte(strings.Replace(string(b), "unset: [total]\n", "", 1))
		}
		if err := os.WriteFile(filepath.Join(broken, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		name string
		args []string
		code int // 0: success
		want string
	}{
		{"offline: v3 breaks BACKWARD", []string{"schema", "check", filepath.Join(ex, "v3.json")}, 4, "v3 removes property `total` from a closed content model"},
		{"offline: v3 under NONE, with its upcaster", []string{"schema", "check", filepath.Join(ex, "v3.json"), "--compatibility", "NONE"}, 0,
			"OrderPlaced v3 is compatible (NONE)\nupcaster OrderPlaced v2→v3 holds on its 2 examples"},
		{"offline: the upcaster alone", []string{"schema", "check", filepath.Join(ex, "upcast-v1.yaml")}, 0, "upcaster OrderPlaced v1→v2 holds on its example"},
		{"offline: an upcaster whose output breaks v3", []string{"schema", "check", filepath.Join(broken, "v3.json"), "--compatibility", "NONE", "--event-type", "OrderPlaced"}, 4,
			"upcaster: example 1 (upcast-v2.yaml:10:5): the upcast data {\"amount\":12.5,\"currency\":\"EUR\",\"order_id\":\"o-1\",\"total\":12.5} is not valid v3 data: at (the data object): additional properties 'total' not allowed (keyword additionalProperties)"},
		{"offline: that upcaster alone", []string{"schema", "check", filepath.Join(broken, "upcast-v2.yaml")}, 4,
			"the upcaster of OrderPlaced v2→v3 breaks its examples:\n  - example 1 (upcast-v2.yaml:10:5)"},
		{"register v1", []string{"schema", "register", "OrderPlaced", filepath.Join(ex, "v1.json")}, 0, "OrderPlaced v1 registered"},
		{"register v2 with its upcaster", []string{"schema", "register", "OrderPlaced", filepath.Join(ex, "v2.json"), "--upcaster", filepath.Join(ex, "upcast-v1.yaml")}, 0,
			"OrderPlaced v2 registered (BACKWARD)\nupcaster OrderPlaced v1→v2 set (it holds on its example)"},
		{"online: v3 with the broken upcaster", []string{"schema", "check", "--online", filepath.Join(broken, "v3.json"), "--event-type", "OrderPlaced"}, 4, "OrderPlaced v3 breaks BACKWARD"},
		{"register v3 with the broken upcaster", []string{"schema", "register", "OrderPlaced", filepath.Join(ex, "v3.json"), "--compatibility", "NONE",
			"--upcaster", filepath.Join(broken, "upcast-v2.yaml")}, 4, "the upcaster of OrderPlaced v2→v3 breaks its examples"},
		{"nothing registered by the refusal", []string{"schema", "list"}, 0, "OrderPlaced  BACKWARD       2       [1 2]     v1→v2\n"},
		{"register v3 with its upcaster", []string{"schema", "register", "OrderPlaced", filepath.Join(ex, "v3.json"), "--compatibility", "NONE",
			"--upcaster", filepath.Join(ex, "upcast-v2.yaml")}, 0, "OrderPlaced v3 registered (NONE)\nupcaster OrderPlaced v2→v3 set (it holds on its 2 examples)"},
		{"list", []string{"schema", "list"}, 0, "OrderPlaced  NONE           3       [1 2 3]   v1→v2 v2→v3\n"},
		{"online: the upcaster alone", []string{"schema", "check", "--online", filepath.Join(ex, "upcast-v2.yaml")}, 0, "upcaster OrderPlaced v2→v3 holds on its 2 examples"},
		{"set it again", []string{"schema", "upcaster", "set", filepath.Join(ex, "upcast-v1.yaml")}, 0, "upcaster OrderPlaced v1→v2: the same file is set already"},
		{"set the broken one", []string{"schema", "upcaster", "set", filepath.Join(broken, "upcast-v2.yaml")}, 4, "breaks its examples"},
		{"show", []string{"schema", "upcaster", "show", "OrderPlaced", "v2"}, 0, "# OrderPlaced v2→v3, from upcast-v2.yaml, set "},
		{"the example's projection over its stored events", []string{"projection", "test", filepath.Join(ex, "revenue.yaml"), "--events", filepath.Join(ex, "events.jsonl")}, 0,
			`"_id":"revenue-EUR","_version":2,"_source":{"amount":12.5,"currency":"EUR","deleted":false,"order_ids":["o-1","o-4"],"orders":2`},
		{"delete dry run", []string{"schema", "upcaster", "delete", "OrderPlaced", "1", "--dry-run"}, 0, "upcaster OrderPlaced v1→v2 would be deleted (dry run)"},
		{"delete", []string{"schema", "upcaster", "delete", "OrderPlaced", "1"}, 0, "upcaster OrderPlaced v1→v2 deleted"},
		{"show a deleted one", []string{"schema", "upcaster", "show", "OrderPlaced", "1"}, 3, "OrderPlaced has no upcaster from version 1"},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			out, _, err := run(t, st.args...)
			text := out
			if err != nil {
				text = err.Error()
			}
			var ee *exitError
			code := 0
			if errors.As(err, &ee) {
				code = ee.code
			} else if err != nil {
				code = 1
			}
			if code != st.code || !strings.Contains(text, st.want) {
				t.Fatalf("exit %d %q, want %d containing %q", code, text, st.code, st.want)
			}
		})
	}
}

// TestSchemaCommandsAreAudited: every change the schema commands make —
// a registration, an upcaster set or deleted, a version deleted — is in
// the admin audit log as the admin API records it (who cli:{user}); dry
// runs and a registration of the same document again change nothing and
// leave no record.
func TestSchemaCommandsAreAudited(t *testing.T) {
	pool := envDatabase(t)
	ex := filepath.Join("..", "..", "examples", "schemas", "OrderPlaced")
	for _, args := range [][]string{
		{"schema", "register", "OrderPlaced", filepath.Join(ex, "v1.json")},
		{"schema", "register", "OrderPlaced", filepath.Join(ex, "v1.json")},
		{"schema", "register", "OrderPlaced", filepath.Join(ex, "v2.json"), "--dry-run"},
		{"schema", "register", "OrderPlaced", filepath.Join(ex, "v2.json")},
		{"schema", "upcaster", "set", filepath.Join(ex, "upcast-v1.yaml"), "--dry-run"},
		{"schema", "upcaster", "set", filepath.Join(ex, "upcast-v1.yaml")},
		{"schema", "upcaster", "delete", "OrderPlaced", "1"},
		{"schema", "delete", "OrderPlaced", "--version", "2", "--dry-run"},
		{"schema", "delete", "OrderPlaced", "--version", "2"},
	} {
		if _, _, err := run(t, args...); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
	}
	var got []string
	for _, r := range cliAudit(t, pool) {
		got = append(got, r.Action+" "+r.Target)
	}
	want := []string{"schema.register schema OrderPlaced", "schema.register schema OrderPlaced", "schema.upcaster schema OrderPlaced upcaster v1",
		"schema.upcaster_delete schema OrderPlaced upcaster v1", "schema.delete schema OrderPlaced"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("CLI audit records:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
