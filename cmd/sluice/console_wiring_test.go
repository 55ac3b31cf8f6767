package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// The inspect endpoints are never open: no token configured refuses every
// request, and only a configured token passes.
func TestAdminReadAuth(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	tests := []struct {
		name, operator, reader, header string
		want                           int
	}{
		{"no token configured, none sent", "", "", "", 401},
		{"no token configured, one sent", "", "", "Bearer x", 401},
		{"operator token", "op-secret", "ro-secret", "Bearer op-secret", 204},
		{"read token", "op-secret", "ro-secret", "Bearer ro-secret", 204},
		{"wrong token", "op-secret", "ro-secret", "Bearer nope", 401},
		{"not bearer", "op-secret", "", "Basic op-secret", 401},
		{"empty bearer", "op-secret", "", "Bearer ", 401},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("SLUICE_ADMIN_TOKEN", tc.operator)
			t.Setenv("SLUICE_ADMIN_READ_TOKEN", tc.reader)
			t.Setenv("SLUICE_ADMIN_TOKEN_FILE", "")
			t.Setenv("SLUICE_ADMIN_READ_TOKEN_FILE", "")
			h := adminReadAuth(adminTokensFromEnv())(ok)
			req := httptest.NewRequest("GET", "/admin/v1/trace/x", nil)
			if tc.header != "" {
				req.Header.Set("Authorization", tc.header)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Errorf("status %d, want %d", rec.Code, tc.want)
			}
			if tc.want == 401 && rec.Header().Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
}
