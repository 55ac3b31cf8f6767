package esserver_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/esserver"
)

// BenchmarkBulkIndex measures in-process bulk indexing of small documents
// in batches of 1000 through the HTTP handler.
func BenchmarkBulkIndex(b *testing.B) { benchBulk(b, esserver.New()) }

func benchBulk(b *testing.B, srv *esserver.Server) {
	const batch = 1000
	bodies := make([][]byte, 16)
	for i := range bodies {
		var buf bytes.Buffer
		for j := 0; j < batch; j++ {
			fmt.Fprintf(&buf, "{\"index\":{\"_index\":\"bench\",\"_id\":\"%d-%d\"}}\n", i, j)
			fmt.Fprintf(&buf, "{\"aggregate_id\":\"agg-%d\",\"seq\":%d,\"status\":\"active\",\"amount\":%d.5,\"at\":\"2024-05-01T10:00:00Z\"}\n", j%97, j, j)
		}
		bodies[i] = buf.Bytes()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req := httptest.NewRequest(http.MethodPost, "/_bulk", bytes.NewReader(bodies[i%len(bodies)]))
		req.Header.Set("Content-Type", "application/x-ndjson")
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("status %d: %s", rec.Code, rec.Body.String())
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "docs/s")
}

// BenchmarkBulkIndexPersistent is BenchmarkBulkIndex on a server made by
// Open: every _bulk is written to the log and fsynced once before it is
// answered.
func BenchmarkBulkIndexPersistent(b *testing.B) {
	srv, err := esserver.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = srv.Close() }()
	benchBulk(b, srv)
}

// The benchmarks below reproduce the requests sluice sends per command:
// the projection worker's and readmodel.WriteInstances' _bulk (index
// actions through the write alias with version_type external and
// require_alias, refresh=false), the stateful read models' _mget
// (realtime=true) and a GET of one instance document. Read them for
// allocs/op and B/op (-benchtime=Nx); ns/op is not their point.

const (
	benchItems      = 100
	benchIndex      = "sluiceapp_instances_v1"
	benchReadAlias  = "sluiceapp_instances"
	benchWriteAlias = "sluiceapp_instances_write"
)

// newInstancesServer returns srv with the instances index and its two
// aliases, as readmodel.EnsureIndex creates them.
func newInstancesServer(b *testing.B, srv http.Handler) http.Handler {
	b.Helper()
	body := `{"aliases":{"` + benchReadAlias + `":{},"` + benchWriteAlias + `":{"is_write_index":true}}}`
	serveOK(b, srv, http.MethodPut, "/"+benchIndex, []byte(body))
	return srv
}

// serveOK serves one request (a body, when given, as JSON) and fails the
// test or benchmark unless it answers 200 or 201.
func serveOK(b testing.TB, srv http.Handler, method, target string, body []byte) *httptest.ResponseRecorder {
	b.Helper()
	var req *http.Request
	if body == nil {
		req = httptest.NewRequest(method, target, nil)
	} else {
		req = httptest.NewRequest(method, target, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
	}
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK && rec.Code != http.StatusCreated {
		b.Fatalf("%s %s: status %d: %.300s", method, target, rec.Code, rec.Body.String())
	}
	return rec
}

// appendInstanceBulk appends the _bulk body of benchItems instance
// documents at version, as readmodel.WriteInstances encodes them.
func appendInstanceBulk(dst []byte, version int64) []byte {
	for j := 0; j < benchItems; j++ {
		dst = append(dst, `{"index":{"_index":"`+benchWriteAlias+`","_id":"order:o-`...)
		dst = strconv.AppendInt(dst, int64(j), 10)
		dst = append(dst, `","version":`...)
		dst = strconv.AppendInt(dst, version, 10)
		dst = append(dst, `,"version_type":"external","require_alias":true}}`+"\n"...)
		dst = append(dst, `{"amount":12.5,"class":"order","created_at":"2024-05-01T10:00:00Z","customer":"c-`...)
		dst = strconv.AppendInt(dst, int64(j%97), 10)
		dst = append(dst, `","db":"app","deleted":false,"event_id":"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","instance_id":"o-`...)
		dst = strconv.AppendInt(dst, int64(j), 10)
		dst = append(dst, `","items":3,"sequence_number":`...)
		dst = strconv.AppendInt(dst, version, 10)
		dst = append(dst, `,"status":"active","updated_at":"2024-05-01T10:00:00Z"}`+"\n"...)
	}
	return dst
}

// benchInstanceBulk sends one _bulk of benchItems external-version index
// actions per op, each op one version above the last (every item applied).
func benchInstanceBulk(b *testing.B, srv http.Handler) {
	var body []byte
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		body = appendInstanceBulk(body[:0], int64(i+1))
		rec := serveOK(b, srv, http.MethodPost, "/_bulk?refresh=false", body)
		if bytes.Contains(rec.Body.Bytes()[:min(rec.Body.Len(), 40)], []byte(`"errors":true`)) {
			b.Fatalf("bulk item errors: %.300s", rec.Body.String())
		}
	}
}

// BenchmarkBulkIndexExternal is the projection worker's _bulk on the
// in-memory server.
func BenchmarkBulkIndexExternal(b *testing.B) {
	benchInstanceBulk(b, newInstancesServer(b, esserver.New()))
}

// BenchmarkBulkIndexExternalPipeline is BenchmarkBulkIndexExternal as the
// pipeline benchmark serves it (internal/pipelinebench serveES): a server
// made by Open behind a WriteLog.
func BenchmarkBulkIndexExternalPipeline(b *testing.B) {
	srv, err := esserver.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = srv.Close() }()
	h := esserver.NewWriteLog(func(esserver.Write) {}).Wrap(srv)
	benchInstanceBulk(b, newInstancesServer(b, h))
}

// newLoadedInstancesServer returns an in-memory server whose instances
// index holds benchItems documents.
func newLoadedInstancesServer(b *testing.B) http.Handler {
	srv := newInstancesServer(b, esserver.New())
	serveOK(b, srv, http.MethodPost, "/_bulk?refresh=false", appendInstanceBulk(nil, 1))
	return srv
}

// BenchmarkMget is readmodel.Mget of benchItems documents through the
// write alias, in real time.
func BenchmarkMget(b *testing.B) {
	srv := newLoadedInstancesServer(b)
	body := []byte(`{"docs":[`)
	for j := 0; j < benchItems; j++ {
		if j > 0 {
			body = append(body, ',')
		}
		body = append(body, `{"_index":"`+benchWriteAlias+`","_id":"order:o-`...)
		body = strconv.AppendInt(body, int64(j), 10)
		body = append(body, `"}`...)
	}
	body = append(body, `]}`...)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		serveOK(b, srv, http.MethodPost, "/_mget?realtime=true", body)
	}
}

// BenchmarkGetDoc is readmodel.GetInstance: one document by id through
// the write alias, in real time.
func BenchmarkGetDoc(b *testing.B) {
	srv := newLoadedInstancesServer(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		serveOK(b, srv, http.MethodGet, "/"+benchWriteAlias+"/_doc/order:o-7?realtime=true", nil)
	}
}
