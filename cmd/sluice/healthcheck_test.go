package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Without --url, healthcheck probes /readyz of the health server
// SLUICE_HTTP_ADDR names (it probed :9090 whatever the service listened
// on): an unspecified host on the loopback; off or an address that is not
// host:port is a usage error (exit 2); --url still wins.
func TestHealthcheckFollowsHTTPAddr(t *testing.T) {
	ready := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer ready.Close()
	notReady := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(503) }))
	defer notReady.Close()
	hostPort := strings.TrimPrefix(ready.URL, "http://")
	_, port, _ := strings.Cut(hostPort, ":")
	cases := []struct {
		name, addr string
		args       []string
		code       int // 0 ok, -1 any failure
		says       string
	}{
		{"host and port", hostPort, nil, 0, ready.URL + "/readyz"},
		{"port only", ":" + port, nil, 0, "http://127.0.0.1:" + port + "/readyz"},
		{"any address", "0.0.0.0:" + port, nil, 0, "http://127.0.0.1:" + port + "/readyz"},
		{"not ready", strings.TrimPrefix(notReady.URL, "http://"), nil, -1, "503"},
		{"off", "off", nil, exitUsage, "SLUICE_HTTP_ADDR is off"},
		{"not host:port", "9090", nil, exitUsage, "not host:port"},
		{"--url wins", "off", []string{"--url", ready.URL + "/readyz"}, 0, ready.URL + "/readyz"},
		{"--url without a scheme", "off", []string{"--url", "notaurl"}, exitUsage, `--url "notaurl"`},
		{"--url of another scheme", "off", []string{"--url", "ftp://h/readyz"}, exitUsage, "--url"},
		{"--url without a host", "off", []string{"--url", "http:///readyz"}, exitUsage, "--url"},
		{"--timeout 0", "off", []string{"--url", ready.URL + "/readyz", "--timeout", "0s"}, exitUsage, "--timeout 0s"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("SLUICE_HTTP_ADDR", c.addr)
			out, _, err := run(t, append([]string{"healthcheck", "--timeout", "5s"}, c.args...)...)
			switch {
			case c.code == -1 && err == nil:
				t.Fatalf("healthcheck passed: %s", out)
			case c.code >= 0:
				checkGuardStep(t, c.name, out, err, c.code)
			}
			if msg := out + errString(err); !strings.Contains(msg, c.says) {
				t.Errorf("output %q lacks %q", msg, c.says)
			}
		})
	}
	t.Run("the default", func(t *testing.T) {
		if u, err := healthcheckURL(":9090"); err != nil || u != "http://127.0.0.1:9090/readyz" {
			t.Fatalf("%q %v", u, err)
		}
	})
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
