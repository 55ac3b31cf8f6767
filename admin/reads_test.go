package admin_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/registry"
)

// A read view mounted with HandleRead is behind the admin tokens: 401
// without one (or with none configured), served for both roles.
func TestHandleReadIsBehindTheTokens(t *testing.T) {
	_, pool := testenv.NewMigratedDatabase(t)
	reg, err := registry.New(registry.Config{Owner: "t"}, registry.Deps{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	view := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	open, err := admin.New(admin.Config{Process: mustConfig(t), OperatorToken: "op", ReadToken: "ro"}, admin.Deps{Pool: pool, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	closed, err := admin.New(admin.Config{Process: mustConfig(t)}, admin.Deps{Pool: pool, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*admin.Server{open, closed} {
		s.HandleRead(admin.Prefix+"trace/", view)
	}
	// A presented token that is refused says so in its challenge
	// (RFC 6750 section 3.1: error="invalid_token") and in the detail;
	// only a request without one is told that a token is needed.
	const (
		needed  = `Bearer realm="sluice-admin"`
		invalid = `Bearer realm="sluice-admin", error="invalid_token"`
	)
	tests := []struct {
		name      string
		srv       *admin.Server
		auth      string
		want      int
		challenge string
	}{
		{"no token", open, "", http.StatusUnauthorized, needed},
		{"wrong token", open, "Bearer nope", http.StatusUnauthorized, invalid},
		{"not a bearer token", open, "Basic b3A6", http.StatusUnauthorized, invalid},
		{"read token", open, "Bearer ro", http.StatusNoContent, ""},
		{"operator token", open, "Bearer op", http.StatusNoContent, ""},
		{"none configured", closed, "Bearer op", http.StatusUnauthorized, invalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest("GET", admin.Prefix+"trace/abc", nil)
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			w := httptest.NewRecorder()
			tc.srv.ServeHTTP(w, req)
			if w.Code != tc.want {
				t.Errorf("status %d, want %d", w.Code, tc.want)
			}
			if got := w.Header().Get("WWW-Authenticate"); got != tc.challenge {
				t.Errorf("WWW-Authenticate %q, want %q", got, tc.challenge)
			}
			if tc.challenge == invalid && !strings.Contains(w.Body.String(), "not valid") && !strings.Contains(w.Body.String(), "must be") {
				t.Errorf("the detail does not say the token was refused: %s", w.Body)
			}
		})
	}
}
