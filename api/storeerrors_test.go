package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/shared/envelope"
)

// The event store's typed failures reach the client as the statuses the
// contract names: an object-storage outage is 503 with Retry-After and the
// command id to retry with (issue 26), an envelope whose stored line would
// exceed EVENT_STORE_MAX_ENVELOPE_BYTES is 413 naming the limit (issue 21
// item 4).
func TestStoreErrorStatuses(t *testing.T) {
	outage := fmt.Errorf("eventstore: write segment k: %w", objstore.ErrUnavailable)
	cases := []struct {
		name       string
		err        error
		status     int
		code       string
		retryAfter string
		limit      string
	}{
		{"object store hung", &eventstore.UnavailableError{Dependency: "objectstore", RetryAfter: 2 * time.Second, Err: outage}, http.StatusServiceUnavailable, CodeUnavailable, "2", ""},
		{"object store refused, not written", &eventstore.UnavailableError{Dependency: "objectstore", NotWritten: true, RetryAfter: 1500 * time.Millisecond, Err: outage}, http.StatusServiceUnavailable, CodeUnavailable, "2", ""},
		{"line over the limit", &envelope.ValidationError{Code: envelope.CodeLimitExceeded, Limit: "4096 bytes", Reason: "envelope of 4097 bytes as stored exceeds the limit of 4096 bytes"}, http.StatusRequestEntityTooLarge, CodeLimitExceeded, "", "4096 bytes"},
		{"unknown store failure", errors.New("eventstore: commit: connection reset"), http.StatusServiceUnavailable, CodeUnavailable, "1", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			writeError(rec, fromAppend(c.err, "cmd-1"))
			if rec.Code != c.status {
				t.Fatalf("status %d, want %d", rec.Code, c.status)
			}
			if got := rec.Header().Get("Retry-After"); got != c.retryAfter {
				t.Errorf("Retry-After %q, want %q", got, c.retryAfter)
			}
			var body map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatalf("body %q: %v", rec.Body.String(), err)
			}
			if body["error"] != c.code {
				t.Errorf("error code %v, want %s", body["error"], c.code)
			}
			if c.limit != "" && body["limit"] != c.limit {
				t.Errorf("limit %v, want %s", body["limit"], c.limit)
			}
			if c.status == http.StatusServiceUnavailable && body["command_id"] != "cmd-1" {
				t.Errorf("command_id %v, want the id to retry with", body["command_id"])
			}
		})
	}
}
