package api

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// BenchmarkRequestWork counts what one write request allocates (issue 34:
// CPU per command, measured by counting, which a loaded machine does not
// disturb): allocs/op and B/op of a create and of an event append served
// by the API's handler over the real store (file backend, Postgres), one
// request at a time, so that each is its own group commit (the closed
// loop's worst case). "handler" calls the API's handler directly (the API
// and the store, no HTTP connection); "http" goes through an httptest
// server and a client in this process (adds net/http on both sides).
// Read the figures as counts; the timings of a loaded machine mean nothing:
//
//	go test -run '^$' -bench BenchmarkRequestWork -benchtime 2000x ./api/
func BenchmarkRequestWork(b *testing.B) {
	a := newTestAPI(b, apiConfig{deps: func(d *Deps) { d.Events = d.Store.(EventLog) }})
	createBody := func(i int) string {
		return fmt.Sprintf(`{"instance_id":"o-%d","data":{"total":%d,"items":["a","b"],"customer":{"name":"n-%d"}}}`, i, i, i)
	}
	appendReq := func(i int) (string, string) {
		return fmt.Sprintf("/v1/streams/Order/o-%d/events", i),
			fmt.Sprintf(`{"events":[{"event_id":%q,"event_type":"OrderPlaced","data":{"id":"o-%d","total":%d}}]}`, uuid.NewString(), i, i)
	}
	var n int
	direct := func(b *testing.B, target, body string, want int) {
		req := httptest.NewRequest(http.MethodPost, target, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		w := &discardWriter{h: http.Header{}}
		a.h.ServeHTTP(w, req)
		if w.code != want {
			b.Fatalf("%s: status %d, want %d", target, w.code, want)
		}
	}
	b.Run("create/handler", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			n++
			direct(b, base, createBody(n), http.StatusAccepted)
		}
	})
	b.Run("append/handler", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			n++
			target, body := appendReq(n)
			direct(b, target, body, http.StatusCreated)
		}
	})
	srv := httptest.NewServer(a.h)
	defer srv.Close()
	client := srv.Client()
	b.Run("create/http", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			n++
			resp, err := client.Post(srv.URL+base, "application/json", strings.NewReader(createBody(n)))
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
	})
}

// discardWriter is a ResponseWriter that keeps only the status.
type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header { return w.h }
func (w *discardWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}
func (w *discardWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return len(b), nil
}
