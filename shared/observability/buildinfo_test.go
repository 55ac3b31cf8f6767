package observability

import (
	"context"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
)

// A process registry serves sluice_build_info = 1 labelled with the
// version and commit it was given and the Go version (issue 23.5), on
// /metrics like every other series.
func TestProcessRegistryServesBuildInfo(t *testing.T) {
	tests := []struct {
		name, version, commit string
	}{
		{"release", "v1.4.2", "0123abc"},
		{"dev build", "dev", "unknown"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv, err := Listen("127.0.0.1:0", Handler(NewProcessRegistry(tc.version, tc.commit), NewHealth()))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- srv.Serve(ctx) }()
			t.Cleanup(func() { cancel(); <-done })
			resp, err := http.Get("http://" + srv.Addr() + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			want := `sluice_build_info{commit="` + tc.commit + `",go_version="` + runtime.Version() + `",version="` + tc.version + `"} 1`
			if !strings.Contains(string(body), want+"\n") {
				t.Fatalf("/metrics lacks %s", want)
			}
		})
	}
}
