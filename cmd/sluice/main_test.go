package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/internal/testenv"
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
		{"defaults", map[string]string{"DATABASE_URL": "postgres://u:p@db/sluice"}, ""},
		{"database url required", map[string]string{"DATABASE_URL": ""}, "DATABASE_URL: must be set"},
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
	if err != nil || !strings.Contains(out, "schema is current") || !strings.Contains(out, "applied 00012") {
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

// With the registry role on a database of its own, migrate up and status
// cover both databases, each named by its variables and never by its URL
// (docs/scale-out.md).
func TestMigrateUpEveryRoleDatabase(t *testing.T) {
	main, reg := testenv.NewDatabase(t), testenv.NewDatabase(t)
	t.Setenv("DATABASE_URL", main)
	t.Setenv("REGISTRY_DATABASE_URL", reg)
	out, _, err := run(t, "migrate", "up")
	if err != nil {
		t.Fatalf("migrate up: %v", err)
	}
	for _, want := range []string{
		"applied 00012", "on DATABASE_URL (main, store)", "on REGISTRY_DATABASE_URL (registry)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("migrate up does not say %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "schema is current"); n != 2 {
		t.Errorf("%d databases said current, want 2:\n%s", n, out)
	}
	out, _, err = run(t, "migrate", "status")
	if err != nil || strings.Count(out, "0 pending") != 2 || !strings.Contains(out, "database of REGISTRY_DATABASE_URL (registry):") {
		t.Fatalf("status: %q %v", out, err)
	}
	if strings.Contains(out, reg) || strings.Contains(out, main) {
		t.Errorf("an output shows a connection string:\n%s", out)
	}
}

// A command opens the pool of its role only: with the registry's
// credentials refused, the schema and parked-record commands work (main
// and store roles), and a registry command fails naming
// REGISTRY_DATABASE_URL.
func TestCommandsOpenTheirRoleOnly(t *testing.T) {
	_, pool := testenv.NewMigratedDatabase(t)
	u, err := url.Parse(pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	good := pool.Config().ConnString()
	u.User = url.UserPassword("no_such_role_"+testenv.RandomSuffix(6), "wrong")
	t.Setenv("DATABASE_URL", good)
	t.Setenv("REGISTRY_DATABASE_URL", u.String())
	if out, _, err := run(t, "schema", "list"); err != nil {
		t.Errorf("schema list (main role): %q %v", out, err)
	}
	if out, _, err := run(t, "relay", "parked", "list"); err != nil {
		t.Errorf("relay parked list (store role): %q %v", out, err)
	}
	_, _, err = run(t, "registry", "show", "00000000-0000-0000-0000-000000000000")
	if err == nil || !strings.Contains(err.Error(), "Postgres refused the credentials in REGISTRY_DATABASE_URL") {
		t.Errorf("registry show with the registry's credentials refused: %v", err)
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
// starts its own server in the data dir, migrates it, starts every part, and
// says plainly which parts of the pipeline are missing.
func TestDevSetupOnlyStartsLocalPostgres(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	t.Setenv("SLUICE_HTTP_ADDR", "127.0.0.1:0")
	t.Setenv("SLUICE_API_ADDR", "127.0.0.1:0")
	port := testenv.FreePort(t)
	out, _, err := run(t, "dev", "--setup-only", "--data-dir", t.TempDir(), "--postgres-port", strconv.Itoa(port),
		"--es-addr", "127.0.0.1:0", "--kafka-addr", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("dev: %v\n%s", err, out)
	}
	for _, want := range []string{"postgres", "migrations", "schema current", "event store (file backend)", "self-test passed",
		"elasticsearch test server", "kafka (embedded kfake)", "relay", "instance-worker", "api", "Tour"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "MISSING") && !strings.Contains(out, "not built yet") {
		t.Errorf("missing parts must say so plainly:\n%s", out)
	}
}

// The README's tour on a running `sluice dev`: a create through the API
// arrives as a document in Elasticsearch (api → event store → relay → Kafka
// → instance worker → Elasticsearch).
func TestDevTourCreateArrivesInElasticsearch(t *testing.T) {
	t.Setenv("DATABASE_URL", testenv.NewDatabase(t))
	t.Setenv("SLUICE_HTTP_ADDR", "off")
	apiAddr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	esAddr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	t.Setenv("SLUICE_API_ADDR", apiAddr)
	t.Setenv("SLUICE_LOG_LEVEL", "warn")
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb bytes.Buffer
	root := newRootCmd(&out, &errb)
	root.SetArgs([]string{"dev", "--data-dir", t.TempDir(), "--es-addr", esAddr, "--kafka-addr", "127.0.0.1:0"})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("dev: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Error("dev did not stop within 60s of Ctrl-C")
		}
	}()

	client := &http.Client{Timeout: 5 * time.Second}
	var resp *http.Response
	var err error
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err = client.Post("http://"+apiAddr+"/v1/dbs/shop/classes/orders/instances", "application/json",
			strings.NewReader(`{"instance_id":"42","data":{"total":10}}`))
		if err == nil || time.Now().After(deadline) {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("dev stopped: %v\n%s\n%s", err, out.String(), errb.String())
		case <-time.After(200 * time.Millisecond):
		}
	}
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("create: %d %s", resp.StatusCode, body)
	}
	for time.Now().Before(deadline) {
		r, err := client.Get("http://" + esAddr + "/sluice_shop_instances/_search")
		if err == nil {
			b, _ := io.ReadAll(r.Body)
			r.Body.Close()
			if r.StatusCode == 200 && strings.Contains(string(b), `"instance_id":"42"`) && strings.Contains(string(b), `"total":10`) {
				break
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	if time.Now().After(deadline) {
		t.Fatalf("the instance did not arrive in Elasticsearch within 60s\n%s\n%s", out.String(), errb.String())
	}
	// The projection worker turns the domain event into a history document.
	for time.Now().Before(deadline) {
		r, err := client.Get("http://" + esAddr + "/sluice_shop_history/_search")
		if err == nil {
			b, _ := io.ReadAll(r.Body)
			r.Body.Close()
			if r.StatusCode == 200 && strings.Contains(string(b), "INSTANCE_CREATED") {
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("no history document within 60s\n%s\n%s", out.String(), errb.String())
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

// TestVersionFlag: `sluice --version` and `-v` print what `sluice version`
// prints and exit 0 (--version was an unknown flag, exit 2).
func TestVersionFlag(t *testing.T) {
	want := versionLine()
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"command", []string{"version"}},
		{"long flag", []string{"--version"}},
		{"short flag", []string{"-v"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := run(t, tc.args...)
			if err != nil || out != want {
				t.Fatalf("sluice %s: %q, %v; want %q", strings.Join(tc.args, " "), out, err, want)
			}
		})
	}
}

// TestEveryCommandHelpAndUnknownFlag walks the whole command tree: -h and
// --help print the command's usage and succeed, and an unknown flag is a
// usage error (exit 2) that names the flag.
func TestEveryCommandHelpAndUnknownFlag(t *testing.T) {
	var paths [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		paths = append(paths, path)
		for _, sub := range c.Commands() {
			walk(sub, append(slices.Clone(path), sub.Name()))
		}
	}
	root := newRootCmd(io.Discard, io.Discard)
	walk(root, nil)
	if len(paths) < 40 {
		t.Fatalf("walked %d commands, want the whole tree", len(paths))
	}
	for _, p := range paths {
		name := strings.Join(append([]string{"sluice"}, p...), " ")
		for _, flag := range []string{"-h", "--help"} {
			t.Run(name+" "+flag, func(t *testing.T) {
				out, _, err := run(t, append(slices.Clone(p), flag)...)
				if err != nil || !strings.Contains(out, "Usage:") {
					t.Fatalf("%s %s: %v\n%s", name, flag, err, out)
				}
			})
		}
		t.Run(name+" --no-such-flag", func(t *testing.T) {
			_, _, err := run(t, append(slices.Clone(p), "--no-such-flag")...)
			if err == nil || exitCode(err) != exitUsage || !strings.Contains(err.Error(), "--no-such-flag") {
				t.Fatalf("%s --no-such-flag: %v (exit %d); want exit 2 naming the flag", name, err, exitCode(err))
			}
		})
	}
}

// TestWrongArgumentsShowTheUsage: a command given too few or too many
// arguments says which it takes (its usage line) and exits 2; it said
// only "accepts 1 arg(s), received 0".
func TestWrongArgumentsShowTheUsage(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"registry show without the id", []string{"registry", "show"}, "accepts 1 arg(s), received 0; usage: sluice registry show <event_id>"},
		{"registry show with two ids", []string{"registry", "show", "a", "b"}, "received 2; usage: sluice registry show <event_id>"},
		{"rebuild without the name", []string{"projection", "rebuild", "--version", "2"}, "usage: sluice projection rebuild <name> --version N"},
		{"schema show without a type", []string{"schema", "show"}, "usage: sluice schema show <event_type> [version]"},
		{"version with an argument", []string{"version", "x"}, "usage: sluice version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := run(t, tc.args...)
			if err == nil || exitCode(err) != exitUsage || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("sluice %s: %v (exit %d); want exit 2 saying %q", strings.Join(tc.args, " "), err, exitCode(err), tc.want)
			}
		})
	}
}
