package api

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/shared/drain"
)

// When the server that serves the API begins to shut down (drain.Signal
// closed), an open subscription ends at once with the shutdown comment and
// no further event, and a new one is refused with 503 problem+json and
// Retry-After (issue #39 part 2; docs/api.md, "Subscriptions").
func TestSubscribeEndsOnShutdown(t *testing.T) {
	for _, tc := range []struct {
		name, path string
		commits    bool
	}{
		{"log with notifications", "/v1/log/subscribe?from_position=1", true},
		{"aggregate type polling", "/v1/streams/Device/subscribe?from_position=1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := eventAPI(t, tc.commits)
			stopping := make(chan struct{})
			srv := httptest.NewUnstartedServer(a.h)
			srv.Config.BaseContext = func(net.Listener) context.Context {
				return drain.WithSignal(context.Background(), stopping)
			}
			srv.Start()
			t.Cleanup(srv.Close)
			doHandler(t, a.h, "POST", devicePath, appendBody("any", newEvents(2, "READING_TAKEN")...)).expect(t, 201, "")

			// The guard only keeps a broken build from hanging.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			br := openSSE(t, ctx, srv.URL+tc.path, "")
			got := sseRead(t, br, 2, time.Minute)

			t.Run("the open stream ends with the shutdown comment", func(t *testing.T) {
				close(stopping)
				var rest []string
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						break // the handler returned: the response is complete
					}
					if line = strings.TrimSuffix(line, "\n"); line != "" {
						rest = append(rest, line)
					}
				}
				if ctx.Err() != nil {
					t.Fatal("the stream did not end")
				}
				if len(rest) == 0 || !strings.HasPrefix(rest[len(rest)-1], ": shutting down") {
					t.Fatalf("after the shutdown signal the stream sent %q; want it to end with \": shutting down…\"", rest)
				}
				for _, l := range rest {
					if strings.HasPrefix(l, "id:") || strings.HasPrefix(l, "data:") {
						t.Fatalf("an event after the shutdown signal: %q", rest)
					}
				}
			})
			t.Run("a new subscription is refused with 503 and Retry-After", func(t *testing.T) {
				req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+tc.path, nil)
				req.Header.Set("Last-Event-ID", got[len(got)-1].id)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var p struct {
					Code   string `json:"code"`
					Status int    `json:"status"`
					Detail string `json:"detail"`
				}
				_ = json.NewDecoder(resp.Body).Decode(&p)
				if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Content-Type") != mediaProblem ||
					resp.Header.Get("Retry-After") == "" || p.Code != CodeUnavailable || !strings.Contains(p.Detail, "shutting down") {
					t.Fatalf("subscribe during shutdown: %d %s Retry-After %q %+v", resp.StatusCode,
						resp.Header.Get("Content-Type"), resp.Header.Get("Retry-After"), p)
				}
			})
			t.Run("ordinary requests are still served", func(t *testing.T) {
				resp, err := http.Get(srv.URL + "/v1/log?from_position=1")
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("GET /v1/log during shutdown: %d", resp.StatusCode)
				}
			})
		})
	}
}
