package esserver_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
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
