// Package schematest helps tests of other packages use the schema
// registry: it registers the OrderPlaced example of examples/schemas
// (three versions and the upcasters v1→v2 and v2→v3), so that every test
// of upcasting runs the documented example (docs/schemas.md).
package schematest

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/sluicehq/sluice/schema"
)

// ExampleDir is examples/schemas/OrderPlaced of the repository.
func ExampleDir(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("schematest: cannot locate the repository")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "examples", "schemas", "OrderPlaced")
}

// RegisterOrderPlaced registers the example as docs/schemas.md does: v1,
// v2 with the upcaster from v1, v3 (a breaking step: mode NONE) with the
// upcaster from v2.
func RegisterOrderPlaced(t testing.TB, r *schema.Registry) {
	t.Helper()
	dir := ExampleDir(t)
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ctx := context.Background()
	steps := []struct {
		schema, upcaster string
		mode             schema.Compatibility
	}{{"v1.json", "", ""}, {"v2.json", "upcast-v1.yaml", ""}, {"v3.json", "upcast-v2.yaml", schema.None}}
	for _, s := range steps {
		o := schema.RegisterOptions{Compatibility: s.mode}
		if s.upcaster != "" {
			o.Upcaster, o.UpcasterSource = read(s.upcaster), s.upcaster
		}
		if _, err := r.Register(ctx, "OrderPlaced", read(s.schema), o); err != nil {
			t.Fatalf("schematest: register %s: %v", s.schema, err)
		}
	}
}
