package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/shared/testenv"
)

// run executes the CLI in-process with args and returns stdout, stderr and the error.
func run(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	root := newRootCmd(&out, &errb)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), errb.String(), err
}

func TestVersion(t *testing.T) {
	out, _, err := run(t, "version")
	if err != nil || !strings.HasPrefix(out, "sluice ") {
		t.Fatalf("version: %q %v", out, err)
	}
}

func TestConfigCheck(t *testing.T) {
	cases := []struct {
		name    string
		env     map[string]string
		wantErr string
	}{
		{"defaults", nil, ""},
		{"bad int names the variable", map[string]string{"KAFKA_TOPIC_PARTITIONS": "many"}, "KAFKA_TOPIC_PARTITIONS"},
		{"registry cannot be disabled", map[string]string{"ENABLE_PROCESSED_EVENT_REGISTRY": "false"}, "not optional"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			out, _, err := run(t, "config", "check")
			if tc.wantErr == "" {
				if err != nil || !strings.Contains(out, "configuration OK") {
					t.Fatalf("%q %v", out, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("want error containing %q, got %v", tc.wantErr, err)
			}
		})
	}
}

func TestMigrateUpAndStatus(t *testing.T) {
	t.Setenv("DATABASE_URL", testenv.NewDatabase(t))
	out, _, err := run(t, "migrate", "up")
	if err != nil || !strings.Contains(out, "schema is current") || !strings.Contains(out, "applied 00001") {
		t.Fatalf("migrate up: %q %v", out, err)
	}
	out, _, err = run(t, "migrate", "up")
	if err != nil || !strings.Contains(out, "migrate up: 0 applied") {
		t.Fatalf("second migrate up: %q %v", out, err)
	}
	out, _, err = run(t, "migrate", "status")
	if err != nil || !strings.Contains(out, "0 pending") || strings.Contains(out, "pending\t") {
		t.Fatalf("status: %q %v", out, err)
	}
}

func TestMigrateNeedsDatabaseURL(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	if _, _, err := run(t, "migrate", "up"); err == nil || !strings.Contains(err.Error(), "DATABASE_URL") {
		t.Fatalf("want DATABASE_URL error, got %v", err)
	}
}

func TestConfigDocsMatchesFile(t *testing.T) {
	out, _, err := run(t, "config", "docs")
	if err != nil || !strings.HasPrefix(out, "# Configuration reference") {
		t.Fatalf("%.80q %v", out, err)
	}
}

// sluice dev on a machine with PostgreSQL binaries and no DATABASE_URL
// starts its own server in the data dir, migrates it, and says plainly which
// parts of the pipeline are missing.
func TestDevSetupOnlyStartsLocalPostgres(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	t.Setenv("SLUICE_HTTP_ADDR", "127.0.0.1:0")
	port := freePort(t)
	out, _, err := run(t, "dev", "--setup-only", "--data-dir", t.TempDir(), "--postgres-port", strconv.Itoa(port), "--es-addr", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("dev: %v\n%s", err, out)
	}
	for _, want := range []string{"postgres", "running", "migrations", "schema current", "event store (file backend)", "self-test passed", "elasticsearch test server"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "MISSING") && !strings.Contains(out, "not built yet") {
		t.Errorf("missing parts must say so plainly:\n%s", out)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func TestHealthcheck(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(200) }))
	defer ok.Close()
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(503) }))
	defer bad.Close()
	cases := []struct {
		url     string
		wantErr bool
	}{
		{ok.URL, false},
		{bad.URL, true},
		{"http://127.0.0.1:1/readyz", true},
	}
	for _, tc := range cases {
		_, _, err := run(t, "healthcheck", "--url", tc.url, "--timeout", "2s")
		if (err != nil) != tc.wantErr {
			t.Errorf("healthcheck %s: err=%v, want error=%v", tc.url, err, tc.wantErr)
		}
	}
}
