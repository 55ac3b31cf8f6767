package esserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/esserver"
)

type call struct {
	method, path, body string
}

func doReq(t testing.TB, h http.Handler, c call) (int, map[string]any, http.Header) {
	t.Helper()
	req := httptest.NewRequest(c.method, c.path, strings.NewReader(c.body))
	if c.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var m map[string]any
	if rec.Body.Len() > 0 {
		if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
			t.Fatalf("%s %s: response is not a JSON object: %v: %s", c.method, c.path, err, rec.Body.String())
		}
	}
	return rec.Code, m, rec.Header()
}

// get walks a dotted path.
func get(m map[string]any, path string) any {
	var cur any = m
	for _, p := range strings.Split(path, ".") {
		switch c := cur.(type) {
		case map[string]any:
			cur = c[p]
		case []any:
			i := 0
			for _, ch := range p {
				i = i*10 + int(ch-'0')
			}
			if i >= len(c) {
				return nil
			}
			cur = c[i]
		default:
			return nil
		}
	}
	return cur
}

func TestServerBehaviour(t *testing.T) {
	tests := []struct {
		name   string
		setup  []call
		call   call
		status int
		want   map[string]any // dotted path -> value
	}{
		{
			name:   "info",
			call:   call{"GET", "/", ""},
			status: 200,
			want:   map[string]any{"version.number": "8.15.0", "tagline": "You Know, for Search"},
		},
		{
			name:   "health",
			call:   call{"GET", "/_cluster/health?wait_for_status=yellow&timeout=1s", ""},
			status: 200,
			want:   map[string]any{"status": "green", "timed_out": false},
		},
		{
			name:   "uppercase index name",
			call:   call{"PUT", "/Bad", ""},
			status: 400,
			want:   map[string]any{"error.type": "invalid_index_name_exception", "error.reason": "Invalid index name [Bad], must be lowercase", "error.root_cause.0.index": "Bad", "status": 400.0},
		},
		{
			name:   "leading underscore",
			call:   call{"PUT", "/_bad", ""},
			status: 400,
			want:   map[string]any{"error.reason": "Invalid index name [_bad], must not start with '_', '-', or '+'"},
		},
		{
			name:   "invalid characters",
			call:   call{"PUT", "/a%2Ab", ""},
			status: 400,
			want:   map[string]any{"error.type": "invalid_index_name_exception"},
		},
		{
			name:   "index exists",
			setup:  []call{{"PUT", "/dup", ""}},
			call:   call{"PUT", "/dup", ""},
			status: 400,
			want:   map[string]any{"error.type": "resource_already_exists_exception"},
		},
		{
			name:   "create conflict",
			setup:  []call{{"PUT", "/docs/_doc/1", `{"a":1}`}},
			call:   call{"PUT", "/docs/_create/1", `{"a":2}`},
			status: 409,
			want: map[string]any{
				"error.type":   "version_conflict_engine_exception",
				"error.reason": "[1]: version conflict, document already exists (current version [1])",
				"error.shard":  "0", "error.index": "docs",
				"error.root_cause.0.type": "version_conflict_engine_exception",
			},
		},
		{
			name:   "seq_no conflict",
			setup:  []call{{"PUT", "/docs/_doc/1", `{"a":1}`}},
			call:   call{"PUT", "/docs/_doc/1?if_seq_no=5&if_primary_term=1", `{"a":2}`},
			status: 409,
			want:   map[string]any{"error.reason": "[1]: version conflict, required seqNo [5], primary term [1]. current document has seqNo [0] and primary term [1]"},
		},
		{
			name:   "external version conflict",
			setup:  []call{{"PUT", "/docs/_doc/1?version=2&version_type=external", `{"a":1}`}},
			call:   call{"PUT", "/docs/_doc/1?version=1&version_type=external", `{"a":2}`},
			status: 409,
			want:   map[string]any{"error.reason": "[1]: version conflict, current version [2] is higher or equal to the one provided [1]"},
		},
		{
			name:   "external version after delete tombstone",
			setup:  []call{{"PUT", "/docs/_doc/1?version=5&version_type=external", `{"a":1}`}, {"DELETE", "/docs/_doc/1?version=7&version_type=external", ""}},
			call:   call{"PUT", "/docs/_doc/1?version=6&version_type=external", `{"a":2}`},
			status: 409,
			want:   map[string]any{"error.reason": "[1]: version conflict, current version [7] is higher or equal to the one provided [6]"},
		},
		{
			name:   "internal version on write is rejected",
			call:   call{"PUT", "/docs/_doc/1?version=1", `{"a":1}`},
			status: 400,
			want:   map[string]any{"error.type": "action_request_validation_exception"},
		},
		{
			name:   "write response shape",
			call:   call{"PUT", "/docs/_doc/1?refresh=true", `{"a":1}`},
			status: 201,
			want:   map[string]any{"_index": "docs", "_id": "1", "_version": 1.0, "result": "created", "forced_refresh": true, "_shards.total": 2.0, "_shards.successful": 1.0, "_seq_no": 0.0, "_primary_term": 1.0},
		},
		{
			name:   "get missing doc",
			setup:  []call{{"PUT", "/docs", ""}},
			call:   call{"GET", "/docs/_doc/nope", ""},
			status: 404,
			want:   map[string]any{"_index": "docs", "_id": "nope", "found": false},
		},
		{
			name:   "get missing index",
			call:   call{"GET", "/nope/_doc/1", ""},
			status: 404,
			want:   map[string]any{"error.type": "index_not_found_exception", "error.reason": "no such index [nope]", "error.index": "nope", "error.root_cause.0.index_uuid": "_na_"},
		},
		{
			name:   "delete missing doc",
			setup:  []call{{"PUT", "/docs", ""}},
			call:   call{"DELETE", "/docs/_doc/1", ""},
			status: 404,
			want:   map[string]any{"result": "not_found", "_version": 1.0},
		},
		{
			name:   "source endpoint",
			setup:  []call{{"PUT", "/docs/_doc/1", `{"a":{"b":1,"c":2}}`}},
			call:   call{"GET", "/docs/_source/1?_source_includes=a.b", ""},
			status: 200,
			want:   map[string]any{"a.b": 1.0, "a.c": nil},
		},
		{
			name:   "update doc_as_upsert then noop",
			setup:  []call{{"POST", "/docs/_update/1", `{"doc":{"a":1},"doc_as_upsert":true}`}},
			call:   call{"POST", "/docs/_update/1", `{"doc":{"a":1}}`},
			status: 200,
			want:   map[string]any{"result": "noop", "_version": 1.0},
		},
		{
			name:   "bulk without trailing newline",
			call:   call{"POST", "/_bulk", `{"index":{"_index":"x"}}` + "\n" + `{"a":1}`},
			status: 400,
			want:   map[string]any{"error.type": "illegal_argument_exception", "error.reason": "The bulk request must be terminated by a newline [\\n]"},
		},
		{
			name:   "bulk invalid json",
			call:   call{"POST", "/_bulk", "{nope\n"},
			status: 400,
			want:   map[string]any{"error.type": "x_content_parse_exception"},
		},
		{
			name:   "bulk item errors",
			setup:  []call{{"PUT", "/b/_doc/1", `{"a":1}`}},
			call:   call{"POST", "/_bulk", `{"create":{"_index":"b","_id":"1"}}` + "\n{}\n" + `{"delete":{"_index":"b","_id":"2"}}` + "\n" + `{"update":{"_index":"b","_id":"3"}}` + "\n" + `{"doc":{"a":1}}` + "\n"},
			status: 200,
			want: map[string]any{
				"errors": true, "items.0.create.status": 409.0, "items.0.create.error.type": "version_conflict_engine_exception",
				"items.1.delete.status": 404.0, "items.1.delete.result": "not_found",
				"items.2.update.status": 404.0, "items.2.update.error.type": "document_missing_exception",
			},
		},
		{
			name:   "unknown endpoint",
			call:   call{"GET", "/idx/_nope", ""},
			status: 400,
			want:   map[string]any{"error.type": "illegal_argument_exception"},
		},
		{
			name:   "wrong method",
			call:   call{"PATCH", "/idx/_doc/1", ""},
			status: 405,
			want:   map[string]any{"status": 405.0},
		},
		{
			name:   "delete index through alias",
			setup:  []call{{"PUT", "/real", `{"aliases":{"al":{}}}`}},
			call:   call{"DELETE", "/al", ""},
			status: 400,
			want:   map[string]any{"error.reason": "The provided expression [al] matches an alias, specify the corresponding concrete indices instead."},
		},
		{
			name:   "write through alias without write index",
			setup:  []call{{"PUT", "/w1", `{"aliases":{"w":{}}}`}, {"PUT", "/w2", `{"aliases":{"w":{}}}`}},
			call:   call{"PUT", "/w/_doc/1", `{"a":1}`},
			status: 400,
			want:   map[string]any{"error.type": "illegal_argument_exception"},
		},
		{
			name:   "write through alias goes to write index",
			setup:  []call{{"PUT", "/w1", `{"aliases":{"w":{"is_write_index":true}}}`}, {"PUT", "/w2", `{"aliases":{"w":{}}}`}},
			call:   call{"PUT", "/w/_doc/1", `{"a":1}`},
			status: 201,
			want:   map[string]any{"_index": "w1"},
		},
		{
			name: "search through filtered alias",
			setup: []call{
				{"PUT", "/s", `{"aliases":{"red":{"filter":{"term":{"color":"red"}}}}}`},
				{"POST", "/_bulk?refresh=true", `{"index":{"_index":"s","_id":"1"}}` + "\n" + `{"color":"red","n":1}` + "\n" + `{"index":{"_index":"s","_id":"2"}}` + "\n" + `{"color":"blue","n":2}` + "\n"},
			},
			call:   call{"POST", "/red/_search", `{"query":{"match_all":{}}}`},
			status: 200,
			want:   map[string]any{"hits.total.value": 1.0, "hits.hits.0._id": "1"},
		},
		{
			name: "near real time with refresh disabled",
			setup: []call{
				{"PUT", "/nrt", `{"settings":{"refresh_interval":"-1"}}`},
				{"PUT", "/nrt/_doc/1", `{"a":1}`},
			},
			call:   call{"GET", "/nrt/_count", ""},
			status: 200,
			want:   map[string]any{"count": 0.0},
		},
		{
			name: "dynamic mapping",
			setup: []call{
				{"PUT", "/m/_doc/1", `{"s":"x y","n":1,"f":1.5,"b":true,"d":"2024-01-01T00:00:00Z","o":{"a":"b"}}`},
			},
			call:   call{"GET", "/m/_mapping", ""},
			status: 200,
			want: map[string]any{
				"m.mappings.properties.s.type": "text", "m.mappings.properties.s.fields.keyword.type": "keyword",
				"m.mappings.properties.n.type": "long", "m.mappings.properties.f.type": "float",
				"m.mappings.properties.b.type": "boolean", "m.mappings.properties.d.type": "date",
				"m.mappings.properties.o.properties.a.type": "text",
			},
		},
		{
			name: "search sort, from/size and source filtering",
			setup: []call{
				{"POST", "/_bulk", `{"index":{"_index":"q","_id":"1"}}` + "\n" + `{"n":3,"t":"the quick fox"}` + "\n" + `{"index":{"_index":"q","_id":"2"}}` + "\n" + `{"n":1,"t":"lazy dog"}` + "\n" + `{"index":{"_index":"q","_id":"3"}}` + "\n" + `{"n":2,"t":"quick dog"}` + "\n"},
			},
			call:   call{"POST", "/q/_search", `{"query":{"bool":{"should":[{"match":{"t":"quick"}},{"term":{"n":1}}]}},"sort":[{"n":"desc"}],"from":1,"size":1,"_source":["n"]}`},
			status: 200,
			want:   map[string]any{"hits.total.value": 3.0, "hits.hits.0._id": "3", "hits.hits.0._source.n": 2.0, "hits.hits.0._source.t": nil, "hits.hits.0.sort.0": 2.0},
		},
		{
			name:   "result window",
			setup:  []call{{"PUT", "/q", ""}},
			call:   call{"GET", "/q/_search?from=9995&size=10", ""},
			status: 400,
			want:   map[string]any{"error.type": "search_phase_execution_exception", "error.root_cause.0.type": "illegal_argument_exception"},
		},
		{
			name:   "unknown query",
			call:   call{"POST", "/_search", `{"query":{"nope":{}}}`},
			status: 400,
			want:   map[string]any{"error.type": "parsing_exception", "error.reason": "unknown query [nope]"},
		},
		{
			name:   "q parameter",
			setup:  []call{{"PUT", "/qs/_doc/1", `{"title":"Hello World","n":5}`}, {"PUT", "/qs/_doc/2", `{"title":"bye","n":6}`}},
			call:   call{"GET", "/qs/_search?q=title:hello", ""},
			status: 200,
			want:   map[string]any{"hits.total.value": 1.0, "hits.hits.0._id": "1"},
		},
		{
			// enabled: false (the projections' sluice bookkeeping): kept in
			// _source, nothing inside is parsed, mapped or indexed.
			name: "enabled false maps nothing inside",
			setup: []call{
				{"PUT", "/d", `{"mappings":{"properties":{"meta":{"type":"object","enabled":false},"n":{"type":"long"}}}}`},
				{"PUT", "/d/_doc/1", `{"n":1,"meta":{"Order:o-1":3,"deep":{"x":"2026-01-01"}}}`},
			},
			call:   call{"GET", "/d/_mapping", ""},
			status: 200,
			want:   map[string]any{"d.mappings.properties.meta.enabled": false, "d.mappings.properties.meta.properties": nil, "d.mappings.properties.n.type": "long"},
		},
		{
			name: "enabled false validates nothing inside",
			setup: []call{
				{"PUT", "/d", `{"mappings":{"properties":{"meta":{"type":"object","enabled":false}}}}`},
			},
			call:   call{"PUT", "/d/_doc/1", `{"meta":{"y":[1,"a",{"z":true}],"":0}}`},
			status: 201,
			want:   map[string]any{"result": "created"},
		},
		{
			name: "enabled false accepts any value and keeps it",
			setup: []call{
				{"PUT", "/d", `{"mappings":{"properties":{"meta":{"type":"object","enabled":false}}}}`},
				{"PUT", "/d/_doc/1", `{"meta":"not an object"}`},
			},
			call:   call{"GET", "/d/_doc/1", ""},
			status: 200,
			want:   map[string]any{"found": true, "_source.meta": "not an object"},
		},
		{
			name: "enabled false fields are not searchable",
			setup: []call{
				{"PUT", "/d", `{"mappings":{"properties":{"meta":{"type":"object","enabled":false}}}}`},
				{"PUT", "/d/_doc/1?refresh=true", `{"meta":{"k":"v"}}`},
			},
			call:   call{"POST", "/d/_search", `{"query":{"term":{"meta.k":"v"}}}`},
			status: 200,
			want:   map[string]any{"hits.total.value": 0.0},
		},
		{
			name: "enabled false on the whole mapping",
			setup: []call{
				{"PUT", "/d", `{"mappings":{"enabled":false}}`},
				{"PUT", "/d/_doc/1", `{"a":{"b":1},"c":"x"}`},
			},
			call:   call{"GET", "/d/_mapping", ""},
			status: 200,
			want:   map[string]any{"d.mappings.properties": nil, "d.mappings.enabled": false},
		},
		{
			name: "atomic aliases failure leaves state",
			setup: []call{
				{"PUT", "/a1", `{"aliases":{"cur":{}}}`},
				{"POST", "/_aliases", `{"actions":[{"remove":{"index":"a1","alias":"cur"}},{"add":{"index":"nope","alias":"cur"}}]}`},
			},
			call:   call{"GET", "/_alias/cur", ""},
			status: 200,
			want:   map[string]any{"a1.aliases.cur": map[string]any{}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := esserver.New()
			for _, c := range tc.setup {
				doReq(t, srv, c)
			}
			status, body, hdr := doReq(t, srv, tc.call)
			if hdr.Get("X-Elastic-Product") != "Elasticsearch" {
				t.Errorf("missing X-Elastic-Product header")
			}
			if status != tc.status {
				t.Fatalf("status %d, want %d: %v", status, tc.status, body)
			}
			for path, want := range tc.want {
				got := get(body, path)
				gb, _ := json.Marshal(got)
				wb, _ := json.Marshal(want)
				if string(gb) != string(wb) {
					t.Errorf("%s = %s, want %s (body %v)", path, gb, wb, body)
				}
			}
		})
	}
}

// TestFaultDelay: a delay holds its request until it has passed, then
// serves it normally; or until the request's context ends. On the bubble's
// fake clock (testing/synctest), so nothing is timed: synctest.Wait
// returns once the request is blocked for good — in the delay — or done.
func TestFaultDelay(t *testing.T) {
	srv := esserver.New()
	normal, _, _ := doReq(t, srv, call{"GET", "/slow/_count", ""}) // the answer without the fault
	const delay = time.Hour
	serve := func(ctx context.Context) <-chan int {
		out := make(chan int, 1)
		go func() {
			rec := httptest.NewRecorder()
			srv.ServeHTTP(rec, httptest.NewRequest("GET", "/slow/_count", nil).WithContext(ctx))
			out <- rec.Code
		}()
		return out
	}
	answered := func(ch <-chan int) (int, bool) {
		select {
		case s := <-ch:
			return s, true
		default:
			return 0, false
		}
	}
	t.Run("until it has passed", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			remove := srv.InjectFault(esserver.Fault{Match: esserver.MatchPath("", "/slow"), Delay: delay, Times: 1})
			defer remove()
			start := time.Now()
			held := serve(context.Background())
			synctest.Wait()
			if s, ok := answered(held); ok {
				t.Fatalf("answered %d before its delay passed", s)
			}
			time.Sleep(delay - time.Nanosecond)
			synctest.Wait()
			if s, ok := answered(held); ok {
				t.Fatalf("answered %d a nanosecond before its delay passed", s)
			}
			time.Sleep(time.Nanosecond)
			synctest.Wait()
			s, ok := answered(held)
			if !ok || s != normal {
				t.Fatalf("after the delay (%s on the fake clock): answered %v status %d, want %d (served normally)", time.Since(start), ok, s, normal)
			}
		})
	})
	t.Run("until its context ends", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			remove := srv.InjectFault(esserver.Fault{Match: esserver.MatchPath("", "/slow"), Delay: delay, Times: 1})
			defer remove()
			ctx, cancel := context.WithCancel(context.Background())
			held := serve(ctx)
			synctest.Wait()
			if s, ok := answered(held); ok {
				t.Fatalf("answered %d before its delay or its context ended", s)
			}
			cancel()
			synctest.Wait()
			if s, ok := answered(held); !ok || s != normal {
				t.Fatalf("after its context ended: answered %v status %d, want %d (served normally)", ok, s, normal)
			}
		})
	})
}

func TestFaultInjection(t *testing.T) {
	srv := esserver.New()
	remove := srv.InjectFault(esserver.Fault{Match: esserver.MatchPath("GET", "/_search"), Status: http.StatusTooManyRequests, Times: 2})
	defer remove()
	for i, want := range []int{429, 429, 200} {
		status, body, _ := doReq(t, srv, call{"GET", "/_search", ""})
		if status != want {
			t.Fatalf("call %d: status %d want %d", i, status, want)
		}
		if want == 429 && get(body, "error.type") != "es_rejected_execution_exception" {
			t.Fatalf("429 body %v", body)
		}
	}
	srv.ClearFaults()
	srv.InjectFault(esserver.Fault{BulkItemStatus: 429})
	status, body, _ := doReq(t, srv, call{"POST", "/_bulk", `{"index":{"_index":"x","_id":"1"}}` + "\n{}\n"})
	if status != 200 || get(body, "items.0.index.status") != 429.0 {
		t.Fatalf("bulk item fault: %d %v", status, body)
	}
	// Faults limited to bulk items do not affect other requests.
	if status, _, _ := doReq(t, srv, call{"GET", "/", ""}); status != 200 {
		t.Fatalf("info status %d", status)
	}
}

func TestConcurrentWritesAndSearches(t *testing.T) {
	srv := esserver.New()
	done := make(chan struct{})
	for w := 0; w < 4; w++ {
		go func(w int) {
			defer func() { done <- struct{}{} }()
			for i := 0; i < 50; i++ {
				doReq(t, srv, call{"POST", "/c/_doc", `{"w":1}`})
				doReq(t, srv, call{"GET", "/c/_search", ""})
			}
		}(w)
	}
	for i := 0; i < 4; i++ {
		<-done
	}
	_, body, _ := doReq(t, srv, call{"GET", "/c/_count", ""})
	if body["count"] != 200.0 {
		t.Fatalf("count %v", body["count"])
	}
}

// The write log records every document write with the status the server
// answered: bulk items (applied, version conflict, injected 429) and
// single-document writes; other requests pass through unrecorded.
func TestWriteLog(t *testing.T) {
	srv := esserver.New()
	var seen []esserver.Write
	log := esserver.NewWriteLog(func(w esserver.Write) { seen = append(seen, w) })
	h := log.Wrap(srv)
	bulk := `{"index":{"_index":"x","_id":"a","version":3,"version_type":"external"}}` + "\n{}\n" +
		`{"index":{"_index":"x","_id":"a","version":3,"version_type":"external"}}` + "\n{}\n"
	if status, _, _ := doReq(t, h, call{"POST", "/_bulk", bulk}); status != 200 {
		t.Fatalf("bulk status %d", status)
	}
	if status, _, _ := doReq(t, h, call{"PUT", "/x/_doc/b", `{"n":1}`}); status != 201 {
		t.Fatalf("put status %d", status)
	}
	srv.InjectFault(esserver.Fault{BulkItemStatus: 429, Times: 1})
	doReq(t, h, call{"POST", "/_bulk", `{"index":{"_index":"x","_id":"c"}}` + "\n{}\n"})
	doReq(t, h, call{"GET", "/x/_doc/a", ""})
	// every bulk action is a write
	doReq(t, h, call{"POST", "/_bulk", `{"create":{"_index":"x","_id":"d"}}` + "\n{}\n" +
		`{"update":{"_index":"x","_id":"d"}}` + "\n" + `{"doc":{"n":2}}` + "\n" + `{"delete":{"_index":"x","_id":"d"}}` + "\n"})
	// A single-document conflict answers an error body without _id.
	if status, _, _ := doReq(t, h, call{"PUT", "/x/_doc/a?version=2&version_type=external", `{}`}); status != 409 {
		t.Fatalf("stale put status %d", status)
	}
	if n := log.Unparsed(); n != 0 {
		t.Errorf("%d answers not read", n)
	}
	got := log.Writes()
	want := []struct {
		id      string
		version int64
		status  int
		ok      bool
	}{{"a", 3, 201, true}, {"a", 0, 409, false}, {"b", 1, 201, true}, {"c", 0, 429, false},
		{"d", 1, 201, true}, {"d", 2, 200, true}, {"d", 3, 200, true}, {"a", 0, 409, false}} // error items carry no _version
	if len(got) != len(want) || len(seen) != len(want) {
		t.Fatalf("recorded %+v (observed %d), want %d writes", got, len(seen), len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Index != "x" || g.ID != w.id || g.Version != w.version || g.Status != w.status || g.OK() != w.ok || g.At.IsZero() {
			t.Errorf("write %d: %+v, want %+v", i, g, w)
		}
	}
}

// TestContentType checks the Content-Type rules Elasticsearch 8's
// RestController applies to a request with a body.
func TestContentType(t *testing.T) {
	const (
		doc  = `{"a":1}`
		bulk = "{\"index\":{\"_index\":\"ct\",\"_id\":\"1\"}}\n{\"a\":1}\n"
	)
	cases := []struct {
		name, method, path, body string
		ct                       []string // Content-Type header values; none when nil
		status                   int
		want                     string // the exact body, when set
	}{
		{"json doc", "PUT", "/ct/_doc/1", doc, []string{"application/json"}, 201, ""},
		{"json charset", "PUT", "/ct/_doc/1", doc, []string{"application/json; charset=UTF-8"}, 201, ""},
		{"upper case", "PUT", "/ct/_doc/1", doc, []string{"Application/JSON"}, 201, ""},
		{"ndjson bulk", "POST", "/_bulk", bulk, []string{"application/x-ndjson"}, 200, ""},
		{"vendor json", "PUT", "/ct/_doc/1", doc, []string{"application/vnd.elasticsearch+json;compatible-with=8"}, 201, ""},
		{"vendor ndjson", "POST", "/_bulk", bulk, []string{"application/vnd.elasticsearch+x-ndjson; compatible-with=8"}, 200, ""},
		{"application wildcard", "PUT", "/ct/_doc/1", doc, []string{"application/*"}, 201, ""},
		{"no body no type", "GET", "/", "", nil, 200, ""},
		{"text/plain bulk", "POST", "/_bulk", bulk, []string{"text/plain"}, 406,
			`{"error":"Content-Type header [text/plain] is not supported","status":406}`},
		{"text/plain doc", "PUT", "/ct/_doc/1", doc, []string{"text/plain; charset=UTF-8"}, 406,
			`{"error":"Content-Type header [text/plain; charset=UTF-8] is not supported","status":406}`},
		{"form", "POST", "/ct/_doc", doc, []string{"application/x-www-form-urlencoded"}, 406,
			`{"error":"Content-Type header [application/x-www-form-urlencoded] is not supported","status":406}`},
		{"multipart", "POST", "/_bulk", bulk, []string{"multipart/form-data"}, 406,
			`{"error":"Content-Type header [multipart/form-data] is not supported","status":406}`},
		{"xml", "PUT", "/ct/_doc/1", doc, []string{"application/xml"}, 406,
			`{"error":"Content-Type header [application/xml] is not supported","status":406}`},
		{"other +json", "PUT", "/ct/_doc/1", doc, []string{"application/merge-patch+json"}, 406,
			`{"error":"Content-Type header [application/merge-patch+json] is not supported","status":406}`},
		{"missing", "POST", "/_bulk", bulk, nil, 406,
			`{"error":"Content-Type header is missing","status":406}`},
		{"yaml", "PUT", "/ct/_doc/1", "a: 1\n", []string{"application/yaml"}, 406, ""},
		{"two headers", "PUT", "/ct/_doc/1", doc, []string{"application/json", "application/json"}, 400, ""},
		{"two headers without a body", "GET", "/", "", []string{"application/json", "text/plain"}, 400, ""},
		{"empty header", "PUT", "/ct/_doc/1", doc, []string{" "}, 400, ""},
		{"empty header without a body", "GET", "/", "", []string{""}, 400, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := esserver.New()
			req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
			for _, v := range tc.ct {
				req.Header.Add("Content-Type", v)
			}
			rec := httptest.NewRecorder()
			srv.ServeHTTP(rec, req)
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.status, rec.Body.String())
			}
			if tc.want != "" && rec.Body.String() != tc.want {
				t.Fatalf("body %s, want %s", rec.Body.String(), tc.want)
			}
			if tc.status == http.StatusBadRequest {
				// Elasticsearch's reasons for a header it cannot read.
				reason := "Header [Content-Type] cannot be empty."
				if len(tc.ct) > 1 {
					reason = "Incorrect header [Content-Type]. Only one value should be provided"
				}
				if b := rec.Body.String(); !strings.Contains(b, `"type":"illegal_argument_exception"`) || !strings.Contains(b, reason) {
					t.Fatalf("body %s, want an illegal_argument_exception: %s", b, reason)
				}
			}
			if got := rec.Header().Get("X-Elastic-Product"); got != "Elasticsearch" {
				t.Fatalf("X-Elastic-Product %q", got)
			}
		})
	}
}

// TestSourceParam checks a body sent as the source query parameter:
// Elasticsearch 8 takes it only together with source_content_type, and
// reads it as a body of that Content-Type.
func TestSourceParam(t *testing.T) {
	const q = `{"query":{"term":{"k":"b"}}}`
	cases := []struct {
		name, params string
		status       int
		typ, reason  string // the error's, when status is not 200
		total        float64
	}{
		{"with a JSON type", "source_content_type=application/json", 200, "", "", 1},
		{"with parameters", "source_content_type=application/json%3B+charset=UTF-8", 200, "", "", 1},
		{"vendor type", "source_content_type=application/vnd.elasticsearch%2Bjson%3Bcompatible-with=8", 200, "", "", 1},
		{"without a type", "", 400, "validation_exception",
			"Validation Failed: 1: source and source_content_type parameters are required;", 0},
		{"unknown type", "source_content_type=text/plain", 400, "validation_exception",
			"Validation Failed: 1: Unknown value for source_content_type [text/plain];", 0},
		{"malformed type", "source_content_type=json", 400, "illegal_argument_exception",
			"invalid Content-Type header [json]", 0},
		{"YAML", "source_content_type=application/yaml", 406, "media_type_header_exception",
			"source_content_type [application/yaml] is not supported by this test server (JSON only)", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := esserver.New()
			for _, id := range []string{"1", "2"} {
				if code, m, _ := doReq(t, srv, call{"PUT", "/s/_doc/" + id + "?refresh=true", `{"k":"` + map[string]string{"1": "a", "2": "b"}[id] + `"}`}); code != 201 {
					t.Fatalf("index: %d %v", code, m)
				}
			}
			path := "/s/_search?source=" + url.QueryEscape(q)
			if tc.params != "" {
				path += "&" + tc.params
			}
			code, m, _ := doReq(t, srv, call{"GET", path, ""})
			if code != tc.status {
				t.Fatalf("status %d, want %d: %v", code, tc.status, m)
			}
			if tc.status == 200 {
				if got := get(m, "hits.total.value"); got != tc.total {
					t.Fatalf("hits.total.value %v, want %v: %v", got, tc.total, m)
				}
				return
			}
			if typ, reason := get(m, "error.type"), get(m, "error.reason"); typ != tc.typ || reason != tc.reason {
				t.Fatalf("error %v: %v, want %s: %s", typ, reason, tc.typ, tc.reason)
			}
		})
	}
}

// TestQueryUnknownParams checks that a query's unknown parameter is
// refused as Elasticsearch 8 refuses it, not ignored: a misspelt
// "operator" or "value" would otherwise change the hits without a word.
// A known one that changes the answer (match's lenient) is honoured.
func TestQueryUnknownParams(t *testing.T) {
	cases := []struct {
		name, query string
		status      int
		typ, reason string
	}{
		{"term value object", `{"term":{"k":{"value":"a b","boost":2,"_name":"n","case_insensitive":true}}}`, 200, "", ""},
		{"term typo", `{"term":{"k":{"value":"a b","boots":2}}}`, 400, "parsing_exception", "[term] query does not support [boots]"},
		{"match options", `{"match":{"t":{"query":"a","operator":"and","minimum_should_match":1,"lenient":true,"fuzziness":"AUTO"}}}`, 200, "", ""},
		{"match typo", `{"match":{"t":{"query":"a b","operater":"and"}}}`, 400, "parsing_exception", "[match] query does not support [operater]"},
		{"match_phrase operator", `{"match_phrase":{"t":{"query":"a b","operator":"and"}}}`, 400, "parsing_exception", "[match_phrase] query does not support [operator]"},
		{"match_phrase slop", `{"match_phrase":{"t":{"query":"a b","slop":1}}}`, 200, "", ""},
		{"match_phrase_prefix typo", `{"match_phrase_prefix":{"t":{"query":"a b","max_expansion":5}}}`, 400, "parsing_exception", "[match_phrase_prefix] query does not support [max_expansion]"},
		{"exists typo", `{"exists":{"field":"k","fields":"t"}}`, 400, "parsing_exception", "[exists] query does not support [fields]"},
		{"prefix typo", `{"prefix":{"k":{"value":"a","case_insensitve":true}}}`, 400, "parsing_exception", "[prefix] query does not support [case_insensitve]"},
		{"prefix by its name", `{"prefix":{"k":{"prefix":"a"}}}`, 200, "", ""},
		{"wildcard typo", `{"wildcard":{"k":{"value":"a*","rewrite":"x","foo":1}}}`, 400, "parsing_exception", "[wildcard] query does not support [foo]"},
		{"regexp flags", `{"regexp":{"k":{"value":"a.*","flags":"ALL"}}}`, 200, "", ""},
		{"ids typo", `{"ids":{"value":["1"]}}`, 400, "x_content_parse_exception", "[ids] unknown field [value]"},
		{"match text on a number", `{"match":{"n":"abc"}}`, 400, "search_phase_execution_exception", "all shards failed"},
		{"lenient match text on a number", `{"match":{"n":{"query":"abc","lenient":true}}}`, 200, "", ""},
	}
	srv := esserver.New()
	if code, m, _ := doReq(t, srv, call{"PUT", "/q", `{"mappings":{"properties":{"k":{"type":"keyword"},"t":{"type":"text"},"n":{"type":"long"}}}}`}); code != 200 {
		t.Fatalf("create: %d %v", code, m)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, m, _ := doReq(t, srv, call{"POST", "/q/_search", `{"query":` + tc.query + `}`})
			if code != tc.status {
				t.Fatalf("status %d, want %d: %v", code, tc.status, m)
			}
			if tc.status != 200 {
				if typ, reason := get(m, "error.type"), get(m, "error.reason"); typ != tc.typ || reason != tc.reason {
					t.Fatalf("error %v: %v, want %s: %s", typ, reason, tc.typ, tc.reason)
				}
			}
		})
	}
}

// TestQueryStringSemicolon checks that a ';' in the query string is a
// literal character, as in Elasticsearch, not a 400.
func TestQueryStringSemicolon(t *testing.T) {
	cases := []struct {
		name, path string
		total      float64
	}{
		{"q with a semicolon", "/sc/_search?q=k:%22a;b%22", 1},
		{"source_content_type with a charset", "/sc/_search?source=" + url.QueryEscape(`{"query":{"term":{"k.keyword":"a;b"}}}`) +
			"&source_content_type=application/json;charset=UTF-8", 1},
		{"unescaped term", "/sc/_search?q=k:c&_source=k;x", 0},
	}
	srv := esserver.New()
	if code, m, _ := doReq(t, srv, call{"PUT", "/sc/_doc/1?refresh=true", `{"k":"a;b"}`}); code != 201 {
		t.Fatalf("index: %d %v", code, m)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, m, _ := doReq(t, srv, call{"GET", tc.path, ""})
			if code != 200 {
				t.Fatalf("status %d, want 200: %v", code, m)
			}
			if got := get(m, "hits.total.value"); got != tc.total {
				t.Fatalf("hits.total.value %v, want %v: %v", got, tc.total, m)
			}
		})
	}
}

// TestSearchParamValues checks that _search refuses a search_type or a
// boolean parameter value Elasticsearch 8 refuses, rather than ignoring it.
func TestSearchParamValues(t *testing.T) {
	cases := []struct {
		name, params string
		status       int
		reason       string
	}{
		{"query_then_fetch", "search_type=query_then_fetch", 200, ""},
		{"dfs_query_then_fetch", "search_type=dfs_query_then_fetch", 200, ""},
		{"unknown search_type", "search_type=scan", 400, "No search type for [scan]"},
		{"version", "version=true", 200, ""},
		{"version not a boolean", "version=yes", 400, "Failed to parse value [yes] as only [true] or [false] are allowed."},
		{"seq_no_primary_term not a boolean", "seq_no_primary_term=1", 400, "Failed to parse value [1] as only [true] or [false] are allowed."},
		{"track_scores not a boolean", "track_scores=on", 400, "Failed to parse value [on] as only [true] or [false] are allowed."},
	}
	srv := esserver.New()
	if code, m, _ := doReq(t, srv, call{"PUT", "/sp/_doc/1", `{"k":"a"}`}); code != 201 {
		t.Fatalf("index: %d %v", code, m)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, m, _ := doReq(t, srv, call{"GET", "/sp/_search?" + tc.params, ""})
			if code != tc.status {
				t.Fatalf("status %d, want %d: %v", code, tc.status, m)
			}
			if tc.status != 200 {
				if typ, reason := get(m, "error.type"), get(m, "error.reason"); typ != "illegal_argument_exception" || reason != tc.reason {
					t.Fatalf("error %v: %v, want illegal_argument_exception: %s", typ, reason, tc.reason)
				}
			}
		})
	}
}

// TestParamValuesRefused checks parameters whose value Elasticsearch 8
// parses before doing anything and refuses with a 400: a time value
// without a unit, and delete_by_query's conflicts.
func TestParamValuesRefused(t *testing.T) {
	cases := []struct {
		name, method, path, body string
		status                   int
		typ, reason              string
	}{
		{"write timeout", "PUT", "/pv/_doc/1?timeout=30s", `{"k":"a"}`, 201, "", ""},
		{"write timeout without a unit", "PUT", "/pv/_doc/1?timeout=30", `{"k":"a"}`, 400, "parse_exception",
			"failed to parse setting [timeout] with value [30] as a time value: unit is missing or unrecognized"},
		{"search timeout not a number", "GET", "/pv/_search?timeout=xs", "", 400, "parse_exception", "failed to parse [xs]"},
		{"master_timeout", "PUT", "/pv2?master_timeout=abc", "", 400, "parse_exception",
			"failed to parse setting [master_timeout] with value [abc] as a time value: unit is missing or unrecognized"},
		{"timeout -1", "GET", "/_cluster/health?timeout=-1", "", 200, "", ""},
		{"conflicts proceed", "POST", "/pv/_delete_by_query?conflicts=proceed", `{"query":{"match_none":{}}}`, 200, "", ""},
		{"conflicts in the body", "POST", "/pv/_delete_by_query", `{"conflicts":"proceed","query":{"match_none":{}}}`, 200, "", ""},
		{"conflicts unknown", "POST", "/pv/_delete_by_query?conflicts=ignore", `{"query":{"match_none":{}}}`, 400, "illegal_argument_exception",
			`conflicts may only be "proceed" or "abort" but was [ignore]`},
		{"refresh not a boolean", "POST", "/pv/_delete_by_query?refresh=wait_for", `{"query":{"match_none":{}}}`, 400, "illegal_argument_exception",
			"Failed to parse value [wait_for] as only [true] or [false] are allowed."},
	}
	srv := esserver.New()
	if code, m, _ := doReq(t, srv, call{"PUT", "/pv", ""}); code != 200 {
		t.Fatalf("create: %d %v", code, m)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, m, _ := doReq(t, srv, call{tc.method, tc.path, tc.body})
			if code != tc.status {
				t.Fatalf("status %d, want %d: %v", code, tc.status, m)
			}
			if tc.typ != "" {
				if typ, reason := get(m, "error.type"), get(m, "error.reason"); typ != tc.typ || reason != tc.reason {
					t.Fatalf("error %v: %v, want %s: %s", typ, reason, tc.typ, tc.reason)
				}
			}
		})
	}
}

// TestMalformedBodyLocation checks that a malformed JSON body's error
// names the line and column where parsing failed, not always [1:1].
func TestMalformedBodyLocation(t *testing.T) {
	cases := []struct {
		name, body, prefix string
	}{
		{"first line", `{"query":{"term":{"k":}}}`, "[1:23] "},
		{"third line", "{\n  \"query\": {\n    \"term\": {\"k\": }\n  }\n}", "[3:19] "},
		{"cut short", "{\n\"size\":1", "[2:9] "},
	}
	srv := esserver.New()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, m, _ := doReq(t, srv, call{"POST", "/_search", tc.body})
			if code != 400 {
				t.Fatalf("status %d, want 400: %v", code, m)
			}
			reason, _ := get(m, "error.reason").(string)
			if get(m, "error.type") != "x_content_parse_exception" || !strings.HasPrefix(reason, tc.prefix) {
				t.Fatalf("error %v: %s, want x_content_parse_exception starting %q", get(m, "error.type"), reason, tc.prefix)
			}
		})
	}
}

// TestSortOnID checks that sorting on _id is refused as Elasticsearch 8
// refuses it (indices.id_field_data.enabled is false by default), so a
// client does not learn a tie-breaker a real cluster rejects; _doc and a
// keyword copy of the id still sort.
func TestSortOnID(t *testing.T) {
	cases := []struct {
		name, sort string
		status     int
	}{
		{"_id", `["_id"]`, 400},
		{"_id desc", `[{"_id":{"order":"desc"}}]`, 400},
		{"tie-breaker after a field", `[{"n":"asc"},{"_id":"asc"}]`, 400},
		{"keyword copy", `[{"id.keyword":"asc"}]`, 200},
		{"_doc", `["_doc"]`, 200},
	}
	srv := esserver.New()
	for _, id := range []string{"a", "b"} {
		if code, m, _ := doReq(t, srv, call{"PUT", "/so/_doc/" + id, `{"id":"` + id + `","n":1}`}); code != 201 {
			t.Fatalf("index: %d %v", code, m)
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, m, _ := doReq(t, srv, call{"POST", "/so/_search", `{"sort":` + tc.sort + `}`})
			if code != tc.status {
				t.Fatalf("status %d, want %d: %v", code, tc.status, m)
			}
			if tc.status == 400 {
				const reason = "Fielddata access on the _id field is disallowed, you can re-enable it by updating the dynamic cluster setting: indices.id_field_data.enabled"
				if get(m, "error.type") != "search_phase_execution_exception" || get(m, "error.root_cause.0.type") != "illegal_argument_exception" || get(m, "error.root_cause.0.reason") != reason {
					t.Fatalf("error %v, want a search_phase_execution_exception caused by: %s", m, reason)
				}
			}
		})
	}
}

// TestTotalFieldsLimit checks index.mapping.total_fields.limit on dynamic
// mapping: a read model whose documents carry one key per user grows a
// field per key, and Elasticsearch refuses the document that would take
// the mapping past the limit (1000 by default; a string counts twice, for
// its keyword sub-field), unless ignore_dynamic_beyond_limit keeps the
// extra fields in _source only.
func TestTotalFieldsLimit(t *testing.T) {
	fields := func(prefix string, n int) string {
		var b strings.Builder
		b.WriteString("{")
		for i := range n {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString(`"` + prefix + strconv.Itoa(i) + `":1`)
		}
		b.WriteString("}")
		return b.String()
	}
	const reason = "Limit of total fields [5] has been exceeded while adding new fields [6]"
	cases := []struct {
		name, settings string
		writes         []call
		status         int // of the last write
		mapped         int // fields in the mapping after it
	}{
		{"default limit, within", "", []call{{"PUT", "/tf/_doc/1", fields("f", 1000)}}, 201, 1000},
		{"default limit, over", "", []call{{"PUT", "/tf/_doc/1", fields("f", 1001)}}, 400, 0},
		{"over across documents", `{"settings":{"index.mapping.total_fields.limit":5}}`,
			[]call{{"PUT", "/tf/_doc/1", fields("a", 4)}, {"PUT", "/tf/_doc/2", `{"s":"x"}`}}, 400, 4},
		{"existing fields do not count again", `{"settings":{"index.mapping.total_fields.limit":5}}`,
			[]call{{"PUT", "/tf/_doc/1", fields("a", 5)}, {"PUT", "/tf/_doc/2", fields("a", 5)}}, 201, 5},
		{"object and its fields", `{"settings":{"index.mapping.total_fields.limit":5}}`,
			[]call{{"PUT", "/tf/_doc/1", `{"o":{"p":{"q":1,"r":2,"s":"x"}}}`}}, 400, 0},
		{"bulk item", `{"settings":{"index.mapping.total_fields.limit":5}}`,
			[]call{{"POST", "/tf/_bulk", "{\"index\":{\"_id\":\"1\"}}\n" + fields("b", 6) + "\n"}}, 200, 0},
		{"update", `{"settings":{"index.mapping.total_fields.limit":5}}`,
			[]call{{"PUT", "/tf/_doc/1", `{"a":1}`}, {"POST", "/tf/_update/1", `{"doc":` + fields("u", 5) + `}`}}, 400, 1},
		{"ignore_dynamic_beyond_limit", `{"settings":{"index.mapping.total_fields.limit":5,"index.mapping.total_fields.ignore_dynamic_beyond_limit":true}}`,
			[]call{{"PUT", "/tf/_doc/1", fields("a", 8)}}, 201, 5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := esserver.New()
			if code, m, _ := doReq(t, srv, call{"PUT", "/tf", tc.settings}); code != 200 {
				t.Fatalf("create: %d %v", code, m)
			}
			var code int
			var m map[string]any
			for _, w := range tc.writes {
				code, m, _ = doReq(t, srv, w)
			}
			if code != tc.status {
				t.Fatalf("status %d, want %d: %v", code, tc.status, m)
			}
			if tc.name == "bulk item" {
				if get(m, "items.0.index.status") != 400.0 || get(m, "items.0.index.error.type") != "document_parsing_exception" {
					t.Fatalf("bulk item %v, want a 400 document_parsing_exception", get(m, "items.0"))
				}
			}
			if tc.status == 400 && tc.name == "over across documents" {
				if get(m, "error.type") != "document_parsing_exception" || get(m, "error.caused_by.reason") != "Limit of total fields [5] has been exceeded while adding new fields [2]" {
					t.Fatalf("error %v", m)
				}
			}
			if tc.status == 400 && tc.name == "object and its fields" {
				if !strings.HasSuffix(get(m, "error.reason").(string), "failed to parse: "+reason) {
					t.Fatalf("error %v, want %s", m, reason)
				}
			}
			_, mm, _ := doReq(t, srv, call{"GET", "/tf/_mapping", ""})
			props, _ := get(mm, "tf.mappings.properties").(map[string]any)
			if n := countMapped(props); n != tc.mapped {
				t.Fatalf("%d fields mapped, want %d: %v", n, tc.mapped, props)
			}
		})
	}
}

// countMapped counts fields as total_fields.limit does: each property,
// each multi-field, and what is inside objects.
func countMapped(props map[string]any) int {
	n := 0
	for _, v := range props {
		f, _ := v.(map[string]any)
		n++
		sub, _ := f["fields"].(map[string]any)
		n += len(sub)
		inner, _ := f["properties"].(map[string]any)
		n += countMapped(inner)
	}
	return n
}

// TestPrettyParam checks that pretty is read as a boolean, as
// Elasticsearch reads it: ?pretty=false answers compact JSON.
func TestPrettyParam(t *testing.T) {
	cases := []struct {
		name, query string
		indented    bool
	}{
		{"absent", "", false},
		{"bare", "?pretty", true},
		{"true", "?pretty=true", true},
		{"false", "?pretty=false", false},
	}
	srv := esserver.New()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			srv.ServeHTTP(rec, httptest.NewRequest("GET", "/"+tc.query, nil))
			if got := strings.Contains(rec.Body.String(), "\n  "); got != tc.indented {
				t.Fatalf("indented %v, want %v: %s", got, tc.indented, rec.Body.String())
			}
		})
	}
}

// TestSearchAfterWithFrom checks that search_after with a from above 0
// is refused as Elasticsearch 8 refuses it, rather than skipping hits
// after the cursor (a paging bug a client would only see in production).
func TestSearchAfterWithFrom(t *testing.T) {
	cases := []struct {
		name, body string
		status     int
	}{
		{"from 0", `{"sort":["n"],"search_after":[1],"from":0}`, 200},
		{"no from", `{"sort":["n"],"search_after":[1]}`, 200},
		{"from 1", `{"sort":["n"],"search_after":[1],"from":1}`, 400},
		{"from without search_after", `{"sort":["n"],"from":1}`, 200},
	}
	srv := esserver.New()
	for _, n := range []string{"1", "2", "3"} {
		if code, m, _ := doReq(t, srv, call{"PUT", "/sa/_doc/" + n, `{"n":` + n + `}`}); code != 201 {
			t.Fatalf("index: %d %v", code, m)
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, m, _ := doReq(t, srv, call{"POST", "/sa/_search", tc.body})
			if code != tc.status {
				t.Fatalf("status %d, want %d: %v", code, tc.status, m)
			}
			const reason = "Validation Failed: 1: [from] parameter must be set to 0 when [search_after] is used;"
			if code == 400 && (get(m, "error.type") != "action_request_validation_exception" || get(m, "error.reason") != reason) {
				t.Fatalf("error %v, want action_request_validation_exception: %s", m, reason)
			}
		})
	}
}

// TestSortCheckedWithoutHits checks that a sort an index cannot run is
// refused even when nothing matches, as Elasticsearch builds the sort on
// every shard first: a new read model's first search, on an empty index
// whose sort field is not mapped yet, fails there unless it names an
// unmapped_type.
func TestSortCheckedWithoutHits(t *testing.T) {
	cases := []struct {
		name, path, body string
		status           int
		reason           string
	}{
		{"unmapped field, empty index", "/empty/_search", `{"sort":[{"seen_at":"desc"}]}`, 400, "No mapping found for [seen_at] in order to sort on"},
		{"unmapped field with unmapped_type", "/empty/_search", `{"sort":[{"seen_at":{"order":"desc","unmapped_type":"date"}}]}`, 200, ""},
		{"unmapped field, no hit", "/full/_search", `{"query":{"term":{"k":"none"}},"sort":["seen_at"]}`, 400, "No mapping found for [seen_at] in order to sort on"},
		{"text field, no hit", "/full/_search", `{"query":{"term":{"k":"none"}},"sort":["t"]}`, 400, ""},
		{"mapped in one of two indices", "/empty,full/_search", `{"query":{"term":{"k":"none"}},"sort":["k"]}`, 200, ""},
		{"_score and _doc", "/empty/_search", `{"sort":["_score","_doc"]}`, 200, ""},
		{"count ignores sort", "/empty/_count", `{"query":{"match_all":{}}}`, 200, ""},
	}
	srv := esserver.New()
	for _, c := range []call{
		{"PUT", "/empty", ""},
		{"PUT", "/full", `{"mappings":{"properties":{"k":{"type":"keyword"},"t":{"type":"text"}}}}`},
		{"PUT", "/full/_doc/1", `{"k":"a","t":"a"}`},
	} {
		if code, m, _ := doReq(t, srv, c); code >= 300 {
			t.Fatalf("%s %s: %d %v", c.method, c.path, code, m)
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, m, _ := doReq(t, srv, call{"POST", tc.path, tc.body})
			if code != tc.status {
				t.Fatalf("status %d, want %d: %v", code, tc.status, m)
			}
			if tc.reason != "" && get(m, "error.root_cause.0.reason") != tc.reason {
				t.Fatalf("root cause %v, want %s", get(m, "error.root_cause.0.reason"), tc.reason)
			}
		})
	}
}

// TestNonFiniteNumbersRefused: a JSON number beyond float64's range (1e999)
// is Infinity to Elasticsearch's parser, and its numeric field types
// accept only finite values: the document is refused with a 400
// document_parsing_exception whether the field is mapped already or would
// be mapped by this document (the server accepted the dynamic case).
func TestNonFiniteNumbersRefused(t *testing.T) {
	cases := []struct {
		name, mappings, doc string
		status              int
		cause               string
	}{
		{"dynamic, 1e999", "", `{"n":1e999}`, 400, "[float] supports only finite values, but got [Infinity]"},
		{"dynamic, -1e999", "", `{"n":-1e999}`, 400, "[float] supports only finite values, but got [-Infinity]"},
		{"dynamic, inside an object", "", `{"o":{"n":1E400}}`, 400, "[float] supports only finite values, but got [Infinity]"},
		{"mapped double", `{"properties":{"n":{"type":"double"}}}`, `{"n":1e999}`, 400, "[double] supports only finite values, but got [Infinity]"},
		{"mapped double, a numeric string", `{"properties":{"n":{"type":"double"}}}`, `{"n":"1e999"}`, 400, "[double] supports only finite values, but got [Infinity]"},
		{"mapped double, the string Infinity", `{"properties":{"n":{"type":"double"}}}`, `{"n":"Infinity"}`, 400, "[double] supports only finite values, but got [Infinity]"},
		{"mapped float, the string -Infinity", `{"properties":{"n":{"type":"float"}}}`, `{"n":"-Infinity"}`, 400, "[float] supports only finite values, but got [-Infinity]"},
		{"mapped double, the string NaN", `{"properties":{"n":{"type":"double"}}}`, `{"n":"NaN"}`, 400, "[double] supports only finite values, but got [NaN]"},
		{"mapped double, Go's inf is not Java's", `{"properties":{"n":{"type":"double"}}}`, `{"n":"inf"}`, 400, "For input string: \"inf\""},
		{"dynamic, the string Infinity is text", "", `{"n":"Infinity"}`, 201, ""},
		{"dynamic, the largest finite double", "", `{"n":1.7976931348623157e308}`, 201, ""},
		{"dynamic, underflow is zero", "", `{"n":1e-999}`, 201, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := esserver.New()
			body := ""
			if tc.mappings != "" {
				body = `{"mappings":` + tc.mappings + `}`
			}
			if code, m, _ := doReq(t, srv, call{"PUT", "/nf", body}); code != 200 {
				t.Fatalf("create: %d %v", code, m)
			}
			code, m, _ := doReq(t, srv, call{"PUT", "/nf/_doc/1", tc.doc})
			if code != tc.status {
				t.Fatalf("status %d, want %d: %v", code, tc.status, m)
			}
			if tc.status != 400 {
				return
			}
			if get(m, "error.type") != "document_parsing_exception" || get(m, "error.caused_by.reason") != tc.cause {
				t.Fatalf("error %v, want a document_parsing_exception caused by %q", m, tc.cause)
			}
			if code, _, _ := doReq(t, srv, call{"GET", "/nf/_doc/1", ""}); code != 404 {
				t.Fatalf("the refused document is stored: GET answered %d", code)
			}
			_, mm, _ := doReq(t, srv, call{"GET", "/nf/_mapping", ""})
			if tc.mappings == "" && get(mm, "nf.mappings.properties") != nil {
				t.Fatalf("the refused document mapped fields: %v", mm)
			}
		})
	}
}
