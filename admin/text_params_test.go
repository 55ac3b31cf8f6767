package admin_test

import (
	"net/http"
	"testing"
)

// A path value, query parameter or reason Postgres cannot hold as text
// (NUL, bytes that are not UTF-8) is refused with 400 naming it; handed
// on, it failed the query and was answered 503 unavailable.
func TestTextPostgresRefusesIs400(t *testing.T) {
	srv, _, _ := keyServer(t)
	tests := []struct {
		name, method, path, body, field string
	}{
		{"pause flag of a group with NUL", "GET", "/admin/v1/consumers/a%00/pause", "", "group"},
		{"pause of a new group with NUL", "POST", "/admin/v1/consumers/a%00b/pause", `{"allow_new":true}`, "group"},
		{"pause reason with NUL", "POST", "/admin/v1/consumers/ab/pause", `{"allow_new":true,"reason":"x\u0000"}`, "reason"},
		{"resume of a group not UTF-8", "POST", "/admin/v1/consumers/a%FF/resume", `{"allow_new":true}`, "group"},
		{"parked records by reason with NUL", "GET", "/admin/v1/relay/parked?reason=a%00", "", "reason"},
		{"parked records by topic not UTF-8", "GET", "/admin/v1/relay/parked?topic=%C3", "", "topic"},
		{"upcaster of a type with NUL", "GET", "/admin/v1/schemas/a%00/upcasters/1", "", "type"},
		{"keys of a principal with NUL", "GET", "/admin/v1/auth/keys?principal=a%00", "", "principal"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if code, out := serve(srv, tc.method, tc.path, opToken, tc.body); code != http.StatusBadRequest || out["field"] != tc.field {
				t.Fatalf("%d %v, want 400 naming %q", code, out, tc.field)
			}
		})
	}
	if code, out := serve(srv, "POST", "/admin/v1/consumers/ab/pause", opToken, `{"allow_new":true,"reason":"déploiement"}`); code != http.StatusOK {
		t.Fatalf("a pause with a good reason: %d %v", code, out)
	}
}
