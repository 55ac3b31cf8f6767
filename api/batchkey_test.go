package api

import (
	"encoding/json"
	"strings"
	"testing"
)

// A batch item whose key was used for another request is refused naming
// where its key came from: the item's idempotency_key, or the request's
// Idempotency-Key when the item has none. It named Idempotency-Key in
// both cases, a header the first kind of request does not send.
func TestBatchKeyReusedNamesItsSource(t *testing.T) {
	a := newTestAPI(t, apiConfig{})
	a.do("POST", base, `{"instance_id":"k-0"}`, "Idempotency-Key: used-once").expect(t, 202, "")
	a.do("POST", base+":batch", `{"items":[{"op":"create","instance_id":"k-1"}]}`, "Idempotency-Key: used-batch").expect(t, 207, "")
	cases := []struct {
		name, body string
		headers    []string
		field      string
	}{
		{"an item's key used by a single command", `{"items":[{"op":"create","instance_id":"k-2","idempotency_key":"used-once"}]}`, nil, "idempotency_key"},
		{"an item's key used twice in one batch", `{"items":[{"op":"create","instance_id":"k-3","idempotency_key":"twice"},{"op":"create","instance_id":"k-4","idempotency_key":"twice"}]}`, nil, "idempotency_key"},
		{"an item's key beside a request key", `{"items":[{"op":"create","instance_id":"k-5","idempotency_key":"used-once"}]}`, []string{"Idempotency-Key: other-batch"}, "idempotency_key"},
		{"a key derived from the request's", `{"items":[{"op":"create","instance_id":"k-6"}]}`, []string{"Idempotency-Key: used-batch"}, "Idempotency-Key"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := a.do("POST", base+":batch", c.body, c.headers...).expect(t, 207, "")
			var got struct {
				Results []map[string]any `json:"results"`
			}
			if err := json.Unmarshal(r.body, &got); err != nil {
				t.Fatal(err)
			}
			last := got.Results[len(got.Results)-1]
			if last["code"] != CodeIdempotencyKeyReused || last["field"] != c.field {
				t.Fatalf("code %v field %v, want %s %s\n%s", last["code"], last["field"], CodeIdempotencyKeyReused, c.field, r.body)
			}
			if d, _ := last["detail"].(string); !strings.HasPrefix(d, c.field+" ") {
				t.Errorf("detail %q does not start with %s", d, c.field)
			}
		})
	}
}
