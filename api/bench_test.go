package api

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkCreate measures accepted creates (202s) per second through a real
// HTTP server into the event store on real Postgres and MinIO, with 1, 16
// and 64 closed-loop clients, and reports p50/p99 latency.
func BenchmarkCreate(b *testing.B) {
	for _, clients := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			a := newTestAPI(b, apiConfig{minio: true})
			srv := httptest.NewServer(a.h)
			defer srv.Close()
			tr := &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr, Timeout: time.Minute}
			url := srv.URL + base
			var next atomic.Int64
			lat := make([][]time.Duration, clients)
			var failed atomic.Int64
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for c := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						body := fmt.Sprintf(`{"instance_id":"o-%d","data":{"total":%d,"items":["a","b"],"customer":{"name":"n-%d"}}}`, i, i, i)
						t0 := time.Now()
						resp, err := client.Post(url, "application/json", strings.NewReader(body))
						if err != nil {
							failed.Add(1)
							continue
						}
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode != http.StatusAccepted {
							failed.Add(1)
							continue
						}
						lat[c] = append(lat[c], time.Since(t0))
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			if n := failed.Load(); n > 0 {
				b.Fatalf("%d requests failed", n)
			}
			var all []time.Duration
			for _, l := range lat {
				all = append(all, l...)
			}
			slices.Sort(all)
			b.ReportMetric(float64(len(all))/elapsed.Seconds(), "creates/s")
			if len(all) > 0 {
				b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50_ms")
				b.ReportMetric(float64(all[min(len(all)-1, len(all)*99/100)].Microseconds())/1000, "p99_ms")
			}
			if got := a.appendsCount(); got != len(all) {
				b.Fatalf("%d appends for %d accepted creates", got, len(all))
			}
		})
	}
}
