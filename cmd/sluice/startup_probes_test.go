package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/api/apitest"
	"github.com/sluicehq/sluice/internal/testenv"
)

// TestStartupProbesAnswerAPIPathsWithRetry: while a process waits for a
// dependency at start-up, its probe server holds the address the API
// shares. /livez is 200, /readyz 503, and every API path 503 with
// Retry-After and a problem document — never a 404, which a client takes
// for "no such route" and gives up (the chaos soak met it after killing
// the API during a Postgres cut).
func TestStartupProbesAnswerAPIPathsWithRetry(t *testing.T) {
	addr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	stop := serveStartupProbes(addr, slog.New(slog.NewTextHandler(io.Discard, nil)), "waiting for Postgres")
	defer stop()
	cases := []struct {
		method, path string
		status       int
		retryAfter   bool
	}{
		{http.MethodGet, "/livez", http.StatusOK, false},
		{http.MethodGet, "/readyz", http.StatusServiceUnavailable, false},
		{http.MethodPatch, "/v1/dbs/shop/classes/orders/instances/42", http.StatusServiceUnavailable, true},
		{http.MethodPost, "/v1/dbs/shop/classes/orders/instances", http.StatusServiceUnavailable, true},
		{http.MethodGet, "/v1/commands/abc", http.StatusServiceUnavailable, true},
	}
	for _, tc := range cases {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			// The replies are the API's while it starts: the API's
			// document describes them.
			client := &http.Client{Transport: apitest.MustNew(t, api.OpenAPI()).RoundTripper(t, nil)}
			req, err := http.NewRequest(tc.method, "http://"+addr+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			res, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			if res.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", res.StatusCode, tc.status)
			}
			if !tc.retryAfter {
				return
			}
			if res.Header.Get("Retry-After") == "" {
				t.Error("no Retry-After")
			}
			var body struct {
				Code   string `json:"code"`
				Status int    `json:"status"`
				Detail string `json:"detail"`
			}
			if err := json.NewDecoder(res.Body).Decode(&body); err != nil || body.Code != "starting" || body.Status != 503 || body.Detail == "" {
				t.Errorf("body %+v (%v), want code starting, status 503, a detail", body, err)
			}
		})
	}
}
