package readmodel_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/readmodel"
)

// A cluster that refuses the credentials at start-up is a fatal error
// naming the variables; any other answer, or none, is not (the worker
// waits out an outage when it runs).
func TestCheckCredentials(t *testing.T) {
	esAnswer := func(status int, body string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Elastic-Product", "Elasticsearch")
			w.WriteHeader(status)
			_, _ = w.Write([]byte(body))
		}
	}
	const refused = `{"error":{"type":"security_exception","reason":"unable to authenticate user [sluice] for REST request [/]"},"status":%d}`
	cases := []struct {
		name    string
		handler http.HandlerFunc
		fatal   bool
	}{
		{"401 wrong password", esAnswer(401, strings.Replace(refused, "%d", "401", 1)), true},
		{"403 key without privileges", esAnswer(403, strings.Replace(refused, "%d", "403", 1)), true},
		{"200 accepted", esAnswer(200, `{"name":"n","cluster_name":"c","version":{"number":"8.15.0"},"tagline":"You Know, for Search"}`), false},
		{"503 starting", esAnswer(503, `{"error":{"type":"cluster_block_exception","reason":"blocked"},"status":503}`), false},
		{"no answer", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(c.handler)
			defer srv.Close()
			es, err := readmodel.NewClient(readmodel.Config{URLs: []string{srv.URL}})
			if err != nil {
				t.Fatal(err)
			}
			err = readmodel.CheckCredentials(context.Background(), es, 300*time.Millisecond)
			if !c.fatal {
				if err != nil {
					t.Fatalf("want nil, got %v", err)
				}
				return
			}
			if !errors.Is(err, readmodel.ErrCredentials) {
				t.Fatalf("want ErrCredentials, got %v", err)
			}
			for _, want := range []string{"Elasticsearch refused the credentials", "ELASTICSEARCH_PASSWORD", "ELASTICSEARCH_API_KEY", "security_exception"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %q", err, want)
				}
			}
		})
	}
	// An unreachable cluster is not a credential error either.
	es, err := readmodel.NewClient(readmodel.Config{URLs: []string{"http://127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := readmodel.CheckCredentials(context.Background(), es, time.Second); err != nil {
		t.Fatalf("unreachable: want nil, got %v", err)
	}
}
