package main

import (
	"bytes"
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// TestWrongCredentialIsFatalAtStartup: a service started with credentials
// its dependency refuses exits at once with an error naming the dependency
// and the variable, instead of waiting the "outage" out for ever.
func TestWrongCredentialIsFatalAtStartup(t *testing.T) {
	mi, err := testenv.StartMinIO(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mi.Close)
	good := testenv.NewDatabase(t)
	u, err := url.Parse(good)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("no_such_role_"+testenv.RandomSuffix(6), "wrong")
	badDB := u.String()
	bucket := mi.NewBucket(t)

	cases := []struct {
		name      string
		env       map[string]string
		wantParts []string
	}{
		{"S3 secret", map[string]string{"DATABASE_URL": good, "EVENT_STORE_S3_SECRET_ACCESS_KEY": "not-the-secret"},
			[]string{"S3 refused the credentials", "EVENT_STORE_S3_SECRET_ACCESS_KEY", "SignatureDoesNotMatch"}},
		{"S3 access key", map[string]string{"DATABASE_URL": good, "EVENT_STORE_S3_ACCESS_KEY_ID": "nobody"},
			[]string{"S3 refused the credentials", "EVENT_STORE_S3_ACCESS_KEY_ID", "InvalidAccessKeyId"}},
		{"Postgres role", map[string]string{"DATABASE_URL": badDB},
			[]string{"Postgres refused the credentials in DATABASE_URL", "SQLSTATE 28"}},
		// The relay's database is the store role's (docs/scale-out.md).
		{"Postgres role of the store", map[string]string{"DATABASE_URL": good, "EVENT_STORE_DATABASE_URL": badDB},
			[]string{"Postgres refused the credentials in EVENT_STORE_DATABASE_URL", "SQLSTATE 28"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := map[string]string{
				"EVENT_STORE_BACKEND": "s3", "EVENT_STORE_S3_ENDPOINT": mi.Endpoint, "EVENT_STORE_BUCKET": bucket,
				"EVENT_STORE_S3_ACCESS_KEY_ID": mi.AccessKey, "EVENT_STORE_S3_SECRET_ACCESS_KEY": mi.SecretKey,
				"SLUICE_HTTP_ADDR": "off", "KAFKA_BROKERS": "127.0.0.1:1",
			}
			for k, v := range c.env {
				env[k] = v
			}
			for k, v := range env {
				t.Setenv(k, v)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var out, errb bytes.Buffer
			root := newRootCmd(&out, &errb)
			root.SetArgs([]string{"relay"})
			start := time.Now()
			err := root.ExecuteContext(ctx)
			if ctx.Err() != nil {
				t.Fatalf("relay still waiting after %s (err %v): a refused credential must end start-up", time.Since(start).Round(time.Second), err)
			}
			if !errors.Is(err, ErrCredentials) {
				t.Fatalf("err %v, want ErrCredentials", err)
			}
			for _, w := range c.wantParts {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "not-the-secret") || strings.Contains(err.Error(), "wrong") {
				t.Errorf("error shows the credential: %v", err)
			}
		})
	}
}
