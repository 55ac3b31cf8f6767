package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/api/apitest"
	"github.com/sluicehq/sluice/internal/testenv"
)

// `sluice api` on the file backend: it serves the API with bearer auth,
// /readyz and /openapi.json, and stops cleanly when its context ends.
func TestAPICommand(t *testing.T) {
	url, _ := testenv.NewMigratedDatabase(t)
	port := testenv.FreePort(t)
	for k, v := range map[string]string{
		"DATABASE_URL": url, "EVENT_STORE_BACKEND": "file", "EVENT_STORE_FILE_DIR": t.TempDir(),
		"SLUICE_API_ADDR": "127.0.0.1:" + strconv.Itoa(port), "SLUICE_HTTP_ADDR": "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)),
		"SLUICE_API_TOKENS": "tok-1,tok-2", "SLUICE_LOG_LEVEL": "error",
	} {
		t.Setenv(k, v)
	}
	cmd := newAPICmd()
	var out, errb bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	cmd.SetArgs(nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	var resp *http.Response
	var err error
	for range 200 {
		if resp, err = http.Get(base + "/readyz"); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		cancel()
		t.Fatalf("api did not start: %v\n%s", err, errb.String())
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/readyz: %d", resp.StatusCode)
	}
	// Every exchange with the running API is checked against its OpenAPI
	// document.
	client := &http.Client{Transport: apitest.MustNew(t, api.OpenAPI()).RoundTripper(t, nil)}
	post := func(token string) *http.Response {
		req, _ := http.NewRequest("POST", base+"/v1/dbs/shop/classes/order/instances", strings.NewReader(`{"instance_id":"o-1","data":{"a":1}}`))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		r, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := post(""); r.StatusCode != 401 {
		t.Fatalf("without token: %d", r.StatusCode)
	}
	r := post("tok-2")
	var acc struct {
		SequenceNumber int64  `json:"sequence_number"`
		AggregateID    string `json:"aggregate_id"`
	}
	_ = json.NewDecoder(r.Body).Decode(&acc)
	r.Body.Close()
	if r.StatusCode != 202 || acc.SequenceNumber != 1 || acc.AggregateID != "shop:order:o-1" {
		t.Fatalf("create: %d %+v", r.StatusCode, acc)
	}
	if r, err := client.Get(base + "/openapi.json"); err != nil || r.StatusCode != 200 {
		t.Fatalf("/openapi.json: %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("api exited with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("api did not stop")
	}
	if !strings.Contains(out.String(), "sluice api listening on http://127.0.0.1:") {
		t.Fatalf("stdout: %q", out.String())
	}
}
