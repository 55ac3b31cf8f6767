package admin_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
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
		// The example of examples/schemas/OrderPlaced, with its upcasters.
		{"register the example's v1", "POST", "/admin/v1/schemas/Ordered", opToken, map[string]any{"schema": ex("v1.json")}, 201, `"version":1`},
		{"register v2 with its upcaster", "POST", "/admin/v1/schemas/Ordered", opToken,
			map[string]any{"schema": ex("v2.json"), "upcaster": upFor("upcast-v1.yaml"), "upcaster_source": "upcast-v1.yaml"}, 201, `"upcaster":{"event_type":"Ordered","examples":1,"existing":false,"from":1,"replaced":false,"to":2}`},
		{"register v3 (NONE)", "POST", "/admin/v1/schemas/Ordered", opToken, map[string]any{"schema": ex("v3.json"), "compatibility": "NONE"}, 201, `"version":3`},
		{"check v3 with a broken upcaster", "POST", "/admin/v1/schemas/Ordered/check", opToken,
			map[string]any{"schema": ex("v3.json"), "upcaster": strings.Replace(upFor("upcast-v2.yaml"), "unset: [total]\n", "", 1)}, 200,
			`upcaster: example 1 (:10:5): the upcast data`},
		{"set an upcaster whose path disagrees", "PUT", "/admin/v1/schemas/Ordered/upcasters/1", opToken, map[string]any{"upcaster": upFor("upcast-v2.yaml")}, 400, "not of Ordered from v1 as the path says"},
		{"set the v2→v3 upcaster", "PUT", "/admin/v1/schemas/Ordered/upcasters/2", opToken, map[string]any{"upcaster": upFor("upcast-v2.yaml"), "source": "upcast-v2.yaml"}, 201, `"from":2,"replaced":false,"to":3}`},
		{"a reader may not", "PUT", "/admin/v1/schemas/Ordered/upcasters/2", readToken, map[string]any{"upcaster": upFor("upcast-v2.yaml")}, 403, "read-only"},
		{"set a broken one", "PUT", "/admin/v1/schemas/Ordered/upcasters/2", opToken, map[string]any{"upcaster": strings.Replace(upFor("upcast-v2.yaml"), "unset: [total]\n", "", 1)}, 409, "breaks its examples"},
		{"show it", "GET", "/admin/v1/schemas/Ordered/upcasters/2", readToken, nil, 200, `"source":"upcast-v2.yaml"`},
		{"list them", "GET", "/admin/v1/schemas", readToken, nil, 200, `\"upcasters\": [\n      1,\n      2\n`},
		{"set with a path version that is none", "PUT", "/admin/v1/schemas/Ordered/upcasters/x", opToken, map[string]any{"upcaster": upFor("upcast-v2.yaml")}, 400, `from \"x\": a version number \u003e= 1`},
		{"delete with a path version that is none", "DELETE", "/admin/v1/schemas/Ordered/upcasters/0", opToken, map[string]any{}, 400, `from \"0\": a version number \u003e= 1`},
		{"delete it", "DELETE", "/admin/v1/schemas/Ordered/upcasters/2", opToken, map[string]any{}, 200, `"deleted":true`},
		{"deleted", "GET", "/admin/v1/schemas/Ordered/upcasters/2", readToken, nil, 404, "no upcaster from version 2"},
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
	got, targets := map[string]int{}, map[string]bool{}
	for _, r := range e.audit(t) {
		if strings.HasPrefix(r.Action, "schema.") {
			got[r.Action+" "+r.Outcome]++
			targets[r.Action+" "+r.Outcome+": "+r.Target] = true
		}
	}
	// The upcaster actions name their target alike: with the path's
	// version, or without it when the path has none.
	for _, want := range []string{"schema.upcaster ok: schema Ordered upcaster v2", "schema.upcaster invalid: schema Ordered upcaster v1",
		"schema.upcaster invalid: schema Ordered upcaster", "schema.upcaster_delete ok: schema Ordered upcaster v2",
		"schema.upcaster_delete invalid: schema Ordered upcaster"} {
		if !targets[want] {
			t.Errorf("no audit record %q (have %v)", want, targets)
		}
	}
	for _, want := range []string{"schema.register ok", "schema.register conflict", "schema.register forbidden", "schema.register invalid",
		"schema.check ok", "schema.compatibility ok", "schema.delete ok", "schema.upcaster ok", "schema.upcaster conflict", "schema.upcaster invalid",
		"schema.upcaster forbidden", "schema.upcaster_delete ok"} {
		if got[want] == 0 {
			t.Errorf("no audit record %q (have %v)", want, got)
		}
	}
	_ = http.StatusOK
}

// ex is a schema of the example examples/schemas/OrderPlaced.
func ex(name string) json.RawMessage {
	b, err := os.ReadFile(filepath.Join("..", "examples", "schemas", "OrderPlaced", name))
	if err != nil {
		panic(err)
	}
	return b
}

// upFor is an upcaster of the example, for the event type Ordered.
func upFor(name string) string {
	return strings.Replace(string(ex(name)), "event_type: OrderPlaced", "event_type: Ordered", 1)
}

// TestSchemaAdminRefusalsNameTheField: every refusal of a schema request
// is a problem+json whose field names the part of the request at fault:
// the path's event type, version or from, or the body's schema,
// compatibility or upcaster.
func TestSchemaAdminRefusalsNameTheField(t *testing.T) {
	e := start(t)
	v1 := json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"}},"required":["id"],"additionalProperties":false}`)
	v2bad := json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"},"c":{"type":"string"}},"required":["id","c"],"additionalProperties":false}`)
	if status, out, _ := e.call("POST", "/admin/v1/schemas/Shipped", opToken, map[string]any{"schema": v1}); status != 201 {
		t.Fatalf("register v1: %d %v", status, out)
	}
	for _, tc := range []struct {
		name, method, path string
		body               any
		status             int
		field              string
	}{
		{"event type outside the rule", "POST", "/admin/v1/schemas/bad%20type", map[string]any{"schema": v1}, 400, "event_type"},
		{"check: event type outside the rule", "POST", "/admin/v1/schemas/bad%3Atype/check", map[string]any{"schema": v1}, 400, "event_type"},
		{"no schema", "POST", "/admin/v1/schemas/Shipped", map[string]any{}, 400, "schema"},
		{"not a JSON Schema", "POST", "/admin/v1/schemas/Shipped", map[string]any{"schema": json.RawMessage(`{"type":"objekt"}`)}, 400, "schema"},
		{"incompatible", "POST", "/admin/v1/schemas/Shipped", map[string]any{"schema": v2bad}, 409, "schema"},
		{"unknown mode on register", "POST", "/admin/v1/schemas/Shipped", map[string]any{"schema": v1, "compatibility": "SIDEWAYS"}, 400, "compatibility"},
		{"unknown mode", "PUT", "/admin/v1/schemas/Shipped/compatibility", map[string]any{"compatibility": "SIDEWAYS"}, 400, "compatibility"},
		{"unknown member", "PUT", "/admin/v1/schemas/Shipped/compatibility", map[string]any{"mode": "FULL"}, 400, "mode"},
		{"mistyped member", "PUT", "/admin/v1/schemas/Shipped/compatibility", map[string]any{"compatibility": 3}, 400, "compatibility"},
		{"not an object", "DELETE", "/admin/v1/schemas/Shipped", `{"version":`, 400, "body"},
		{"version not a number", "GET", "/admin/v1/schemas/Shipped/versions/x", nil, 400, "version"},
		{"from not a number", "PUT", "/admin/v1/schemas/Shipped/upcasters/x", map[string]any{"upcaster": "a"}, 400, "from"},
		{"no upcaster", "PUT", "/admin/v1/schemas/Shipped/upcasters/1", map[string]any{}, 400, "upcaster"},
		{"upcaster not YAML of an upcaster", "PUT", "/admin/v1/schemas/Shipped/upcasters/1", map[string]any{"upcaster": "event_type: Shipped\nfrom: 0\n"}, 400, "upcaster"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, out, h := e.call(tc.method, tc.path, opToken, tc.body)
			if status != tc.status || out["field"] != tc.field || h.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("%d %v (%s), want %d field %q", status, out, h.Get("Content-Type"), tc.status, tc.field)
			}
		})
	}
}
