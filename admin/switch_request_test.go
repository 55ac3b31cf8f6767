package admin_test

import (
	"net/http"
	"testing"
)

// A rebuild or rollback refused for its request names the member at
// fault, before anything is read (here no Elasticsearch is configured:
// a request checked after that was answered 503).
func TestProjectionSwitchRefusalsNameTheField(t *testing.T) {
	srv, _, _ := keyServer(t)
	tests := []struct {
		name, path, body string
		field            string
	}{
		{"rebuild without a version", "/admin/v1/projections/history/rebuild", `{"dry_run":true}`, "version"},
		{"rebuild of version 0", "/admin/v1/projections/history/rebuild", `{"version":0}`, "version"},
		{"rebuild of a negative version", "/admin/v1/projections/history/rebuild", `{"version":-1,"dry_run":true}`, "version"},
		{"rebuild with a bad settle", "/admin/v1/projections/history/rebuild", `{"version":2,"settle":"soon"}`, "settle"},
		{"rollback with a negative settle", "/admin/v1/projections/history/rollback", `{"settle":"-1s"}`, "settle"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if code, out := serve(srv, "POST", tc.path, opToken, tc.body); code != http.StatusBadRequest || out["field"] != tc.field {
				t.Fatalf("%d %v, want 400 naming %q", code, out, tc.field)
			}
		})
	}
}
