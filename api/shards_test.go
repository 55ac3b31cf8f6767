package api

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/eventstore"
)

// On a store of more than one shard the event API appends and serves
// streams, and the reads of the log by one global position (/v1/log and
// the subscriptions) answer 501 not_implemented naming issue 33 item 4
// at once, instead of serving a part of the log; the API stays ready.
func TestLogReadsRefuseShardedStore(t *testing.T) {
	a := newTestAPI(t, apiConfig{
		store: func(c *eventstore.Config) { c.Shards = 4 },
		deps:  func(d *Deps) { d.Events = d.Store.(EventLog) },
	})
	a.do("POST", "/v1/streams/Order/o-1/events", appendBody("any", newEvents(2, "ORDER_PLACED")...)).expect(t, http.StatusCreated, "")
	if r := a.do("GET", "/v1/streams/Order/o-1/events", "").expect(t, http.StatusOK, ""); len(r.json["events"].([]any)) != 2 {
		t.Fatalf("stream read: %s", r.body)
	}
	for _, path := range []string{"/v1/log", "/v1/log?from_position=1", "/v1/log/subscribe", "/v1/streams/Order/subscribe"} {
		t.Run(path, func(t *testing.T) {
			r := a.do("GET", path, "").expect(t, http.StatusNotImplemented, CodeNotImplemented)
			if d := r.str("detail"); !strings.Contains(d, "issue 33") || !strings.Contains(d, "4 shards") {
				t.Fatalf("detail %q", d)
			}
		})
	}
	a.do("GET", "/readyz", "").expect(t, http.StatusOK, "")
}
