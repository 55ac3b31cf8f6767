package admin_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestSchemaAdmin: the schema registry through the admin API; every
// action, refused ones included, leaves an audit record.
func TestSchemaAdmin(t *testing.T) {
	e := start(t)
	v1 := json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"},"total":{"type":"number"}},"required":["id","total"],"additionalProperties":false}`)
	v2bad := json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"},"total":{"type":"number"},"currency":{"type":"string"}},"required":["id","total","currency"],"additionalProperties":false}`)
	steps := []struct {
		name, method, path, token string
		body                      any
		status                    int
		want                      string
	}{
		{"register v1", "POST", "/admin/v1/schemas/OrderPlaced", opToken, map[string]any{"schema": v1}, 201, `"version":1`},
		{"again: existing", "POST", "/admin/v1/schemas/OrderPlaced", opToken, map[string]any{"schema": v1}, 200, `"existing":true`},
		{"incompatible", "POST", "/admin/v1/schemas/OrderPlaced", opToken, map[string]any{"schema": v2bad}, 409, "v2 adds required property `currency` that v1 events lack"},
		{"check", "POST", "/admin/v1/schemas/OrderPlaced/check", opToken, map[string]any{"schema": v2bad}, 200, `"compatible":false`},
		{"reader may not register", "POST", "/admin/v1/schemas/OrderPlaced", readToken, map[string]any{"schema": v1}, 403, "read-only"},
		{"reader lists", "GET", "/admin/v1/schemas", readToken, nil, 200, `OrderPlaced`},
		{"show v1", "GET", "/admin/v1/schemas/OrderPlaced/versions/1", readToken, nil, 200, `"version":1`},
		{"set FORWARD", "PUT", "/admin/v1/schemas/OrderPlaced/compatibility", opToken, map[string]any{"compatibility": "forward"}, 200, `FORWARD`},
		{"invalid schema", "POST", "/admin/v1/schemas/OrderPlaced", opToken, map[string]any{"schema": json.RawMessage(`{"type":1}`)}, 400, "invalid JSON Schema"},
		{"delete dry run", "DELETE", "/admin/v1/schemas/OrderPlaced", opToken, map[string]any{"dry_run": true}, 200, `"deleted_versions":[1]`},
		{"delete", "DELETE", "/admin/v1/schemas/OrderPlaced", opToken, map[string]any{"version": 1}, 200, `"deleted_versions":[1]`},
		{"gone", "GET", "/admin/v1/schemas/OrderPlaced", readToken, nil, 404, "no registered schema"},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			status, out, _ := e.call(st.method, st.path, st.token, st.body)
			b, _ := json.Marshal(out)
			if status != st.status || !strings.Contains(string(b), st.want) {
				t.Fatalf("%d %s, want %d containing %s", status, b, st.status, st.want)
			}
		})
	}
	got := map[string]int{}
	for _, r := range e.audit(t) {
		if strings.HasPrefix(r.Action, "schema.") {
			got[r.Action+" "+r.Outcome]++
		}
	}
	for _, want := range []string{"schema.register ok", "schema.register conflict", "schema.register forbidden", "schema.register invalid",
		"schema.check ok", "schema.compatibility ok", "schema.delete ok"} {
		if got[want] == 0 {
			t.Errorf("no audit record %q (have %v)", want, got)
		}
	}
	_ = http.StatusOK
}
