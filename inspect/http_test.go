package inspect

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/elastic/go-elasticsearch/v8"
)

// TestHandlerNamesTheField sends the requests the handler refuses before
// it reads anything and checks each is a 400 problem naming the field at
// fault, as the command and admin APIs answer.
func TestHandlerNamesTheField(t *testing.T) {
	h := (&Inspector{}).Handler() // refused before any dependency is used
	for _, tc := range []struct {
		name, target, field string
	}{
		{"limit not a number", AggregatePath + "Order/o-1?limit=abc", "limit"},
		{"limit negative", AggregatePath + "Order/o-1?limit=-1", "limit"},
		{"limit zero", AggregatePath + "Order/o-1?limit=0", "limit"},
		{"limit over the page size", AggregatePath + "Order/o-1?limit=501", "limit"},
		{"limit beyond int64", AggregatePath + "Order/o-1?limit=99999999999999999999", "limit"},
		{"limit empty", AggregatePath + "Order/o-1?limit=", "limit"},
		{"limit given twice", AggregatePath + "Order/o-1?limit=1&limit=2", "limit"},
		{"limit that does not decode", AggregatePath + "Order/o-1?limit=%ZZ", "limit"},
		{"from_seq not a number", AggregatePath + "Order/o-1?from_seq=x", "from_seq"},
		{"from_seq negative", AggregatePath + "Order/o-1?from_seq=-1", "from_seq"},
		{"a bad aggregate type", AggregatePath + "Order:x/o-1", "aggregate_type"},
		{"an aggregate type no event can have", AggregatePath + "Ord%20er!/o-1", "aggregate_type"},
		{"an aggregate type starting with a digit", AggregatePath + "1Order/o-1", "aggregate_type"},
		{"an empty aggregate id", AggregatePath + "Order/", "aggregate_id"},
		{"no aggregate id", AggregatePath + "Order", "aggregate_id"},
		{"an empty trace id", TracePath + "%20", "id"},
		{"a bad trace query", TracePath + "abc?x=%ZZ", "x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.target, nil))
			var p struct {
				Status int    `json:"status"`
				Field  string `json:"field"`
				Detail string `json:"detail"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
				t.Fatalf("%s: %d %s: %v", tc.target, rec.Code, rec.Body, err)
			}
			if rec.Code != http.StatusBadRequest || p.Status != 400 || p.Field != tc.field || p.Detail == "" ||
				rec.Header().Get("Content-Type") != "application/problem+json" {
				t.Errorf("%s: %d %s %s; want a 400 problem naming %q", tc.target, rec.Code, rec.Header().Get("Content-Type"), rec.Body, tc.field)
			}
		})
	}
}

// TestGetDocEscapesDotIDs checks a document id of "." or ".." reaches
// Elasticsearch as %2E / %2E%2E: sent as written, the request path's dot
// segment names the index or the index list instead of the document.
func TestGetDocEscapesDotIDs(t *testing.T) {
	paths := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Elastic-Product", "Elasticsearch")
		if r.URL.Path == "/" {
			_, _ = w.Write([]byte(`{"version":{"number":"8.15.0","build_flavor":"default"},"tagline":"You Know, for Search"}`))
			return
		}
		paths <- r.URL.EscapedPath()
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"_index":"idx","_id":"x","found":false}`))
	}))
	defer srv.Close()
	es, err := elasticsearch.NewClient(elasticsearch.Config{Addresses: []string{srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	in := &Inspector{o: settings{ES: es}}
	for id, want := range map[string]string{
		".":   "/idx/_doc/%2E",
		"..":  "/idx/_doc/%2E%2E",
		"a/b": "/idx/_doc/a%2Fb",
		"...": "/idx/_doc/...",
	} {
		t.Run(id, func(t *testing.T) {
			d, err := in.getDoc(context.Background(), "idx", id)
			if err != nil || d.Found || d.ID != id {
				t.Fatalf("getDoc(%q) = %+v, %v", id, d, err)
			}
			if got := <-paths; got != want {
				t.Errorf("getDoc(%q) sent path %s, want %s", id, got, want)
			}
		})
	}
}

// A request the two routes do not take is a problem+json, as the admin
// API answers: another method is 405 with Allow, a path short of or past
// the route's segments 404, /aggregates/{type} 400 (they were the
// router's text/plain, and /aggregates/{type} a redirect).
func TestHandlerAnswersProblems(t *testing.T) {
	h := (&Inspector{}).Handler()
	for _, tc := range []struct {
		method, target string
		status         int
		allow          string
	}{
		{http.MethodPost, TracePath + "abc", 405, "GET, HEAD"},
		{http.MethodDelete, AggregatePath + "Order/o-1", 405, "GET, HEAD"},
		{http.MethodGet, TracePath, 404, ""},
		{http.MethodGet, TracePath + "a/b", 404, ""},
		{http.MethodGet, AggregatePath, 404, ""},
		{http.MethodGet, AggregatePath + "Order", 400, ""},
	} {
		t.Run(tc.method+" "+tc.target, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.target, nil))
			var p struct {
				Status int    `json:"status"`
				Code   string `json:"code"`
			}
			err := json.Unmarshal(rec.Body.Bytes(), &p)
			if err != nil || rec.Code != tc.status || p.Status != tc.status || p.Code == "" || rec.Header().Get("Allow") != tc.allow ||
				rec.Header().Get("Content-Type") != "application/problem+json" {
				t.Errorf("%s %s: %d %q Allow %q %s; want a %d problem", tc.method, tc.target, rec.Code, rec.Header().Get("Content-Type"), rec.Header().Get("Allow"), rec.Body, tc.status)
			}
		})
	}
}
