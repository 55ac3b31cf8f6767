package sluiceconfig

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/shared/config"
)

// credentials are every variable that may hold a credential, with the field
// its value lands in.
var credentials = []struct {
	name string
	get  func(*Config) string
}{
	{"DATABASE_URL", func(c *Config) string { return c.Postgres.URL.Value() }},
	{"EVENT_STORE_DATABASE_URL", func(c *Config) string { return c.Postgres.StoreURL.Value() }},
	{"REGISTRY_DATABASE_URL", func(c *Config) string { return c.Postgres.RegistryURL.Value() }},
	{"EVENT_STORE_SHARD_MAP", func(c *Config) string { return c.EventStore.ShardMap.Value() }},
	{"EVENT_STORE_S3_ACCESS_KEY_ID", func(c *Config) string { return c.EventStore.S3AccessKeyID }},
	{"EVENT_STORE_S3_SECRET_ACCESS_KEY", func(c *Config) string { return c.EventStore.S3SecretAccessKey.Value() }},
	{"KAFKA_SASL_USERNAME", func(c *Config) string { return c.Kafka.SASLUsername }},
	{"KAFKA_SASL_PASSWORD", func(c *Config) string { return c.Kafka.SASLPassword.Value() }},
	{"ELASTICSEARCH_USERNAME", func(c *Config) string { return c.Elasticsearch.Username }},
	{"ELASTICSEARCH_PASSWORD", func(c *Config) string { return c.Elasticsearch.Password.Value() }},
	{"ELASTICSEARCH_API_KEY", func(c *Config) string { return c.Elasticsearch.APIKey.Value() }},
	{"SLUICE_API_TOKENS", func(c *Config) string {
		var s []string
		for _, t := range c.API.Tokens {
			s = append(s, t.Value())
		}
		return strings.Join(s, ",")
	}},
	{"OTEL_EXPORTER_OTLP_HEADERS", func(c *Config) string { return c.Tracing.Headers.Value() }},
	{"SLUICE_ADMIN_TOKEN", func(c *Config) string { return c.API.AdminToken.Value() }},
	{"SLUICE_ADMIN_READ_TOKEN", func(c *Config) string { return c.API.AdminReadToken.Value() }},
}

// baseEnv completes a credential so that Load accepts it alone.
func baseEnv(name string) map[string]string {
	env := map[string]string{"PROCESSED_EVENT_OWNER": "w1"}
	switch name {
	case "EVENT_STORE_S3_ACCESS_KEY_ID":
		env["EVENT_STORE_S3_SECRET_ACCESS_KEY"] = "other"
	case "EVENT_STORE_S3_SECRET_ACCESS_KEY":
		env["EVENT_STORE_S3_ACCESS_KEY_ID"] = "other"
	}
	return env
}

func sampleValue(name string) string {
	switch name {
	case "DATABASE_URL", "EVENT_STORE_DATABASE_URL", "REGISTRY_DATABASE_URL":
		return "postgres://sluice:pa55word@db.internal:5432/sluice?sslmode=require"
	case "EVENT_STORE_SHARD_MAP": // one shard, the default number
		return "0=postgres://sluice:pa55word@db-shards.internal:5432/sluice?sslmode=require"
	case "SLUICE_API_TOKENS":
		return "tok-one,tok-two"
	}
	return "value-of-" + strings.ToLower(name)
}

// Every credential can be read from NAME_FILE, its trailing newline dropped;
// NAME and NAME_FILE together, an unreadable or an empty file are refused,
// naming the variables and never the content.
func TestSecretFiles(t *testing.T) {
	for _, cred := range credentials {
		t.Run(cred.name, func(t *testing.T) {
			dir := t.TempDir()
			value := sampleValue(cred.name)
			path := filepath.Join(dir, "secret")
			if err := os.WriteFile(path, []byte(value+"\n"), 0o400); err != nil {
				t.Fatal(err)
			}
			empty := filepath.Join(dir, "empty")
			if err := os.WriteFile(empty, []byte("\n"), 0o400); err != nil {
				t.Fatal(err)
			}
			file := cred.name + "_FILE"

			env := baseEnv(cred.name)
			env[file] = path
			c, err := Load(env)
			if err != nil {
				t.Fatalf("%s=%s: %v", file, path, err)
			}
			if got := cred.get(c); got != value {
				t.Errorf("%s from its file: got %q, want %q", cred.name, got, value)
			}

			for _, tc := range []struct {
				name  string
				env   map[string]string
				wants []string
			}{
				{"both set", map[string]string{cred.name: value, file: path}, []string{cred.name, file, "only one"}},
				{"missing file", map[string]string{file: filepath.Join(dir, "absent")}, []string{file, "cannot read file", "no such file"}},
				{"empty file", map[string]string{file: empty}, []string{file, "empty"}},
			} {
				env := baseEnv(cred.name)
				for k, v := range tc.env {
					env[k] = v
				}
				_, err := Load(env)
				if err == nil {
					t.Errorf("%s: accepted", tc.name)
					continue
				}
				var ve *config.VarError
				if !errors.As(err, &ve) || ve.Var != file {
					t.Errorf("%s: error is not a *config.VarError naming %s: %v", tc.name, file, err)
				}
				for _, w := range tc.wants {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%s: error %q does not say %q", tc.name, err, w)
					}
				}
				if strings.Contains(err.Error(), value) {
					t.Errorf("%s: error shows the credential: %v", tc.name, err)
				}
			}
		})
	}
	if got, want := len(credentials), countFileVars(); got != want {
		t.Errorf("%d credentials tested, %d variables have a _FILE form", got, want)
	}
}

func countFileVars() int {
	n := 0
	for _, v := range Vars() {
		if v.FileOf != "" {
			n++
		}
	}
	return n
}

// DATABASE_URL is a Postgres connection string; a wrong one is refused
// without being echoed (it holds the password).
func TestDatabaseURL(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want string // "" = accepted
	}{
		{"postgres://sluice:pw@db:5432/sluice?sslmode=require", ""},
		{"postgresql://sluice:pw@db/sluice", ""},
		{"host=db user=sluice password=pw dbname=sluice", ""},
		{"mysql://sluice:pw@db/sluice", "postgres:// or postgresql://"},
		{"postgres://sluice:pw@db:notaport/sluice", "not a valid"},
		{"postgres://sluice:pw@db/sluice?sslmode=sometimes", "not a valid Postgres connection string"},
		{"postgres://sluice:p%zzw@db/sluice", "not a valid URL"},
	} {
		_, err := Load(map[string]string{"PROCESSED_EVENT_OWNER": "w1", "DATABASE_URL": tc.url})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.url, err)
		case tc.want != "" && err == nil:
			t.Errorf("%s: accepted", tc.url)
		case tc.want != "":
			if !strings.Contains(err.Error(), "DATABASE_URL") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: error %q does not name DATABASE_URL and say %q", tc.url, err, tc.want)
			}
			if strings.Contains(err.Error(), "pw") || strings.Contains(err.Error(), "p%zzw") {
				t.Errorf("%s: error shows the password: %v", tc.url, err)
			}
		}
	}
}

// GOMEMLIMIT is accepted exactly when the Go runtime accepts it; the plain
// byte count of the Kubernetes downward API (divisor 1) is one of them.
func TestGOMEMLIMIT(t *testing.T) {
	for _, tc := range []struct {
		v  string
		ok bool
	}{
		{"536870912", true}, {"900MiB", true}, {"1GiB", true}, {"512KiB", true}, {"2TiB", true},
		{"100B", true}, {"off", true}, {"0", true},
		{"512Mi", false}, {"900MB", false}, {"1.5GiB", false}, {"-1", false}, {"+5", true}, {"+5MiB", true}, {"5-", false},
		{" 900MiB", false}, {"MiB", false}, {"9223372036854775807KiB", false},
	} {
		_, err := Load(map[string]string{"PROCESSED_EVENT_OWNER": "w1", "GOMEMLIMIT": tc.v})
		if tc.ok && err != nil {
			t.Errorf("GOMEMLIMIT=%q refused: %v", tc.v, err)
		}
		if !tc.ok && (err == nil || !strings.Contains(err.Error(), "GOMEMLIMIT")) {
			t.Errorf("GOMEMLIMIT=%q: got %v, want an error naming GOMEMLIMIT", tc.v, err)
		}
	}
}

// GOMAXPROCS is accepted exactly when the Go runtime would use it (a
// positive decimal int32); what the runtime ignores without a word is
// refused. The downward API's whole CPUs (divisor 1) are such numbers.
func TestGOMAXPROCS(t *testing.T) {
	for _, tc := range []struct {
		v  string
		ok bool
	}{
		{"1", true}, {"2", true}, {"64", true}, {"01", true}, {"2147483647", true},
		{"+2", true}, {"0", false}, {"-1", false}, {"+0", false}, {" 1", false}, {"1.5", false}, {"500m", false},
		{"2147483648", false}, {"two", false},
	} {
		t.Run(tc.v, func(t *testing.T) {
			_, err := Load(map[string]string{"PROCESSED_EVENT_OWNER": "w1", "GOMAXPROCS": tc.v})
			if tc.ok && err != nil {
				t.Errorf("GOMAXPROCS=%q refused: %v", tc.v, err)
			}
			if !tc.ok && (err == nil || !strings.Contains(err.Error(), "GOMAXPROCS")) {
				t.Errorf("GOMAXPROCS=%q: got %v, want an error naming GOMAXPROCS", tc.v, err)
			}
		})
	}
}

// Check refuses an unset DATABASE_URL and every variable that looks meant
// for sluice but is not one it reads, naming the one probably meant.
func TestCheck(t *testing.T) {
	ok := map[string]string{"PROCESSED_EVENT_OWNER": "w1", "DATABASE_URL": "postgres://u:p@db/sluice"}
	for _, tc := range []struct {
		name  string
		env   map[string]string
		wants []string // each must appear; nil = accepted
	}{
		{"valid", map[string]string{}, nil},
		{"unrelated variables", map[string]string{"PATH": "/bin", "HOME": "/", "GOOS": "linux", "HOSTNAME": "x", "LANG": "C"}, nil},
		{"test harness", map[string]string{"SLUICE_TEST_DATABASE_URL": "x", "SLUICE_MINIO_BIN": "x", "SLUICE_SOAK": "1", "SLUICE_CACHE_DIR": "/c"}, nil},
		{"service links", map[string]string{"SLUICE_API_SERVICE_HOST": "10.0.0.1", "SLUICE_API_PORT": "tcp://10.0.0.1:8080", "KAFKA_PORT_9092_TCP_ADDR": "10.0.0.2", "KAFKA_SERVICE_PORT_BROKER": "9092"}, nil},
		{"file form", map[string]string{"DATABASE_URL": "", "DATABASE_URL_FILE": "/dev/null"}, []string{"DATABASE_URL_FILE", "empty"}},
		{"database unset", map[string]string{"DATABASE_URL": ""}, []string{"DATABASE_URL: must be set"}},
		{"database invalid", map[string]string{"DATABASE_URL": "localhost:5432"}, []string{"DATABASE_URL", "not a valid Postgres connection string"}},
		{"backend typo", map[string]string{"EVENT_STORE_BAKEND": "s3"}, []string{"EVENT_STORE_BAKEND", "did you mean EVENT_STORE_BACKEND?"}},
		{"brokers singular", map[string]string{"KAFKA_BROKER": "k:9092"}, []string{"KAFKA_BROKER", "did you mean KAFKA_BROKERS?"}},
		{"transposition", map[string]string{"DATABSE_URL": "x"}, []string{"DATABSE_URL", "did you mean DATABASE_URL?"}},
		{"no prefix, near", map[string]string{"COMMANDS_TOPC": "x"}, []string{"did you mean COMMANDS_TOPIC?"}},
		{"prefixed, far", map[string]string{"PROCESSED_EVENT_TTL": "1"}, []string{"PROCESSED_EVENT_TTL", "not a variable sluice reads", "did you mean"}},
		{"other prefixes", map[string]string{"EVENT_PUBLISHER_BATCH": "1", "SLUICE_LOGLEVEL": "1", "ELASTICSEARCH_URL": "1", "INSTANCE_WORKER_RETRIES": "1", "PROJECTION_WORKER_RETRIES": "1"},
			[]string{"EVENT_PUBLISHER_BATCH", "SLUICE_LOGLEVEL: is not a variable sluice reads; did you mean SLUICE_LOG_LEVEL?", "ELASTICSEARCH_URL: is not a variable sluice reads; did you mean ELASTICSEARCH_URLS?", "INSTANCE_WORKER_RETRIES", "PROJECTION_WORKER_RETRIES"}},
		{"lower case", map[string]string{"kafka_brokers": "k:9092"}, []string{"kafka_brokers", "upper case: did you mean KAFKA_BROKERS?"}},
		{"file of a non-credential", map[string]string{"KAFKA_BROKERS_FILE": "/x"}, []string{"KAFKA_BROKERS_FILE", "only credentials"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range ok {
				env[k] = v
			}
			for k, v := range tc.env {
				if v == "" {
					delete(env, k)
				} else {
					env[k] = v
				}
			}
			_, err := Check(env)
			if tc.wants == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			for _, e := range flatten(err) {
				var ve *config.VarError
				if !errors.As(e, &ve) || ve.Var == "" {
					t.Errorf("part %q names no variable", e)
				}
			}
		})
	}
}

func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

// Settings (sluice config show) shows every variable once, credentials as
// [redacted], and no credential anywhere in its output, in the Config's
// fmt or slog forms, or in the errors of a bad value.
func TestSecretsNeverShown(t *testing.T) {
	env := map[string]string{"PROCESSED_EVENT_OWNER": "w1"}
	var secrets []string
	for _, cred := range credentials {
		env[cred.name] = sampleValue(cred.name)
		if isSecret(cred.name) {
			secrets = append(secrets, "pa55word", "tok-one", "tok-two", sampleValue(cred.name))
		}
	}
	c, err := Load(env)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	shown := map[string]string{}
	for _, s := range c.Settings() {
		if _, dup := shown[s.Key]; dup {
			t.Errorf("%s shown twice", s.Key)
		}
		shown[s.Key] = s.Value
		fmt.Fprintf(&b, "%s=%s\n", s.Key, s.Value)
	}
	for _, v := range Vars() {
		if _, ok := shown[v.Key]; !ok && v.FileOf == "" {
			t.Errorf("%s not shown", v.Key)
		}
		if v.Secret && shown[v.Key] != "[redacted]" {
			t.Errorf("%s shown as %q, want [redacted]", v.Key, shown[v.Key])
		}
	}
	if shown["KAFKA_BROKERS"] != "localhost:9092" || shown["EVENT_PUBLISHER_LOOKBACK_SECONDS"] != "10m0s" {
		t.Errorf("effective values: KAFKA_BROKERS=%q EVENT_PUBLISHER_LOOKBACK_SECONDS=%q", shown["KAFKA_BROKERS"], shown["EVENT_PUBLISHER_LOOKBACK_SECONDS"])
	}
	slog.New(slog.NewJSONHandler(&b, nil)).Info("cfg", "config", c)
	fmt.Fprintf(&b, "%v %+v", c, c)
	bad := map[string]string{"PROCESSED_EVENT_OWNER": "w1", "DATABASE_URL": "mysql://u:pa55word@h/db", "SLUICE_API_TOKENS": "tok-one", "KAFKA_SASL_MECHANISM": "GSSAPI"}
	if _, err := Check(bad); err == nil {
		t.Error("bad configuration accepted")
	} else {
		b.WriteString(err.Error())
	}
	for _, s := range secrets {
		if strings.Contains(b.String(), s) {
			t.Errorf("credential %q shown:\n%s", s, b.String())
		}
	}
}

// isSecret reports whether key is a credential whose value is never shown.
func isSecret(key string) bool {
	for _, v := range Vars() {
		if v.Key == key {
			return v.Secret
		}
	}
	return false
}
