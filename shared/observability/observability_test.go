package observability

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestLoggerFormatsAndLevels(t *testing.T) {
	cases := []struct {
		format, level string
		wantErr       bool
		wantJSON      bool
		debugShown    bool
	}{
		{"json", "info", false, true, false},
		{"json", "debug", false, true, true},
		{"text", "warn", false, false, false},
		{"xml", "info", true, false, false},
		{"json", "loud", true, false, false},
	}
	for _, tc := range cases {
		var buf bytes.Buffer
		l, err := NewLogger(&buf, tc.format, tc.level)
		if (err != nil) != tc.wantErr {
			t.Fatalf("%s/%s: err=%v", tc.format, tc.level, err)
		}
		if err != nil {
			continue
		}
		l.Debug("dbg")
		l.Warn("hello", "k", 1)
		out := buf.String()
		if strings.Contains(out, "dbg") != tc.debugShown {
			t.Errorf("%s/%s: debug shown=%v: %s", tc.format, tc.level, !tc.debugShown, out)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		last := lines[len(lines)-1]
		var m map[string]any
		isJSON := json.Unmarshal([]byte(last), &m) == nil
		if isJSON != tc.wantJSON || (isJSON && m["msg"] != "hello") {
			t.Errorf("%s: line %q json=%v", tc.format, last, isJSON)
		}
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestServerEndpoints(t *testing.T) {
	reg := NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_test_things_total", Help: "things"})
	reg.MustRegister(c)
	c.Add(3)
	h := NewHealth()
	var dbDown = errors.New("postgres unreachable")
	var fail bool
	h.AddReadiness("postgres", func(context.Context) error {
		if fail {
			return dbDown
		}
		return nil
	})
	hb := NewHeartbeat(time.Hour)
	h.AddLiveness("loop", hb.Check)

	srv, err := Listen("127.0.0.1:0", Handler(reg, h))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	base := "http://" + srv.Addr()

	if code, body := get(t, base+"/metrics"); code != 200 || !strings.Contains(body, "sluice_test_things_total 3") || !strings.Contains(body, "go_goroutines") {
		t.Fatalf("/metrics %d: %.300s", code, body)
	}
	if code, body := get(t, base+"/readyz"); code != 200 || !strings.Contains(body, `"postgres":"ok"`) {
		t.Fatalf("/readyz %d %s", code, body)
	}
	fail = true
	if code, body := get(t, base+"/readyz"); code != 503 || !strings.Contains(body, "postgres unreachable") {
		t.Fatalf("/readyz while failing %d %s", code, body)
	}
	if err := h.Ready(ctx); err == nil || !strings.Contains(err.Error(), "postgres") {
		t.Fatalf("Ready: %v", err)
	}
	if code, _ := get(t, base+"/livez"); code != 200 {
		t.Fatalf("/livez %d", code)
	}
	// A stale heartbeat turns liveness red.
	hb.now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	if code, body := get(t, base+"/livez"); code != 503 || !strings.Contains(body, "heartbeat") {
		t.Fatalf("/livez stale %d %s", code, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
