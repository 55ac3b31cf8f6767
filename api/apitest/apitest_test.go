package apitest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

const doc = `{
 "openapi": "3.1.0",
 "info": {"title": "t", "version": "1"},
 "security": [{"bearer": []}],
 "paths": {
  "/v1/things/{id}": {
   "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
   "get": {
    "responses": {
     "200": {"description": "ok", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Thing"}}}},
     "503": {"description": "down", "headers": {"Retry-After": {"required": true, "schema": {"type": "integer"}}},
             "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    }
   },
   "put": {
    "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}}}},
    "responses": {"204": {"description": "stored"}, "400": {"description": "bad", "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Error"}}}}}
   }
  }
 },
 "components": {
  "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
  "schemas": {
   "Thing": {"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}, "n": {"type": "integer"}}},
   "Error": {"type": "object", "required": ["code"], "properties": {"code": {"type": "string"}}}
  }
 }
}`

// Check accepts what the document describes and refuses, one by one, each
// way a reply or a request/reply pair can disagree with it.
func TestCheck(t *testing.T) {
	v := MustNew(t, []byte(doc))
	jsonCT := http.Header{"Content-Type": {"application/json"}}
	problemCT := http.Header{"Content-Type": {"application/problem+json"}}
	cases := []struct {
		name           string
		method, target string
		reqBody        string
		status         int
		header         http.Header
		body           string
		wantErr        string
	}{
		{"documented 200", "GET", "/v1/things/a", "", 200, jsonCT, `{"id":"a","n":1}`, ""},
		{"undocumented status", "GET", "/v1/things/a", "", 418, jsonCT, `{"id":"a"}`, "418"},
		{"missing required member", "GET", "/v1/things/a", "", 200, jsonCT, `{"n":1}`, `"id"`},
		{"member of the wrong type", "GET", "/v1/things/a", "", 200, jsonCT, `{"id":"a","n":"one"}`, `"n"`},
		{"undocumented member", "GET", "/v1/things/a", "", 200, jsonCT, `{"id":"a","extra":true}`, "extra"},
		{"undocumented content type", "GET", "/v1/things/a", "", 200, http.Header{"Content-Type": {"text/plain"}}, `a`, "text/plain"},
		{"503 with Retry-After", "GET", "/v1/things/a", "", 503, http.Header{"Content-Type": {"application/problem+json"}, "Retry-After": {"1"}}, `{"code":"unavailable"}`, ""},
		{"503 without Retry-After", "GET", "/v1/things/a", "", 503, problemCT, `{"code":"unavailable"}`, "Retry-After"},
		{"invalid request refused", "PUT", "/v1/things/a", `{"n":"x"}`, 400, problemCT, `{"code":"bad"}`, ""},
		{"invalid request accepted", "PUT", "/v1/things/a", `{"n":"x"}`, 204, http.Header{}, ``, "calls the request invalid"},
		{"valid request accepted", "PUT", "/v1/things/a", `{"n":1}`, 204, http.Header{}, ``, ""},
		{"unknown path, 404 problem", "GET", "/v1/nothing", "", 404, problemCT, `{"code":"not_found"}`, ""},
		{"unknown path, 401 under global security", "GET", "/v1/nothing", "", 401, problemCT, `{"code":"unauthorized"}`, ""},
		{"unknown path answered 200", "GET", "/v1/nothing", "", 200, jsonCT, `{}`, "no such operation"},
		{"unknown path, 404 not a problem", "GET", "/v1/nothing", "", 404, problemCT, `{}`, "Error schema"},
		{"unknown method, 405 problem", "DELETE", "/v1/things/a", "", 405, problemCT, `{"code":"method_not_allowed"}`, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := httptest.NewRequest(c.method, c.target, strings.NewReader(c.reqBody))
			if c.reqBody != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			err := v.Check(req, []byte(c.reqBody), c.status, c.header, []byte(c.body))
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.wantErr != "" && err == nil:
				t.Fatalf("accepted, want an error naming %q", c.wantErr)
			case c.wantErr != "" && !strings.Contains(err.Error(), c.wantErr):
				t.Fatalf("error %q does not name %q", err, c.wantErr)
			}
		})
	}
}

// The wrappers hand the exchange on unchanged and report a mismatch to the
// test (here a recording testing.TB, so that this test itself passes).
func TestWrappers(t *testing.T) {
	v := MustNew(t, []byte(doc))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/things/bad" {
			_, _ = w.Write([]byte(`{"n":1}`))
			return
		}
		_, _ = w.Write([]byte(`{"id":"a"}`))
	})
	for _, c := range []struct {
		path  string
		body  string
		fails bool
	}{{"/v1/things/a", `{"id":"a"}`, false}, {"/v1/things/bad", `{"n":1}`, true}} {
		t.Run("handler"+c.path, func(t *testing.T) {
			rt := &recordingT{TB: t}
			rec := httptest.NewRecorder()
			v.Handler(rt, h).ServeHTTP(rec, httptest.NewRequest("GET", c.path, nil))
			if rt.failed != c.fails {
				t.Fatalf("failed %v, want %v (%s)", rt.failed, c.fails, rt.msg)
			}
			if rec.Code != 200 || rec.Body.String() != c.body || rec.Header().Get("Content-Type") != "application/json" {
				t.Fatalf("the reply was changed: %d %s", rec.Code, rec.Body)
			}
		})
		t.Run("round tripper"+c.path, func(t *testing.T) {
			srv := httptest.NewServer(h)
			defer srv.Close()
			rt := &recordingT{TB: t}
			client := &http.Client{Transport: v.RoundTripper(rt, nil)}
			res, err := client.Get(srv.URL + c.path)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			if b, _ := io.ReadAll(res.Body); string(b) != c.body {
				t.Fatalf("the body was changed: %s", b)
			}
			if rt.failed != c.fails {
				t.Fatalf("failed %v, want %v (%s)", rt.failed, c.fails, rt.msg)
			}
		})
	}
}

// recordingT records Errorf instead of failing.
type recordingT struct {
	testing.TB
	failed bool
	msg    string
}

func (r *recordingT) Errorf(format string, args ...any) {
	r.failed = true
	r.msg = format
}
