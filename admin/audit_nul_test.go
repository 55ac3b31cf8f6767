package admin_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/admin"
)

// A request holding NUL (the JSON escape \u0000 or %00 in the path) is
// answered for what it is and audited: Postgres refuses NUL in text and
// jsonb, which made the audit row, and so the request, fail with 503
// audit_failed; a key's description with NUL was a failed insert (503).
func TestRequestsWithNULAreRefusedAndAudited(t *testing.T) {
	srv, _, _ := keyServer(t)
	grant := `"grants":[{"ops":["read"],"resource":"*"}]`
	tests := []struct {
		name, path, body string
		status           int
		field            string
	}{
		{"long description", "/admin/v1/auth/keys", `{"principal":"p",` + grant + `,"description":"` + strings.Repeat("d", 1001) + `"}`, http.StatusBadRequest, "description"},
		{"NUL in the description", "/admin/v1/auth/keys", `{"principal":"p",` + grant + `,"description":"a\u0000b"}`, http.StatusBadRequest, "description"},
		{"NUL in the principal", "/admin/v1/auth/keys", `{"principal":"p\u0000",` + grant + `}`, http.StatusBadRequest, "principal"},
		{"NUL in an unknown member", "/admin/v1/auth/keys", `{"x\u0000":1}`, http.StatusBadRequest, `x\x00`},
		{"NUL in a db", "/admin/v1/verify", `{"db":"a\u0000","class":"c","dry_run":true}`, http.StatusBadRequest, "db"},
		{"NUL in the path", "/admin/v1/auth/keys/a%00b/revoke", "", http.StatusBadRequest, "key_id"},
		{"no key id in the path of a rotation", "/admin/v1/auth/keys/0123456789abcdeg/rotate", "", http.StatusNotFound, "key_id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out := serve(srv, "POST", tc.path, opToken, tc.body)
			if code != tc.status || out["field"] != tc.field {
				t.Fatalf("%d %v, want %d naming %q", code, out, tc.status, tc.field)
			}
			_, _, raw := serveRaw(srv, "GET", "/admin/v1/audit?limit=1", readToken, "")
			var recs []admin.AuditRecord
			if err := json.Unmarshal(raw, &recs); err != nil || len(recs) != 1 || recs[0].Status != tc.status {
				t.Fatalf("audit: %v %s, want the refusal (%d) recorded", err, raw, tc.status)
			}
		})
	}
}
