package api

import (
	"bytes"
	"os"
	"testing"
)

// docs/openapi.json is the copy of the served document kept with the docs
// (docs/api.md); `make docs` refreshes it.
func TestOpenAPIDocsCopyMatches(t *testing.T) {
	served, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	kept, err := os.ReadFile("../docs/openapi.json")
	if err != nil {
		t.Fatalf("docs/openapi.json: %v (run `make docs`)", err)
	}
	if !bytes.Equal(served, kept) {
		t.Fatal("docs/openapi.json differs from api/openapi.json: run `make docs`")
	}
}

// The served document does not promise what the API stopped doing:
// GET /v1/log and the subscriptions read by cursor on a store of several
// shards (docs/api.md#the-log-cursor), yet the document said they answer
// 501 there until "per-shard cursors" (issue 33 item 4) arrive.
func TestOpenAPINoStaleShardClaims(t *testing.T) {
	doc, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, stale string }{
		{"issue 33 as future work", "issue 33 item 4"},
		{"the log as 501", "501: GET /v1/log and the subscriptions"},
		{"a read walking the log by position", "this read walks the log by one global position"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if bytes.Contains(doc, []byte(tc.stale)) {
				t.Errorf("api/openapi.json still says %q", tc.stale)
			}
		})
	}
}
