package esserver_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/esserver"
)

// checkResponse asserts the server did not panic (500) and that error
// responses carry an Elasticsearch error body.
func checkResponse(t *testing.T, rec *httptest.ResponseRecorder, method string) {
	t.Helper()
	if rec.Code >= 500 {
		t.Fatalf("server error %d: %s", rec.Code, rec.Body.String())
	}
	if rec.Code >= 400 && method != http.MethodHead {
		var m map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
			t.Fatalf("error body is not JSON: %v: %q", err, rec.Body.String())
		}
		// Elasticsearch answers some 4xx with a result body, not an error
		// body: a missing document (GET: found false; DELETE: result
		// not_found) and a cluster-health wait that timed out (408 with the
		// health body).
		switch {
		case rec.Code == http.StatusNotFound && (m["found"] == false || m["result"] == "not_found") && m["_id"] != nil:
			return
		case rec.Code == http.StatusRequestTimeout && m["timed_out"] == true && m["cluster_name"] != nil:
			return
		}
		if _, ok := m["error"]; !ok {
			t.Fatalf("error body without error: %s", rec.Body.String())
		}
		if _, ok := m["status"]; !ok && rec.Code != http.StatusNotFound {
			t.Fatalf("error body without status: %s", rec.Body.String())
		}
	}
}

func serve(srv http.Handler, method, target, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, "/", strings.NewReader(body))
	req.Method = method
	req.URL.Path = ""
	req.URL.RawPath = ""
	if u, err := req.URL.Parse(target); err == nil {
		req.URL = u
	}
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	return rec
}

func FuzzBulkBody(f *testing.F) {
	seeds := []string{
		"{\"index\":{\"_index\":\"a\",\"_id\":\"1\"}}\n{\"x\":1}\n",
		"{\"create\":{\"_index\":\"a\"}}\n{\"x\":{\"y\":[1,2,{\"z\":null}]}}\n{\"delete\":{\"_index\":\"a\",\"_id\":\"1\"}}\n",
		"{\"update\":{\"_index\":\"a\",\"_id\":\"1\"}}\n{\"doc\":{\"x\":2},\"doc_as_upsert\":true}\n",
		"{\"index\":{\"_index\":\"a\",\"version\":3,\"version_type\":\"external\",\"_id\":\"2\"}}\n{}\n",
		"{}\n", "\n", "", "{\"index\":1}\n", "[1]\n", "{\"index\":{\"_index\":\"A\"}}\n{}\n",
		"{\"index\":{\"_index\":\"a\",\"if_seq_no\":0}}\n{}\n", "{\"index\":{}}\n\"str\"\n",
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		srv := esserver.New()
		rec := serve(srv, http.MethodPost, "/_bulk", body)
		checkResponse(t, rec, http.MethodPost)
		if rec.Code == 200 {
			// The server must stay usable.
			checkResponse(t, serve(srv, http.MethodPost, "/_search", `{"query":{"match_all":{}},"sort":["_doc"]}`), http.MethodPost)
		}
	})
}

func FuzzSearchBody(f *testing.F) {
	seeds := []string{
		`{"query":{"match_all":{}}}`,
		`{"query":{"bool":{"must":[{"match":{"t":"quick fox"}}],"filter":{"range":{"n":{"gte":1,"lt":"5"}}},"should":[{"term":{"k":"x"}}],"minimum_should_match":"50%"}},"sort":[{"n":{"order":"desc","missing":"_first"}},"_score"],"from":1,"size":2}`,
		`{"query":{"range":{"d":{"gt":"now-7d/d"}}},"search_after":[1],"sort":[{"d":"asc"}]}`,
		`{"query":{"query_string":{"query":"t:(quick OR dog) AND -n:3 /re.*/"}}}`,
		`{"_source":{"includes":["a.*"],"excludes":["*.b"]},"track_total_hits":5,"docvalue_fields":["n"]}`,
		`{"query":{"terms":{"k":["a",1,true]}},"post_filter":{"exists":{"field":"n"}}}`,
		`{"query":{"wildcard":{"k":{"value":"a*?","case_insensitive":true}}}}`,
		`{"query":{"ids":{"values":[1,"2"]}},"sort":"n:desc"}`,
		`{"query":{}}`, `{"query":[]}`, `[]`, `nope`, `{"sort":[{"t":"asc"}]}`, `{"size":-1}`,
	}
	for _, s := range seeds {
		f.Add(s)
	}
	srv := esserver.New()
	setup := "{\"index\":{\"_index\":\"f\",\"_id\":\"1\"}}\n{\"t\":\"the quick fox\",\"n\":3,\"k\":\"a\",\"d\":\"2024-01-01\",\"a\":{\"b\":1,\"c\":2}}\n" +
		"{\"index\":{\"_index\":\"f\",\"_id\":\"2\"}}\n{\"t\":\"lazy dog\",\"n\":1.5,\"k\":\"b\"}\n"
	serve(srv, http.MethodPost, "/_bulk?refresh=true", setup)
	f.Fuzz(func(t *testing.T, body string) {
		checkResponse(t, serve(srv, http.MethodPost, "/f/_search", body), http.MethodPost)
		checkResponse(t, serve(srv, http.MethodPost, "/f/_count", body), http.MethodPost)
	})
}

func FuzzPaths(f *testing.F) {
	seeds := [][2]string{
		{"GET", "/"}, {"PUT", "/idx"}, {"GET", "/idx/_doc/1?version=x"}, {"HEAD", "/idx/_doc/1"},
		{"DELETE", "/idx,other*"}, {"GET", "/_alias/a*"}, {"PUT", "/idx/_alias/al"}, {"GET", "/idx/_mapping"},
		{"POST", "/idx/_refresh"}, {"GET", "/%3Clogs-%7Bnow%2Fd%7D%3E/_search"}, {"PUT", "/idx/_doc/%ZZ"},
		{"GET", "/_cluster/health/idx?wait_for_status=purple"}, {"POST", "/idx/_doc?op_type=bogus"},
		{"DELETE", "/idx/_doc/1?if_seq_no=-1&if_primary_term=0"}, {"GET", "/idx/_search?track_total_hits=x&from=-1"},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1], `{"a":1}`)
	}
	f.Fuzz(func(t *testing.T, method, target, body string) {
		switch method {
		case "GET", "PUT", "POST", "DELETE", "HEAD":
		default:
			method = "GET"
		}
		if !strings.HasPrefix(target, "/") {
			target = "/" + target
		}
		srv := esserver.New()
		serve(srv, "PUT", "/idx/_doc/1", `{"a":1}`)
		checkResponse(t, serve(srv, method, target, body), method)
	})
}
