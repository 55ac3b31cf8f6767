package esserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/elastic/go-elasticsearch/v8"
	"github.com/elastic/go-elasticsearch/v8/esapi"
	"github.com/elastic/go-elasticsearch/v8/esutil"

	"github.com/sluicehq/sluice/esserver"
)

func newClient(t *testing.T, srv *esserver.Server) *elasticsearch.Client {
	t.Helper()
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	es, err := elasticsearch.NewClient(elasticsearch.Config{
		Addresses:  []string{hs.URL},
		Transport:  hs.Client().Transport,
		MaxRetries: 2,
		RetryBackoff: func(int) time.Duration {
			return time.Millisecond
		},
	})
	if err != nil {
		t.Fatalf("new client: %v", err)
	}
	return es
}

func decodeBody(t *testing.T, res *esapi.Response) map[string]any {
	t.Helper()
	defer res.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(res.Body).Decode(&m); err != nil {
		t.Fatalf("decode %s: %v", res.Status(), err)
	}
	return m
}

func intPtr(i int) *int { return &i }

func TestGoElasticsearchClient(t *testing.T) {
	ctx := context.Background()
	srv := esserver.New()
	es := newClient(t, srv)

	t.Run("info", func(t *testing.T) {
		res, err := es.Info(es.Info.WithContext(ctx))
		if err != nil {
			t.Fatalf("info: %v", err)
		}
		body := decodeBody(t, res)
		version := body["version"].(map[string]any)
		if !strings.HasPrefix(version["number"].(string), "8.") || body["tagline"] != "You Know, for Search" {
			t.Fatalf("unexpected info %v", body)
		}
	})

	t.Run("external versions", func(t *testing.T) {
		index := func(v int) *esapi.Response {
			res, err := esapi.IndexRequest{
				Index: "versions", DocumentID: "1", Body: strings.NewReader(`{"n":1}`),
				Version: intPtr(v), VersionType: "external",
			}.Do(ctx, es)
			if err != nil {
				t.Fatalf("index: %v", err)
			}
			return res
		}
		tests := []struct {
			version int
			status  int
			result  string
		}{
			{5, 201, "created"},
			{6, 200, "updated"},
			{6, 409, ""},
			{3, 409, ""},
			{10, 200, "updated"},
		}
		for _, tc := range tests {
			res := index(tc.version)
			body := decodeBody(t, res)
			if res.StatusCode != tc.status {
				t.Fatalf("version %d: status %d, want %d: %v", tc.version, res.StatusCode, tc.status, body)
			}
			if tc.status == 409 {
				e := body["error"].(map[string]any)
				if e["type"] != "version_conflict_engine_exception" || !strings.Contains(e["reason"].(string), "is higher or equal to the one provided") {
					t.Fatalf("unexpected conflict body %v", body)
				}
				continue
			}
			if body["result"] != tc.result || int(body["_version"].(float64)) != tc.version {
				t.Fatalf("version %d: unexpected body %v", tc.version, body)
			}
		}
		res, err := es.Get("versions", "1")
		if err != nil {
			t.Fatal(err)
		}
		if got := decodeBody(t, res)["_version"]; got != float64(10) {
			t.Fatalf("get version %v", got)
		}
	})

	t.Run("bulk indexer", func(t *testing.T) {
		bi, err := esutil.NewBulkIndexer(esutil.BulkIndexerConfig{Client: es, Index: "bulk", NumWorkers: 2, FlushBytes: 64 << 10})
		if err != nil {
			t.Fatal(err)
		}
		var failed atomic.Int64
		for i := 0; i < 2000; i++ {
			err := bi.Add(ctx, esutil.BulkIndexerItem{
				Action:     "index",
				DocumentID: fmt.Sprint(i),
				Body:       strings.NewReader(fmt.Sprintf(`{"n":%d,"status":%q}`, i, []string{"active", "inactive"}[i%2])),
				OnFailure: func(context.Context, esutil.BulkIndexerItem, esutil.BulkIndexerResponseItem, error) {
					failed.Add(1)
				},
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		if err := bi.Close(ctx); err != nil {
			t.Fatal(err)
		}
		st := bi.Stats()
		if st.NumIndexed != 2000 || st.NumFailed != 0 || failed.Load() != 0 {
			t.Fatalf("stats %+v", st)
		}
		res, err := es.Count(es.Count.WithIndex("bulk"))
		if err != nil {
			t.Fatal(err)
		}
		if c := decodeBody(t, res)["count"]; c != float64(2000) {
			t.Fatalf("count %v", c)
		}
	})

	t.Run("filtered alias search", func(t *testing.T) {
		res, err := es.Indices.PutAlias([]string{"bulk"}, "active",
			es.Indices.PutAlias.WithBody(strings.NewReader(`{"filter":{"term":{"status.keyword":"active"}}}`)))
		if err != nil || res.IsError() {
			t.Fatalf("put alias: %v %v", err, res)
		}
		res.Body.Close()
		res, err = es.Search(es.Search.WithIndex("active"), es.Search.WithTrackTotalHits(true),
			es.Search.WithBody(strings.NewReader(`{"query":{"range":{"n":{"lt":100}}},"sort":[{"n":"desc"}],"size":3}`)))
		if err != nil {
			t.Fatal(err)
		}
		body := decodeBody(t, res)
		hits := body["hits"].(map[string]any)
		if total := hits["total"].(map[string]any)["value"]; total != float64(50) {
			t.Fatalf("total %v", total)
		}
		first := hits["hits"].([]any)[0].(map[string]any)
		if first["_id"] != "98" {
			t.Fatalf("first hit %v", first)
		}
	})

	t.Run("atomic alias swap", func(t *testing.T) {
		for _, name := range []string{"read-v1", "read-v2"} {
			res, err := es.Indices.Create(name)
			if err != nil || res.IsError() {
				t.Fatalf("create %s: %v %v", name, err, res)
			}
			res.Body.Close()
		}
		update := func(body string) *esapi.Response {
			res, err := es.Indices.UpdateAliases(strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			return res
		}
		res := update(`{"actions":[{"add":{"index":"read-v1","alias":"read"}}]}`)
		res.Body.Close()
		// A failing action must leave everything unchanged.
		res = update(`{"actions":[{"remove":{"index":"read-v1","alias":"read"}},{"add":{"index":"missing","alias":"read"}}]}`)
		if res.StatusCode != 404 {
			t.Fatalf("expected 404, got %s", res.Status())
		}
		res.Body.Close()
		res = update(`{"actions":[{"remove":{"index":"read-v1","alias":"read"}},{"add":{"index":"read-v2","alias":"read"}}]}`)
		if res.IsError() {
			t.Fatalf("swap: %s", res)
		}
		res.Body.Close()
		res, err := es.Indices.GetAlias(es.Indices.GetAlias.WithName("read"))
		if err != nil {
			t.Fatal(err)
		}
		body := decodeBody(t, res)
		if _, ok := body["read-v2"]; !ok || len(body) != 1 {
			t.Fatalf("alias after swap: %v", body)
		}
	})

	t.Run("retry on injected 503", func(t *testing.T) {
		var calls atomic.Int64
		remove := srv.InjectFault(esserver.Fault{
			Match: func(r *http.Request) bool {
				if r.URL.Path == "/flaky/_doc/1" {
					calls.Add(1)
					return true
				}
				return false
			},
			Status: http.StatusServiceUnavailable,
			Times:  1,
		})
		defer remove()
		res, err := es.Index("flaky", strings.NewReader(`{"a":1}`), es.Index.WithDocumentID("1"))
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != 201 {
			t.Fatalf("status %s", res.Status())
		}
		res.Body.Close()
		if calls.Load() != 1 {
			t.Fatalf("fault matched %d times", calls.Load())
		}
	})

	t.Run("bulk item rejections", func(t *testing.T) {
		remove := srv.InjectFault(esserver.Fault{
			RejectBulkItems: func(it esserver.BulkItem) bool { return it.ID == "b" },
			Times:           1,
		})
		defer remove()
		var buf bytes.Buffer
		for _, id := range []string{"a", "b", "c"} {
			fmt.Fprintf(&buf, "{\"index\":{\"_index\":\"rejects\",\"_id\":%q}}\n{\"x\":1}\n", id)
		}
		res, err := es.Bulk(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		body := decodeBody(t, res)
		items := body["items"].([]any)
		second := items[1].(map[string]any)["index"].(map[string]any)
		if body["errors"] != true || second["status"] != float64(429) ||
			second["error"].(map[string]any)["type"] != "es_rejected_execution_exception" {
			t.Fatalf("unexpected bulk body %v", body)
		}
		if items[0].(map[string]any)["index"].(map[string]any)["status"] != float64(201) {
			t.Fatalf("first item should succeed: %v", items[0])
		}
	})
}

func TestListenAndServe(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	srv := esserver.New()
	done := make(chan error, 1)
	go func() { done <- srv.ListenAndServe(ctx, "127.0.0.1:0") }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ListenAndServe: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ListenAndServe did not stop")
	}
}
