package console_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/console"
)

func TestHandlerServesTheEmbeddedPage(t *testing.T) {
	srv := httptest.NewServer(console.Handler())
	defer srv.Close()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	tests := []struct {
		method, path string
		status       int
		ctype, body  string
	}{
		{"GET", "/console/", 200, "text/html", `<script type="module" src="app.js">`},
		{"GET", "/console/?actions", 200, "text/html", `id="view-actions"`},
		{"GET", "/console/app.js", 200, "javascript", `"/admin/v1/relay/checkpoint"`},
		{"GET", "/console/app.js", 200, "javascript", `"/admin/v1/overview"`},
		{"GET", "/console/style.css", 200, "text/css", ".timeline"},
		{"HEAD", "/console/", 200, "text/html", ""},
		{"GET", "/console", 301, "", ""},
		{"GET", "/console/nope.js", 404, "", ""},
		{"POST", "/console/", 405, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
			res, err := noRedirect.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", res.StatusCode, tc.status)
			}
			if tc.ctype != "" && !strings.Contains(res.Header.Get("Content-Type"), tc.ctype) {
				t.Errorf("content type %q, want %q", res.Header.Get("Content-Type"), tc.ctype)
			}
			if !strings.Contains(string(b), tc.body) {
				t.Errorf("body lacks %q", tc.body)
			}
			if tc.status == 200 && !strings.Contains(res.Header.Get("Content-Security-Policy"), "script-src 'self'") {
				t.Errorf("no CSP: %v", res.Header)
			}
		})
	}
}
