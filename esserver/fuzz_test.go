package esserver_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

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
		"{\"index\":{\"_index\":\"a\",\"_id\":\"1\"}}\n{\"x\":1}\n{\"delete\":{\"_index\":\"a\",\"_id\":\"1\"}}\n{\"index\":{\"_index\":\"b\",\"_id\":\"2\"}}\n{\"y\":2}\n",
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		srv := esserver.New()
		rec := serve(srv, http.MethodPost, "/_bulk", body)
		checkResponse(t, rec, http.MethodPost)
		if rec.Code == 200 {
			checkBulkPromises(t, srv, rec)
		}
	})
}

// docKey names a document.
type docKey struct{ index, id string }

// checkBulkPromises checks what a 200 from _bulk promises: a JSON body
// whose errors flag matches its items' statuses; every document an item
// wrote (2xx index, create, update) readable by GET with found true,
// every document it deleted (2xx delete) gone, judged by the last item per
// document; and, after a refresh, each index's _count equal to its
// documents left. A delete of a missing document (404 not_found) is no
// failure and leaves the document absent, as in Elasticsearch.
func checkBulkPromises(t *testing.T, srv http.Handler, rec *httptest.ResponseRecorder) {
	t.Helper()
	var resp struct {
		Errors *bool `json:"errors"`
		Items  []map[string]struct {
			Index  string `json:"_index"`
			ID     string `json:"_id"`
			Status int    `json:"status"`
			Result string `json:"result"`
		} `json:"items"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil || resp.Errors == nil {
		t.Fatalf("bulk 200 body is not a bulk response (%v): %s", err, rec.Body.String())
	}
	anyFailed := false
	present := map[docKey]bool{}
	var order []docKey
	for i, it := range resp.Items {
		if len(it) != 1 {
			t.Fatalf("bulk item %d has %d operations: %s", i, len(it), rec.Body.String())
		}
		for op, r := range it {
			// A delete of a missing document answers 404 not_found and is
			// no failure (Elasticsearch leaves errors false for it).
			missingDelete := op == "delete" && r.Status == http.StatusNotFound && r.Result == "not_found"
			if (r.Status < 200 || r.Status >= 300) && !missingDelete {
				anyFailed = true
				continue
			}
			if r.Index == "" || r.ID == "" {
				t.Fatalf("bulk item %d (%s) succeeded without _index or _id: %s", i, op, rec.Body.String())
			}
			k := docKey{r.Index, r.ID}
			if _, seen := present[k]; !seen {
				order = append(order, k)
			}
			switch op {
			case "index", "create", "update":
				present[k] = true
			case "delete":
				present[k] = false
			default:
				t.Fatalf("bulk item %d: unknown operation %q succeeded", i, op)
			}
		}
	}
	if *resp.Errors != anyFailed {
		t.Fatalf("bulk errors=%v, but an item failed: %v: %s", *resp.Errors, anyFailed, rec.Body.String())
	}
	perIndex := map[string]int{}
	for _, k := range order {
		get := serve(srv, http.MethodGet, "/"+url.PathEscape(k.index)+"/_doc/"+pathSegment(k.id), "")
		var doc struct {
			Found bool `json:"found"`
		}
		_ = json.Unmarshal(get.Body.Bytes(), &doc)
		switch {
		case present[k] && (get.Code != http.StatusOK || !doc.Found):
			t.Fatalf("bulk wrote %s/%s, GET answers %d: %s", k.index, k.id, get.Code, get.Body.String())
		case !present[k] && get.Code != http.StatusNotFound:
			t.Fatalf("bulk deleted %s/%s, GET answers %d: %s", k.index, k.id, get.Code, get.Body.String())
		}
		if _, ok := perIndex[k.index]; !ok {
			perIndex[k.index] = 0
		}
		if present[k] {
			perIndex[k.index]++
		}
	}
	for index, want := range perIndex {
		if r := serve(srv, http.MethodPost, "/"+url.PathEscape(index)+"/_refresh", ""); r.Code != http.StatusOK {
			if want == 0 && r.Code == http.StatusNotFound {
				continue // only deletes of missing documents' index
			}
			t.Fatalf("refresh of %s after a bulk: %d %s", index, r.Code, r.Body.String())
		}
		if got := countOf(t, srv, "/"+url.PathEscape(index)+"/_count", `{"query":{"match_all":{}}}`); got != want {
			t.Fatalf("index %s holds %d documents after the bulk, _count says %d", index, want, got)
		}
	}
}

// pathSegment escapes one path segment so that it names s: PathEscape
// leaves dots alone, and a segment that is only "." or ".." would be
// resolved away as a dot segment, so their dots are sent as %2E (the
// server unescapes each segment after splitting).
func pathSegment(s string) string {
	if s == "." || s == ".." {
		return strings.Repeat("%2E", len(s))
	}
	return url.PathEscape(s)
}

// countOf returns the count answered by a 200 from _count.
func countOf(t *testing.T, srv http.Handler, path, body string) int {
	t.Helper()
	r := serve(srv, http.MethodPost, path, body)
	var c struct {
		Count *int `json:"count"`
	}
	if r.Code != http.StatusOK || json.Unmarshal(r.Body.Bytes(), &c) != nil || c.Count == nil {
		t.Fatalf("%s: %d %s", path, r.Code, r.Body.String())
	}
	return *c.Count
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
		search := serve(srv, http.MethodPost, "/f/_search", body)
		checkResponse(t, search, http.MethodPost)
		count := serve(srv, http.MethodPost, "/f/_count", body)
		checkResponse(t, count, http.MethodPost)
		if search.Code == http.StatusOK {
			checkSearchPromises(t, body, search, count)
		}
	})
}

// checkSearchPromises checks what a 200 from _search promises over the two
// documents of index f: hits from f with known ids, no more hits than an
// exact total, and an exact total equal to _count of the same body when
// _count accepted it too (sized or paged bodies aside, the same query
// matches the same documents; post_filter narrows the hits only).
func checkSearchPromises(t *testing.T, reqBody string, search, count *httptest.ResponseRecorder) {
	t.Helper()
	var sr struct {
		Hits *struct {
			Total *struct {
				Value    int    `json:"value"`
				Relation string `json:"relation"`
			} `json:"total"`
			Hits []struct {
				Index string `json:"_index"`
				ID    string `json:"_id"`
			} `json:"hits"`
		} `json:"hits"`
	}
	if err := json.Unmarshal(search.Body.Bytes(), &sr); err != nil || sr.Hits == nil {
		t.Fatalf("search 200 without hits (%v): %s", err, search.Body.String())
	}
	for _, h := range sr.Hits.Hits {
		if h.Index != "f" || (h.ID != "1" && h.ID != "2") {
			t.Fatalf("search hit %s/%s is not a document of f: %s", h.Index, h.ID, search.Body.String())
		}
	}
	tot := sr.Hits.Total
	if tot == nil || tot.Relation != "eq" {
		return // track_total_hits false or a lower bound
	}
	if tot.Value < len(sr.Hits.Hits) || tot.Value > 2 {
		t.Fatalf("search total %d with %d hits over 2 documents: %s", tot.Value, len(sr.Hits.Hits), search.Body.String())
	}
	if count.Code != http.StatusOK {
		return
	}
	var c struct {
		Count int `json:"count"`
	}
	if err := json.Unmarshal(count.Body.Bytes(), &c); err != nil {
		t.Fatalf("count 200 body: %v: %s", err, count.Body.String())
	}
	if c.Count != tot.Value && !strings.Contains(reqBody, "post_filter") {
		t.Fatalf("search total %d (eq), _count %d for the same body: search %s count %s", tot.Value, c.Count, search.Body.String(), count.Body.String())
	}
}

func FuzzPaths(f *testing.F) {
	seeds := [][2]string{
		{"GET", "/"}, {"PUT", "/idx"}, {"GET", "/idx/_doc/1?version=x"}, {"HEAD", "/idx/_doc/1"},
		{"DELETE", "/idx,other*"}, {"GET", "/_alias/a*"}, {"PUT", "/idx/_alias/al"}, {"GET", "/idx/_mapping"},
		{"POST", "/idx/_refresh"}, {"GET", "/%3Clogs-%7Bnow%2Fd%7D%3E/_search"}, {"PUT", "/idx/_doc/%ZZ"},
		{"GET", "/_cluster/health/idx?wait_for_status=purple"}, {"POST", "/idx/_doc?op_type=bogus"},
		{"DELETE", "/idx/_doc/1?if_seq_no=-1&if_primary_term=0"}, {"GET", "/idx/_search?track_total_hits=x&from=-1"},
		{"PUT", "/idx/_doc/2"}, {"POST", "/other/_doc"}, {"POST", "/idx/_update/1"}, {"PUT", "/idx/_doc/%2E%2E"},
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
		rec := serve(srv, method, target, body)
		checkResponse(t, rec, method)
		checkWritePromise(t, srv, method, rec)
	})
}

// checkWritePromise checks what a 2xx document write promises: a PUT or
// POST answered with result created or updated names a document that GET
// then finds.
func checkWritePromise(t *testing.T, srv http.Handler, method string, rec *httptest.ResponseRecorder) {
	t.Helper()
	if (method != http.MethodPut && method != http.MethodPost) || rec.Code < 200 || rec.Code >= 300 {
		return
	}
	var w struct {
		Index  string `json:"_index"`
		ID     string `json:"_id"`
		Result string `json:"result"`
	}
	if json.Unmarshal(rec.Body.Bytes(), &w) != nil || (w.Result != "created" && w.Result != "updated") || w.Index == "" || w.ID == "" {
		return
	}
	if strings.ContainsRune(w.Index+w.ID, utf8.RuneError) {
		return // a name that is not UTF-8 comes back in JSON as U+FFFD: the answer cannot name the document to read back
	}
	get := serve(srv, http.MethodGet, "/"+url.PathEscape(w.Index)+"/_doc/"+pathSegment(w.ID), "")
	var doc struct {
		Found bool `json:"found"`
	}
	if get.Code != http.StatusOK || json.Unmarshal(get.Body.Bytes(), &doc) != nil || !doc.Found {
		t.Fatalf("%s answered %d result %s for %s/%s, GET answers %d: %s", method, rec.Code, w.Result, w.Index, w.ID, get.Code, get.Body.String())
	}
}
