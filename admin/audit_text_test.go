package admin_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/sluicehq/sluice/admin"
)

// A body Go reads as text (a lone surrogate escape, bytes that are not
// UTF-8, both read as U+FFFD) but Postgres's jsonb refuses made the audit
// row fail after the action ran: 503 audit_failed for a pause that was
// done. The record keeps such a string as U+FFFD, as it does NUL.
func TestAuditKeepsBodiesJSONBRefuses(t *testing.T) {
	srv, _, _ := keyServer(t)
	tests := []struct {
		name, body string
	}{
		{"lone high surrogate in the reason", `{"allow_new":true,"reason":"a\ud800b"}`},
		{"lone low surrogate in the reason", `{"allow_new":true,"reason":"\udc00"}`},
		{"byte that is not UTF-8 in the reason", "{\"allow_new\":true,\"reason\":\"a\xffb\"}"},
		{"lone surrogate in a member's name", `{"allow_new":true,"reason":"r","x\ud800":1}`},
		{"surrogate pair", `{"allow_new":true,"reason":"\ud83d\ude00"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out := serve(srv, "POST", "/admin/v1/consumers/ab/pause", opToken, tc.body)
			if code == http.StatusServiceUnavailable {
				t.Fatalf("%d %v, want the action's own answer", code, out)
			}
			_, _, raw := serveRaw(srv, "GET", "/admin/v1/audit?limit=1", readToken, "")
			var recs []admin.AuditRecord
			if err := json.Unmarshal(raw, &recs); err != nil || len(recs) != 1 || recs[0].Status != code {
				t.Fatalf("audit: %v %s, want the request (%d) recorded", err, raw, code)
			}
		})
	}
}
