package admin_test

import (
	"net/http"
	"net/http/httptest"
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
	tests := []struct {
		name string
		srv  *admin.Server
		auth string
		want int
	}{
		{"no token", open, "", http.StatusUnauthorized},
		{"wrong token", open, "Bearer nope", http.StatusUnauthorized},
		{"read token", open, "Bearer ro", http.StatusNoContent},
		{"operator token", open, "Bearer op", http.StatusNoContent},
		{"none configured", closed, "Bearer op", http.StatusUnauthorized},
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
		})
	}
}
