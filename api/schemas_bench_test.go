package api

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/schema"
)

// BenchmarkAppendSchema measures appended events per second through the
// event API (batches of 10, 16 closed-loop clients, real Postgres, the
// file store) without a schema registry and with every event validated
// against a registered schema (docs/benchmarks.md).
func BenchmarkAppendSchema(b *testing.B) {
	const clients, batch = 16, 10
	for _, validate := range []bool{false, true} {
		b.Run(fmt.Sprintf("validate=%v", validate), func(b *testing.B) {
			a := newTestAPI(b, apiConfig{deps: func(d *Deps) { d.Events = d.Store.(EventLog) }})
			deps := Deps{Store: a.store, Registry: a.reg, Sequences: a.store, Events: a.store}
			if validate {
				reg := schema.New(a.pool, schema.Config{}, nil)
				if _, err := reg.Register(context.Background(), "OrderPlaced", []byte(orderSchema), schema.RegisterOptions{}); err != nil {
					b.Fatal(err)
				}
				deps.Schemas = reg
			}
			h, err := New(Config{}, deps)
			if err != nil {
				b.Fatal(err)
			}
			srv := httptest.NewServer(h)
			defer srv.Close()
			tr := &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr, Timeout: time.Minute}
			var next, failed atomic.Int64
			requests := (b.N + batch - 1) / batch
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1)
						if i > int64(requests) {
							return
						}
						var sb strings.Builder
						sb.WriteString(`{"events":[`)
						for j := range batch {
							if j > 0 {
								sb.WriteByte(',')
							}
							fmt.Fprintf(&sb, `{"event_type":"OrderPlaced","data":{"id":"o-%d-%d","total":%d.5,"lines":[{"qty":1},{"qty":%d}]}}`, i, j, i, j+1)
						}
						sb.WriteString(`]}`)
						resp, err := client.Post(fmt.Sprintf("%s/v1/streams/Order/o-%d/events", srv.URL, i), "application/json", strings.NewReader(sb.String()))
						if err != nil {
							failed.Add(1)
							continue
						}
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode != http.StatusCreated {
							failed.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			if n := failed.Load(); n > 0 {
				b.Fatalf("%d requests failed", n)
			}
			b.ReportMetric(float64(requests*batch)/elapsed.Seconds(), "events/s")
		})
	}
}
