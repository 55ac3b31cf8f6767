package admin_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/auth"
)

// The key endpoints: made, listed, rotated and revoked by the operator
// role, listed by the read role; a key granted admin_read opens the admin
// API with the read role; every change is audited without the secret.
func TestKeyEndpoints(t *testing.T) {
	srv, keys, pool := keyServer(t)
	call := func(method, path, token, body string) (int, map[string]any, string) {
		t.Helper()
		code, out, raw := serveRaw(srv, method, path, token, body)
		return code, out, string(raw)
	}
	create := `{"principal":"ops-bot","grants":[{"ops":["admin_read"],"resource":"*"}],"description":"dashboards"}`
	if code, _, body := call("POST", "/admin/v1/auth/keys", readToken, create); code != http.StatusForbidden {
		t.Fatalf("read role created a key: %d %s", code, body)
	}
	code, out, body := call("POST", "/admin/v1/auth/keys", opToken, create)
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	secret, _ := out["secret"].(string)
	keyID, _ := out["key"].(map[string]any)["key_id"].(string)
	if !strings.HasPrefix(secret, auth.KeyPrefix+keyID+"_") {
		t.Fatalf("create answered %s", body)
	}
	// A refusal names the member at fault (the command API's convention).
	for _, bad := range []struct{ body, field string }{
		{`{"principal":"admin:x","grants":[{"ops":["read"],"resource":"*"}]}`, "principal"},
		{`{"principal":"p","grants":[]}`, "grants"},
		{`{"principal":"p","grants":[{"ops":["read"],"resource":"*"},{"ops":["read"],"resource":"db:"}]}`, "grants[1]"},
		{`{"principal":"p","grants":[{"ops":["fly"],"resource":"*"}]}`, "grants[0]"},
		{`{"principal":"p","grants":[{"ops":["read"],"resource":"*"}],"expires_in":"-1h"}`, "expires_in"},
	} {
		if code, out, body := call("POST", "/admin/v1/auth/keys", opToken, bad.body); code != http.StatusBadRequest || out["field"] != bad.field {
			t.Errorf("%s: %d field %v, want 400 on %q: %s", bad.body, code, out["field"], bad.field, body)
		}
	}
	// The new key reads (read role) and may not act.
	if code, _, body := call("GET", "/admin/v1/auth/keys", secret, ""); code != http.StatusOK || !strings.Contains(body, keyID) || strings.Contains(body, secret) {
		t.Fatalf("list with the key: %d %s", code, body)
	}
	if code, _, _ := call("POST", "/admin/v1/auth/keys/"+keyID+"/revoke", secret, ""); code != http.StatusForbidden {
		t.Fatalf("a read key acted: %d", code)
	}
	// A key without admin grants is authenticated but forbidden.
	_, plain, err := keys.Create(t.Context(), auth.CreateRequest{Principal: "app", Grants: []auth.Grant{{Ops: []auth.Operation{auth.OpRead}, Resource: "*"}}, By: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if code, out, _ := call("GET", "/admin/v1/auth/keys", plain, ""); code != http.StatusForbidden || out["permission"] != "admin_read on *" {
		t.Fatalf("a /v1 key on the admin API: %d %v, want 403 naming admin_read on *", code, out)
	}
	if code, out, body := call("POST", "/admin/v1/auth/keys/"+keyID+"/rotate", opToken, `{"grace":"-1s"}`); code != http.StatusBadRequest || out["field"] != "grace" {
		t.Errorf("rotate with a negative grace: %d field %v, want 400 on grace: %s", code, out["field"], body)
	}
	code, out, body = call("POST", "/admin/v1/auth/keys/"+keyID+"/rotate", opToken, `{"grace":"0s"}`)
	if code != http.StatusCreated {
		t.Fatalf("rotate: %d %s", code, body)
	}
	newSecret, _ := out["secret"].(string)
	if code, _, _ := call("GET", "/admin/v1/auth/keys", secret, ""); code != http.StatusUnauthorized {
		t.Fatalf("the rotated-out key still works: %d", code)
	}
	newID, _, _ := auth.SplitKey(newSecret)
	if code, _, body := call("POST", "/admin/v1/auth/keys/"+newID+"/revoke", opToken, ""); code != http.StatusOK {
		t.Fatalf("revoke: %d %s", code, body)
	}
	if code, _, _ := call("GET", "/admin/v1/auth/keys", newSecret, ""); code != http.StatusUnauthorized {
		t.Fatalf("the revoked key still works: %d", code)
	}
	if code, _, _ := call("POST", "/admin/v1/auth/keys/0123456789abcdef/revoke", opToken, ""); code != http.StatusNotFound {
		t.Fatalf("revoke unknown: %d", code)
	}
	// The audit log names the actions and never holds a secret.
	_, _, body = call("GET", "/admin/v1/audit", readToken, "")
	for _, want := range []string{"auth.key.create", "auth.key.rotate", "auth.key.revoke", `"who": "admin:operator"`} {
		if !strings.Contains(body, want) {
			t.Errorf("audit lacks %s: %s", want, body)
		}
	}
	if strings.Contains(body, secret) || strings.Contains(body, newSecret) {
		t.Fatalf("the audit log holds a secret: %s", body)
	}
	// RecordCLI writes the same table, under the command's user.
	if err := admin.RecordCLI(t.Context(), pool, nil, "cli:tester", "auth.key.revoke", "key x", map[string]string{"key_id": "x"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, body = call("GET", "/admin/v1/audit?limit=1", readToken, ""); !strings.Contains(body, `"who": "cli:tester"`) {
		t.Fatalf("CLI audit: %s", body)
	}
}
