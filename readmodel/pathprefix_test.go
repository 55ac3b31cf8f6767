package readmodel_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/readmodel"
)

// A document id reaches Elasticsearch as the one path segment the client
// escaped, with or without a path prefix in ELASTICSEARCH_URLS (a reverse
// proxy's /es). Without PrefixEscaping, go-elasticsearch joins the prefix
// and net/url re-escapes the path, so "a/b" arrived as /es/i/_doc/a/b.
func TestPathPrefixKeepsEscaping(t *testing.T) {
	var (
		mu  sync.Mutex
		got string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.RequestURI
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Elastic-Product", "Elasticsearch")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"_index":"i","_id":"x","found":false}`))
	}))
	defer srv.Close()

	ids := []struct{ name, id, want string }{
		{"slash", "a/b", "a%2Fb"},
		{"percent", "100%", "100%25"},
		{"question mark", "a?b", "a%3Fb"},
		{"space", "a b", "a%20b"},
		{"plain", "order-1", "order-1"},
		{"colon and unicode", "db:Class:ü/1", "db:Class:%C3%BC%2F1"},
	}
	prefixes := []struct{ name, prefix, want string }{
		{"no prefix", "", ""},
		{"prefix", "/es", "/es"},
		{"prefix with a trailing slash", "/es/", "/es"},
		{"two segments", "/proxy/es", "/proxy/es"},
		{"prefix that needs escaping", "/my es", "/my%20es"},
	}
	for _, p := range prefixes {
		t.Run(p.name, func(t *testing.T) {
			es, err := readmodel.NewClient(readmodel.Config{URLs: []string{srv.URL + p.prefix}})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range ids {
				t.Run(c.name, func(t *testing.T) {
					res, err := es.Get("i", url.PathEscape(c.id))
					if err != nil {
						t.Fatal(err)
					}
					_ = res.Body.Close()
					mu.Lock()
					defer mu.Unlock()
					if want := p.want + "/i/_doc/" + c.want; got != want {
						t.Errorf("request URI %q, want %q", got, want)
					}
				})
			}
		})
	}
}
