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
