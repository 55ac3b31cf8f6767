package console_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
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

// Every id the console puts into an API path goes through seg, which
// encodes a segment that is only "." or ".." as %2E: encodeURIComponent
// leaves such a segment as it is, and the browser resolves it away as a
// dot segment, so the request would name another resource.
func TestAPIPathsEncodeDotSegments(t *testing.T) {
	b, err := os.ReadFile("static/app.js")
	if err != nil {
		t.Fatal(err)
	}
	js := string(b)
	// A line that builds an API path ("/v1/…", "/admin/v1/…"; the
	// console's own "#/…" links are fragments, never resolved) must not
	// encode with encodeURIComponent.
	apiPath := regexp.MustCompile(`"(/admin)?/v1/`)
	for _, tc := range []struct{ name, re string }{
		{"paths use seg", ""},
		{"streams by seg", `"/v1/streams/" + seg(type) + "/" + seg(id) + "/events"`},
		{"aggregates by seg", `"/admin/v1/aggregates/" + seg(type) + "/" + seg(id)`},
		// Browsers resolve %2E and %2E%2E as dot segments too (WHATWG
		// URL): seg refuses such an id rather than send another path.
		{"seg refuses dot segments", `if (s === "." || s === "..") {
    throw new Error(`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.re == "" {
				for _, line := range strings.Split(js, "\n") {
					if apiPath.MatchString(line) && strings.Contains(line, "encodeURIComponent(") {
						t.Errorf("an API path segment encoded without seg: %s", strings.TrimSpace(line))
					}
				}
				return
			}
			if !strings.Contains(js, tc.re) {
				t.Errorf("app.js lacks %s", tc.re)
			}
		})
	}
}

// The projection bodies of the admin API (the rollback dry run's indices,
// the jobs' progress and summary) carry snake_case names, as every other
// admin body; they used to carry Go field names (Index, Live, Lag, …),
// which the console read. The console must read the JSON names: a Go name
// reads undefined and the preview says "undefined v2". The browser test
// (cmd/sluice TestConsoleInBrowser) reads the rendered text.
func TestProjectionBodiesReadBySnakeCaseNames(t *testing.T) {
	b, err := os.ReadFile("static/app.js")
	if err != nil {
		t.Fatal(err)
	}
	js := string(b)
	// The Go field names of projectionworker.IndexInfo, Progress, Summary
	// and Lag, and of relay.ParkedRecord, read as a property of a value.
	goNames := regexp.MustCompile(`\b[a-z]\w*\??\.(Index|Scope|Version|Live|ReadAlias|Docs|RefreshInterval|Replicas|Phase|Projection|Lag|Elapsed|From|To|Scopes|OldReplicas|Committed|End|Behind|Relay|Shard|Position|EventID|Topic|Reason|Error|Attempts|ParkedAt|State|SegmentKey|EnvelopeBytes|ResolvedAt|ResolvedTopic)\b`)
	for _, tc := range []struct{ name, read string }{
		{"no Go field name", ""},
		{"rollback preview: index name", `i.index + " v" + i.version + (i.live ? " (live)" : "")`},
		{"rollback preview: versions", `"would roll back from v" + r.from + " to v" + r.to`},
		{"job summary", `"done: v" + sum.from + " → v" + sum.to + " · " + (lag.end || 0) + " records · " + Math.round((sum.elapsed_ns || 0) / 1e6) + " ms"`},
		{"job summary lag", `const lag = sum.lag || {};`},
		{"job progress", `(p.phase || "") + " · " + (lag.end - lag.lag || 0) + "/" + (lag.end || 0)`},
		{"job progress lag", `const lag = p.lag || {};`},
		{"parked row", `el("tr", { "data-position": p.position, "data-state": p.state }`},
		{"parked row: event and time", `p.event_id ? el("a"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.read == "" {
				for n, line := range strings.Split(js, "\n") {
					if m := goNames.FindString(line); m != "" {
						t.Errorf("app.js:%d reads the Go field name %s: %s", n+1, m, strings.TrimSpace(line))
					}
				}
				return
			}
			if !strings.Contains(js, tc.read) {
				t.Errorf("app.js lacks %s", tc.read)
			}
		})
	}
}
