package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"

	"github.com/sluicehq/sluice/esserver"
	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore/backend"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/pipeline/sluiceconfig"
	"github.com/sluicehq/sluice/shared/envelope"
)

// readOnlyS3 serves MinIO's S3 API to a client whose credentials may only
// read: GET and HEAD pass through (signed as the client signed them), every
// write is refused as S3 refuses a user without s3:PutObject — 403
// AccessDenied — and counted.
func readOnlyS3(t *testing.T, endpoint string) (string, *atomic.Int64) {
	t.Helper()
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	var refused atomic.Int64
	proxy := httputil.NewSingleHostReverseProxy(u)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			refused.Add(1)
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>Access Denied.</Message><Resource>%s</Resource></Error>`, r.URL.Path)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	return ts.URL, &refused
}

// TestReadOnlyCommandsWithReadOnlyCredentials: the commands that only read
// the event store (store segments|cat, relay checkpoint show|gaps, verify)
// work with credentials that may not write — no self-test probe — while a
// command that writes (store repair) still refuses them at its self-test.
func TestReadOnlyCommandsWithReadOnlyCredentials(t *testing.T) {
	ctx := context.Background()
	mi, err := testenv.StartMinIO(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mi.Close)
	url, pool := testenv.NewMigratedDatabase(t)
	env := map[string]string{
		"DATABASE_URL": url, "EVENT_STORE_BACKEND": "s3", "EVENT_STORE_S3_ENDPOINT": mi.Endpoint,
		"EVENT_STORE_S3_ACCESS_KEY_ID": mi.AccessKey, "EVENT_STORE_S3_SECRET_ACCESS_KEY": mi.SecretKey,
		"EVENT_STORE_BUCKET": mi.NewBucket(t),
	}
	cfg, err := sluiceconfig.Load(env)
	if err != nil {
		t.Fatal(err)
	}
	bucket, err := backend.Open(ctx, cfg.EventStore) // the writer's credentials
	if err != nil {
		t.Fatal(err)
	}
	st, err := eventstore.New(cfg.EventStore, eventstore.Deps{Pool: pool, Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	id := uuid.NewString()
	if res, err := st.AppendOne(ctx, envelope.Envelope{EventID: id, EventType: "INSTANCE_CREATED", Kind: envelope.KindDomain,
		AggregateType: "Instance", AggregateID: "shop:orders:1",
		Data: json.RawMessage(`{"db":"shop","class":"orders","instance_id":"1","data":{}}`)}); err != nil || res.Err != nil {
		t.Fatalf("append: %v %v", err, res.Err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	roURL, refused := readOnlyS3(t, mi.Endpoint)
	env["EVENT_STORE_S3_ENDPOINT"] = roURL
	es := httptest.NewServer(esserver.New())
	t.Cleanup(es.Close)
	env["ELASTICSEARCH_URLS"] = es.URL
	for k, v := range env {
		t.Setenv(k, v)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"store", "segments"}, "1 positions"},
		{[]string{"store", "cat", "--event-id", id}, id},
		{[]string{"relay", "checkpoint", "show"}, ""},
		{[]string{"relay", "gaps"}, ""}, // was "relay checkpoint gaps", no command: it printed help and passed
	} {
		out, errOut, err := run(t, c.args...)
		if err != nil {
			t.Errorf("%s with read-only credentials: %v\n%s%s", strings.Join(c.args, " "), err, out, errOut)
			continue
		}
		if !strings.Contains(out, c.want) {
			t.Errorf("%s: output lacks %q:\n%s", strings.Join(c.args, " "), c.want, out)
		}
	}
	// verify reads the store and Elasticsearch: the instance is missing
	// there (exit 4), which is its answer, not a refused probe.
	out, _, err := run(t, "verify", "--db", "shop", "--class", "orders")
	var ex *exitError
	if err != nil && (!errors.As(err, &ex) || ex.code != 4) {
		t.Errorf("verify with read-only credentials: %v\n%s", err, out)
	}
	if n := refused.Load(); n != 0 {
		t.Errorf("the read-only commands tried %d writes", n)
	}

	// The harness really is read-only: a command that writes is refused.
	if _, _, err := run(t, "store", "repair"); err == nil || !strings.Contains(err.Error(), "self-test") {
		t.Errorf("store repair with read-only credentials: %v, want its self-test refused", err)
	}
	if refused.Load() == 0 {
		t.Error("store repair wrote nothing through the read-only proxy")
	}
}
