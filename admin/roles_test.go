package admin_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/auth"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/registry"
)

// keyServer is an admin API whose authenticator knows the API keys of a
// fresh database, with the key endpoints served.
func keyServer(t *testing.T) (*admin.Server, *auth.Keys, *pgxpool.Pool) {
	t.Helper()
	_, pool := testenv.NewMigratedDatabase(t)
	reg, err := registry.New(registry.Config{Owner: "t"}, registry.Deps{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	keys := auth.NewKeys(pool, auth.KeysOptions{})
	srv, err := admin.New(admin.Config{Process: mustConfig(t)}, admin.Deps{Pool: pool, Registry: reg, Keys: keys,
		Auth: auth.NewAuthenticator(auth.Options{Keys: keys, AdminToken: opToken, AdminReadToken: readToken, Required: true})})
	if err != nil {
		t.Fatal(err)
	}
	return srv, keys, pool
}

// serve sends one request to srv and returns its status and problem body.
func serve(srv http.Handler, method, path, token, body string) (int, map[string]any) {
	code, out, _ := serveRaw(srv, method, path, token, body)
	return code, out
}

// serveRaw is serve, with the body as sent too.
func serveRaw(srv http.Handler, method, path, token, body string) (int, map[string]any, []byte) {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	srv.ServeHTTP(w, req)
	out := map[string]any{}
	_ = json.Unmarshal(w.Body.Bytes(), &out)
	return w.Code, out, w.Body.Bytes()
}

// An admin role needs its operation on * (the only pattern that covers the
// admin resources, docs/security.md): a key granted admin_act or
// admin_read on a db or a stream is not an operator or a reader, or it
// could make itself a key on everything.
func TestAdminRoleNeedsGrantOnStar(t *testing.T) {
	srv, keys, _ := keyServer(t)
	escalate := `{"principal":"evil","grants":[{"ops":["append","read","subscribe","command","admin_read","admin_act"],"resource":"*"}]}`
	tests := []struct {
		name              string
		grants            []string
		read, act         int
		readPerm, actPerm string
	}{
		{"every operation on a stream", []string{"*=stream:Order/x"}, 403, 403, "admin_read on *", "admin_read on *"},
		{"every operation on a db", []string{"*=db:orders"}, 403, 403, "admin_read on *", "admin_read on *"},
		{"admin_read on *, every operation on a db", []string{"admin_read=*", "*=db:orders"}, 200, 403, "", "admin_act on *"},
		{"admin_act on *", []string{"admin_act=*"}, 200, 201, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var gs []auth.Grant
			for _, s := range tc.grants {
				g, err := auth.ParseGrant(s)
				if err != nil {
					t.Fatal(err)
				}
				gs = append(gs, g)
			}
			// Every operation (*) on a db or a stream is a grant a new key
			// may still hold (auth.CheckAdminScope): it names admin_act and
			// admin_read on a pattern that does not cover the admin API.
			_, secret, err := keys.Create(t.Context(), auth.CreateRequest{Principal: "p", Grants: gs, By: "t"})
			if err != nil {
				t.Fatal(err)
			}
			if code, out := serve(srv, "GET", "/admin/v1/auth/keys", secret, ""); code != tc.read || tc.readPerm != "" && out["permission"] != tc.readPerm {
				t.Errorf("read: %d %v, want %d naming %q", code, out, tc.read, tc.readPerm)
			}
			code, out := serve(srv, "POST", "/admin/v1/auth/keys", secret, escalate)
			if code != tc.act || tc.actPerm != "" && out["permission"] != tc.actPerm {
				t.Errorf("make a key on *: %d %v, want %d naming %q", code, out, tc.act, tc.actPerm)
			}
			// The advice names the pattern a key needs, not only the operation.
			if d, _ := out["detail"].(string); tc.actPerm == "admin_act on *" && !strings.Contains(d, "a key granted "+tc.actPerm) {
				t.Errorf("make a key on *: detail %q does not say a key needs %s", d, tc.actPerm)
			}
		})
	}
}
