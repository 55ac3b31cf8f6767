package deploy_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/pipeline/sluiceconfig"
)

// runSluice runs the built binary with exactly env (no inherited variables
// but PATH and HOME) and returns its exit code and its stdout and stderr.
func runSluice(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, sluiceBin, args...)
	cmd.Env = environ(env)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("sluice %v: %v", args, err)
	}
	return code, out.String(), errb.String()
}

func environ(env map[string]string) []string {
	out := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// TestConfigCheckFailsLoudly: the built binary's `sluice config check`
// exits 1 naming the variable when DATABASE_URL is unset or not a Postgres
// connection string, and when a variable looks like a typo of a known one,
// naming the one meant; a valid environment passes.
func TestConfigCheckFailsLoudly(t *testing.T) {
	valid := map[string]string{
		"DATABASE_URL":  "postgres://sluice:pw@postgres:5432/sluice?sslmode=require",
		"KAFKA_BROKERS": "kafka:9092",
	}
	for _, tc := range []struct {
		name  string
		env   map[string]string // over valid; "" removes
		wants []string          // nil: exit 0
	}{
		{"valid", nil, nil},
		{"valid with Kubernetes service links", map[string]string{"SLUICE_API_PORT": "tcp://10.0.0.1:8080", "KAFKA_SERVICE_HOST": "10.0.0.2"}, nil},
		{"DATABASE_URL unset", map[string]string{"DATABASE_URL": ""}, []string{"DATABASE_URL: must be set"}},
		{"DATABASE_URL not a URL", map[string]string{"DATABASE_URL": "postgres:5432"}, []string{"DATABASE_URL", "not a valid Postgres connection string"}},
		{"DATABASE_URL of another database", map[string]string{"DATABASE_URL": "mysql://sluice:pw@db/sluice"}, []string{"DATABASE_URL", "postgres:// or postgresql://"}},
		{"EVENT_STORE_BAKEND", map[string]string{"EVENT_STORE_BAKEND": "file"}, []string{"EVENT_STORE_BAKEND: is not a variable sluice reads; did you mean EVENT_STORE_BACKEND?"}},
		{"KAFKA_BROKER", map[string]string{"KAFKA_BROKER": "k:9092"}, []string{"KAFKA_BROKER: is not a variable sluice reads; did you mean KAFKA_BROKERS?"}},
		{"PROJECTION_WORKER_MAX_RETRY", map[string]string{"PROJECTION_WORKER_MAX_RETRY": "3"}, []string{"did you mean PROJECTION_WORKER_MAX_RETRIES?"}},
		{"PROCESSED_EVENT_LEASE_TIMEOUT", map[string]string{"PROCESSED_EVENT_LEASE_TIMEOUT": "60"}, []string{"PROCESSED_EVENT_LEASE_TIMEOUT: is not a variable sluice reads; did you mean"}},
		{"DATABSE_URL beside DATABASE_URL", map[string]string{"DATABSE_URL": "x"}, []string{"did you mean DATABASE_URL?"}},
		{"every problem at once", map[string]string{"DATABASE_URL": "", "EVENT_PUBLISHER_BACH_SIZE": "10", "ELASTICSEARCH_URL": "http://es:9200"},
			[]string{"DATABASE_URL: must be set", "did you mean EVENT_PUBLISHER_BATCH_SIZE?", "did you mean ELASTICSEARCH_URLS?"}},
		{"credential and its file", map[string]string{"ELASTICSEARCH_PASSWORD": "pw", "ELASTICSEARCH_PASSWORD_FILE": "/dev/null"}, []string{"ELASTICSEARCH_PASSWORD_FILE", "both ELASTICSEARCH_PASSWORD and ELASTICSEARCH_PASSWORD_FILE are set"}},
		{"a value sluice refuses", map[string]string{"KAFKA_SESSION_TIMEOUT": "1s"}, []string{"KAFKA_SESSION_TIMEOUT"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range valid {
				env[k] = v
			}
			for k, v := range tc.env {
				if v == "" {
					delete(env, k)
				} else {
					env[k] = v
				}
			}
			code, out, errOut := runSluice(t, env, "config", "check")
			if tc.wants == nil {
				if code != 0 || !strings.Contains(out, "configuration OK") {
					t.Fatalf("exit %d, want 0 and configuration OK:\n%s%s", code, out, errOut)
				}
				return
			}
			if code != 1 {
				t.Errorf("exit %d, want 1:\n%s%s", code, out, errOut)
			}
			for _, w := range tc.wants {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr does not say %q:\n%s", w, errOut)
				}
			}
		})
	}
}

// TestSecretsNeverLeak runs the built binary with a value in every
// credential, given both as variables and as *_FILE files, and looks for
// each value in everything the binary says: config show, config check (valid
// and refused configurations), config docs, migrate's output, the API
// service's logs at debug level through start-up, requests (accepted and
// refused tokens) and shutdown, its /metrics, /livez and /readyz, its
// answers, and the error of a start-up refused by the object store.
func TestSecretsNeverLeak(t *testing.T) {
	ctx := context.Background()
	mi, err := testenv.StartMinIO(ctx)
	if err != nil {
		t.Fatalf("MinIO is required: %v", err)
	}
	t.Cleanup(mi.Close)
	bucket := mi.NewBucket(t)

	suffix := testenv.RandomSuffix(8)
	dbURL, pgPassword := withPassword(t, testenv.NewDatabase(t), "pg-pa55-"+suffix)
	tokenA, tokenB := "tok-a-"+suffix, "tok-b-"+suffix
	secrets := map[string]string{
		"Postgres password":      pgPassword,
		"S3 secret key":          mi.SecretKey,
		"Kafka SASL password":    "kafka-pa55-" + suffix,
		"Elasticsearch password": "es-pa55-" + suffix,
		"Elasticsearch API key":  "es-key-" + suffix,
		"API token A":            tokenA,
		"API token B":            tokenB,
		"wrong S3 secret key":    "wrong-s3-" + suffix,
	}
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content+"\n"), 0o400); err != nil {
			t.Fatal(err)
		}
		return p
	}
	apiPort, httpPort := testenv.FreePort(t), testenv.FreePort(t)
	env := map[string]string{
		"DATABASE_URL_FILE":                     file("database-url", dbURL),
		"EVENT_STORE_BACKEND":                   "s3",
		"EVENT_STORE_BUCKET":                    bucket,
		"EVENT_STORE_S3_ENDPOINT":               mi.Endpoint,
		"EVENT_STORE_S3_ACCESS_KEY_ID":          mi.AccessKey,
		"EVENT_STORE_S3_SECRET_ACCESS_KEY_FILE": file("s3-secret", mi.SecretKey),
		"KAFKA_SASL_MECHANISM":                  "PLAIN",
		"KAFKA_SASL_USERNAME":                   "sluice",
		"KAFKA_SASL_PASSWORD":                   secrets["Kafka SASL password"],
		"ELASTICSEARCH_USERNAME":                "sluice",
		"ELASTICSEARCH_PASSWORD_FILE":           file("es-password", secrets["Elasticsearch password"]),
		"ELASTICSEARCH_API_KEY":                 secrets["Elasticsearch API key"],
		"SLUICE_API_TOKENS_FILE":                file("api-tokens", tokenA+","+tokenB),
		"SLUICE_API_ADDR":                       fmt.Sprintf("127.0.0.1:%d", apiPort),
		"SLUICE_HTTP_ADDR":                      fmt.Sprintf("127.0.0.1:%d", httpPort),
		"SLUICE_LOG_LEVEL":                      "debug",
		"PROCESSED_EVENT_OWNER":                 "leak-test",
	}
	with := func(over map[string]string) map[string]string {
		e := map[string]string{}
		for k, v := range env {
			e[k] = v
		}
		for k, v := range over {
			if v == "" {
				delete(e, k)
			} else {
				e[k] = v
			}
		}
		return e
	}
	var said strings.Builder
	record := func(what, out string) { fmt.Fprintf(&said, "\n--- %s\n%s", what, out) }

	code, out, errOut := runSluice(t, env, "migrate", "up")
	record("migrate up", out+errOut)
	if code != 0 {
		t.Fatalf("migrate up: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runSluice(t, env, "config", "check")
	record("config check", out+errOut)
	if code != 0 {
		t.Fatalf("config check of the test's configuration: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runSluice(t, env, "config", "show")
	record("config show", out+errOut)
	if code != 0 || !strings.Contains(out, "SLUICE_API_TOKENS=[redacted]\n") || !strings.Contains(out, "DATABASE_URL=[redacted]\n") {
		t.Errorf("config show: exit %d, want the credentials as [redacted]:\n%s%s", code, out, errOut)
	}
	_, out, errOut = runSluice(t, env, "config", "docs")
	record("config docs", out+errOut)
	for _, bad := range []map[string]string{
		{"DATABASE_URL_FILE": "", "DATABASE_URL": "mysql://sluice:" + pgPassword + "@db/sluice"},
		{"DATABASE_URL_FILE": "", "DATABASE_URL": "postgres://sluice:" + pgPassword + "@db:port/sluice"},
		{"ELASTICSEARCH_PASSWORD": secrets["Elasticsearch password"]},
		{"SLUICE_API_TOKENS": tokenA},
		{"KAFKA_SASL_MECHANISM": "GSSAPI", "EVENT_STORE_S3_ACCESS_KEY_ID": ""},
	} {
		code, out, errOut = runSluice(t, with(bad), "config", "check")
		record(fmt.Sprintf("config check %v", keys(bad)), out+errOut)
		if code != 1 {
			t.Errorf("config check with %v: exit %d, want 1", keys(bad), code)
		}
		_, out, errOut = runSluice(t, with(bad), "config", "show")
		record(fmt.Sprintf("config show %v", keys(bad)), out+errOut)
	}

	// A start-up the object store refuses (a wrong secret key: 403) ends at
	// once with an error that must not show the key it was given.
	code, out, errOut = runSluice(t, with(map[string]string{"EVENT_STORE_S3_SECRET_ACCESS_KEY_FILE": file("wrong-s3", secrets["wrong S3 secret key"])}), "api")
	record("api with a wrong S3 key", out+errOut)
	if code == 0 {
		t.Errorf("api started with a wrong S3 secret key:\n%s%s", out, errOut)
	}

	// The API service, through start-up, requests and shutdown.
	cmd := exec.Command(sluiceBin, "api")
	cmd.Env = environ(env)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	obs := fmt.Sprintf("http://127.0.0.1:%d", httpPort)
	api := fmt.Sprintf("http://127.0.0.1:%d", apiPort)
	testenv.WaitFor(t, time.Minute, "the API to be ready", func() bool {
		resp, err := http.Get(obs + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	get := func(what, method, u, token string, body string) int {
		req, err := http.NewRequest(method, u, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		record(fmt.Sprintf("%s: %d %v", what, resp.StatusCode, resp.Header), string(b))
		return resp.StatusCode
	}
	get("/metrics", "GET", obs+"/metrics", "", "")
	get("/livez", "GET", obs+"/livez", "", "")
	get("/readyz", "GET", obs+"/readyz", "", "")
	commandURL := api + "/v1/commands/" + "0192f7a8-0000-7000-8000-000000000001"
	if code := get("no token", "GET", commandURL, "", ""); code != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", code)
	}
	if code := get("wrong token", "GET", commandURL, "not-"+tokenA, ""); code != http.StatusUnauthorized {
		t.Errorf("wrong token: %d, want 401", code)
	}
	for _, tok := range []string{tokenA, tokenB} {
		if code := get("token from the file", "GET", commandURL, tok, ""); code == http.StatusUnauthorized {
			t.Errorf("a token of SLUICE_API_TOKENS_FILE is refused (the file was not read)")
		}
	}
	get("bad request", "POST", api+"/v1/instances", tokenA, `{"not":"an instance"`)
	get("/metrics after requests", "GET", obs+"/metrics", "", "")
	get("/metrics on the API port", "GET", api+"/metrics", "", "")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = <-exited
	stopped = true
	record("api logs", logs.String())
	if err != nil {
		t.Errorf("api did not stop cleanly on SIGTERM: %v", err)
	}
	if !strings.Contains(logs.String(), `"level":"DEBUG"`) && !strings.Contains(logs.String(), `"level":"INFO"`) {
		t.Errorf("the API logged nothing, so there was nothing to search:\n%s", logs.String())
	}

	all := said.String()
	for what, s := range secrets {
		for _, form := range []string{s, url.QueryEscape(s), url.PathEscape(s)} {
			if strings.Contains(all, form) {
				i := strings.Index(all, form)
				t.Errorf("the %s (%q) appears in sluice's output: …%s…", what, form, all[max(0, i-300):min(len(all), i+100)])
				break
			}
		}
	}
}

// withPassword returns the connection string with password set (added when
// it has none, as a query parameter: the local server trusts its socket and
// ignores it) and the password.
func withPassword(t *testing.T, conn, password string) (string, string) {
	t.Helper()
	u, err := url.Parse(conn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("test database URL is not a postgres:// URL")
	}
	if p, ok := u.User.Password(); ok && p != "" {
		return conn, p
	}
	q := u.Query()
	q.Set("password", password)
	u.RawQuery = q.Encode()
	return u.String(), password
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestGOMEMLIMITAsTheRuntimeReadsIt: sluice's validation accepts a
// GOMEMLIMIT exactly when the Go runtime does (a malformed one aborts the
// process before main), including the plain byte count the manifests'
// downward API gives.
func TestGOMEMLIMITAsTheRuntimeReadsIt(t *testing.T) {
	for _, v := range []string{
		"536870912", "268435456", "900MiB", "1GiB", "64KiB", "1TiB", "100B", "0", "off",
		"512Mi", "900MB", "1.5GiB", "-1", "+5", "+5MiB", "5-", "--5", " 900MiB", "MiB", "1e9", "0x100", "9223372036854775807KiB",
	} {
		code, out, errOut := runSluice(t, map[string]string{"GOMEMLIMIT": v}, "version")
		runtimeOK := code == 0
		_, err := sluiceconfig.Load(map[string]string{"GOMEMLIMIT": v, "PROCESSED_EVENT_OWNER": "w1"})
		if configOK := err == nil; configOK != runtimeOK {
			t.Errorf("GOMEMLIMIT=%q: the Go runtime accepts it: %v (exit %d %s%s); sluice's validation accepts it: %v (%v)",
				v, runtimeOK, code, out, errOut, configOK, err)
		}
	}
}
