package esserver_test

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/esserver"
)

// TestCat checks the _cat endpoints as a person or a script reads them:
// Elasticsearch's columns, a header line with v, column choice with h
// (names and short names), sorting with s, an index or alias argument in
// the path, and format=json for every one of them.
func TestCat(t *testing.T) {
	clock := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	srv := esserver.New(esserver.WithClock(func() time.Time { return clock }), esserver.WithClusterName("c1"))
	for _, c := range []call{
		{"PUT", "/orders", `{"aliases":{"paid":{"filter":{"term":{"s":"1"}}},"w":{"is_write_index":true,"routing":"r1"}}}`},
		{"PUT", "/logs", `{"settings":{"number_of_shards":2,"number_of_replicas":0}}`},
		{"PUT", "/orders/_doc/1", `{"s":"1"}`},
		{"PUT", "/orders/_doc/2", `{"s":"2"}`},
	} {
		if code, m, _ := doReq(t, srv, c); code >= 300 {
			t.Fatalf("%s %s: %d %v", c.method, c.path, code, m)
		}
	}
	cases := []struct {
		name, path string
		status     int
		want       string
	}{
		{"indices, header and short names", "/_cat/indices?v&h=i,pri,rep,dc,dd&s=i", 200,
			"i      pri rep dc dd\nlogs     2   0  0  0\norders   1   1  2  0\n"},
		{"indices, all default columns", "/_cat/indices?h=*&s=index:desc&bytes=b", 200, ""},
		{"indices of one index", "/_cat/indices/ord*?h=index,docs.count,store.size&bytes=b&format=json", 200,
			`[{"index":"orders","docs.count":"2","store.size":"18"}]`},
		{"indices sorted by a number", "/_cat/indices?h=index&s=pri:desc", 200, "logs\norders\n"},
		{"indices of a missing index", "/_cat/indices/nope", 404, ""},
		{"indices sorted by an unknown column", "/_cat/indices?s=nope", 400, ""},
		{"aliases", "/_cat/aliases?v", 200,
			"alias index  filter routing.index routing.search is_write_index\npaid  orders *      -             -              -\nw     orders -      r1            r1             true\n"},
		{"aliases by name as JSON", "/_cat/aliases/pa*?format=json", 200,
			`[{"alias":"paid","index":"orders","filter":"*","routing.index":"-","routing.search":"-","is_write_index":"-"}]`},
		{"health", "/_cat/health?h=epoch,timestamp,cluster,status,shards,pri,active_shards_percent", 200,
			"1714979289 07:08:09 c1 green 3 3 100.0%\n"},
		{"health as JSON", "/_cat/health?format=json&h=cluster,status,node.total", 200,
			`[{"cluster":"c1","status":"green","node.total":"1"}]`},
		{"count", "/_cat/count?v", 200, "     epoch timestamp count\n1714979289 07:08:09      2\n"},
		{"count through a filtered alias", "/_cat/count/paid?h=count", 200, "1\n"},
		{"count of a missing index", "/_cat/count/nope", 404, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			srv.ServeHTTP(rec, httptest.NewRequest("GET", tc.path, nil))
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.status, rec.Body.String())
			}
			if tc.want != "" && rec.Body.String() != tc.want {
				t.Fatalf("body\n%q\nwant\n%q", rec.Body.String(), tc.want)
			}
			if tc.name == "indices, all default columns" {
				cols := "health status index uuid pri rep docs.count docs.deleted creation.date creation.date.string store.size pri.store.size dataset.size"
				if rows := strings.Split(strings.TrimSpace(rec.Body.String()), "\n"); len(rows) != 2 || len(strings.Fields(rows[0])) != len(strings.Fields(cols)) {
					t.Fatalf("want 2 rows of the %d columns %s: %q", len(strings.Fields(cols)), cols, rec.Body.String())
				}
			}
		})
	}
}
