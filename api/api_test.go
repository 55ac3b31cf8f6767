package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/config"
	"github.com/sluicehq/sluice/shared/envelope"
)

const base = "/v1/dbs/shop/classes/order/instances"

// The main flow on MinIO: create, merge-patch, delete are 202 with slots
// 1, 2, 3, and the store holds exactly the agreed command envelopes.
func TestCreatePatchDeleteOnMinIO(t *testing.T) {
	a := newTestAPI(t, apiConfig{minio: true})
	c := a.do("POST", base, `{"instance_id":"o-1","data":{"total":10,"note":"<b>&"}}`, "Idempotency-Key: create-o-1", "Traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01").
		expect(t, http.StatusAccepted, "")
	if c.str("command_id") != "create-o-1" || c.str("aggregate_id") != "shop:order:o-1" || c.num("sequence_number") != 1 ||
		c.str("status_url") != "/v1/commands/create-o-1" || c.str("instance_id") != "o-1" || c.header.Get("Location") != "/v1/commands/create-o-1" {
		t.Fatalf("create reply: %s", c.body)
	}
	p := a.do("PATCH", base+"/o-1", `{"total":12,"note":null}`, "Content-Type: application/merge-patch+json").expect(t, http.StatusAccepted, "")
	d := a.do("DELETE", base+"/o-1", "", "If-Match: \"2\"").expect(t, http.StatusAccepted, "")
	if p.num("sequence_number") != 2 || d.num("sequence_number") != 3 {
		t.Fatalf("patch %s, delete %s", p.body, d.body)
	}
	evs := a.stream("shop:order:o-1")
	if len(evs) != 3 {
		t.Fatalf("%d events stored, want 3", len(evs))
	}
	want := []struct {
		typ, data string
		expected  *int64
	}{
		{TypeCreate, `{"db":"shop","class":"order","instance_id":"o-1","data":{"total":10,"note":"<b>&"}}`, nil},
		{TypeUpdate, `{"data":{"total":12,"note":null}}`, nil},
		{TypeDelete, `{}`, ptr(int64(2))},
	}
	for i, ev := range evs {
		e := ev.Envelope
		if e.Kind != envelope.KindCommand || e.AggregateType != "Instance" || e.EventType != want[i].typ || e.SequenceNumber != int64(i+1) {
			t.Fatalf("event %d: %s", i, ev.Raw)
		}
		if !jsonEqual(t, e.Data, want[i].data) {
			t.Fatalf("event %d data %s, want %s", i, e.Data, want[i].data)
		}
		if (e.ExpectedSeq == nil) != (want[i].expected == nil) || (e.ExpectedSeq != nil && *e.ExpectedSeq != *want[i].expected) {
			t.Fatalf("event %d expected_seq %v", i, e.ExpectedSeq)
		}
		if e.EventID != EventIDForCommand(e.Metadata.CommandID()) {
			t.Fatalf("event %d: event_id %s is not derived from command_id %s", i, e.EventID, e.Metadata.CommandID())
		}
	}
	if tp := evs[0].Envelope.Metadata.Traceparent(); !strings.HasPrefix(tp, "00-0af7") {
		t.Fatalf("traceparent not carried: %q", tp)
	}
	// A command without a key gets a UUID command id, which is its event_id.
	if cid := evs[1].Envelope.Metadata.CommandID(); cid != evs[1].Envelope.EventID {
		t.Fatalf("fresh command id %s, event id %s", cid, evs[1].Envelope.EventID)
	}
}

func ptr[T any](v T) *T { return &v }

func jsonEqual(t testing.TB, got []byte, want string) bool {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	return string(gb) == string(wb)
}

func TestCreateResolvesInstanceID(t *testing.T) {
	a := newTestAPI(t, apiConfig{})
	cases := []struct {
		name, body, key string
		wantID          string
		status          int
	}{
		{"body field", `{"instance_id":"a-1","data":{}}`, "", "a-1", 202},
		{"class_id string in data", `{"data":{"order_id":"from-data"}}`, "", "from-data", 202},
		{"class_id number in data", `{"data":{"order_id":42}}`, "", "42", 202},
		{"both agree", `{"instance_id":"x-9","data":{"order_id":"x-9"}}`, "", "x-9", 202},
		{"derived from key", `{"data":{"a":1}}`, "derive-me", envelope.InstanceIDFromCommand("derive-me").String(), 202},
		{"both disagree", `{"instance_id":"x-9","data":{"order_id":"x-8"}}`, "", "", 422},
		{"class_id of wrong type", `{"data":{"order_id":{"a":1}}}`, "", "", 422},
		// only data's own member, after others, its name escaped or not
		{"class_id after nested namesakes", `{"data":{"a":{"order_id":"inner"},"b":[{"order_id":"in-array"}],"order_id":"outer"}}`, "", "outer", 202},
		{"class_id name escaped", `{"data":{"order\u005fid":"escaped"}}`, "", "escaped", 202},
		{"class_id value escaped", `{"data":{"order_id":"x\u002dy"}}`, "", "x-y", 202},
		{"class_id null", `{"data":{"order_id":null}}`, "null-key", envelope.InstanceIDFromCommand("null-key").String(), 202},
		{"only a nested class_id", `{"data":{"a":{"order_id":"inner"}}}`, "nested-key", envelope.InstanceIDFromCommand("nested-key").String(), 202},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var hdr []string
			if c.key != "" {
				hdr = append(hdr, "Idempotency-Key: "+c.key)
			}
			r := a.do("POST", base, c.body, hdr...)
			if r.code != c.status {
				t.Fatalf("status %d: %s", r.code, r.body)
			}
			if c.status == 202 && r.str("instance_id") != c.wantID {
				t.Fatalf("instance_id %q, want %q", r.str("instance_id"), c.wantID)
			}
		})
	}
}

// OCC: expected_seq by query or If-Match; a conflict is 409 with actual_seq
// and writes nothing.
func TestOptimisticConcurrency(t *testing.T) {
	a := newTestAPI(t, apiConfig{})
	a.do("POST", base+"?expected_seq=0", `{"instance_id":"o-1"}`).expect(t, 202, "")
	// Creating it again "only if new" conflicts.
	r := a.do("POST", base+"?expected_seq=0", `{"instance_id":"o-1"}`).expect(t, 409, CodeConflict)
	if r.num("expected_seq") != 0 || r.num("actual_seq") != 1 || r.json["expected_seq"] == nil {
		t.Fatalf("conflict body: %s", r.body)
	}
	r = a.do("PATCH", base+"/o-1", `{"a":1}`, `If-Match: "5"`).expect(t, 409, CodeConflict)
	if r.num("expected_seq") != 5 || r.num("actual_seq") != 1 {
		t.Fatalf("conflict body: %s", r.body)
	}
	a.do("PATCH", base+"/o-1", `{"a":1}`, `If-Match: "1"`).expect(t, 202, "")
	a.do("PATCH", base+"/o-1?expected_seq=2", `{"a":2}`, `If-Match: 2`).expect(t, 202, "")
	a.do("DELETE", base+"/o-1?expected_seq=2", "").expect(t, 409, CodeConflict)
	a.do("DELETE", base+"/o-1?expected_seq=3", "", `If-Match: "2"`).expect(t, 400, CodeInvalidParameter)
	if n := len(a.stream("shop:order:o-1")); n != 3 {
		t.Fatalf("%d events stored, want 3 (conflicts write nothing)", n)
	}
}

func TestIdempotentReplay(t *testing.T) {
	a := newTestAPI(t, apiConfig{})
	first := a.do("POST", base, `{"data":{"total":1}}`, "Idempotency-Key: k-1").expect(t, 202, "")
	again := a.do("POST", base, `{ "data" : { "total" : 1 } }`, "Idempotency-Key: k-1").expect(t, 202, "")
	if string(first.body) != string(again.body) || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay differs:\n%s\n%s", first.body, again.body)
	}
	a.do("POST", base, `{"data":{"total":2}}`, "Idempotency-Key: k-1").expect(t, 422, CodeIdempotencyKeyReused)
	// The same key on another route is a different request too.
	a.do("DELETE", base+"/x", "", "Idempotency-Key: k-1").expect(t, 422, CodeIdempotencyKeyReused)
	// A UUID key is the event_id itself.
	const u = "6f1c2a47-7d1e-4c5b-9a44-2b7e3f9b8c01"
	r := a.do("PATCH", base+"/"+first.str("instance_id"), `{"x":1}`, "Idempotency-Key: "+u).expect(t, 202, "")
	if r.str("event_id") != u {
		t.Fatalf("event_id %s, want %s", r.str("event_id"), u)
	}
	a.do("PATCH", base+"/"+first.str("instance_id"), `{"x":1}`, "Idempotency-Key: "+u).expect(t, 202, "")
	if n := a.appendsCount(); n != 2 {
		t.Fatalf("%d appends, want 2", n)
	}
}

// Every kind of bad input gets its status and code, and nothing is written.
func TestBadInput(t *testing.T) {
	a := newTestAPI(t, apiConfig{cfg: func(c *Config) { c.MaxBodyBytes = 4096 }})
	deep := strings.Repeat(`{"a":`, 64) + "1" + strings.Repeat("}", 64)
	okDeep := strings.Repeat(`{"a":`, 62) + "1" + strings.Repeat("}", 62)
	cases := []struct {
		name, method, target, body string
		headers                    []string
		status                     int
		code, field                string
	}{
		{"malformed json", "POST", base, `{"data":`, nil, 400, CodeMalformedJSON, "body"},
		{"trailing data", "POST", base, `{"data":{}} {}`, nil, 400, CodeMalformedJSON, "body"},
		{"duplicate key", "POST", base, `{"data":{"a":1,"a":2}}`, nil, 400, CodeMalformedJSON, "body"},
		{"duplicate top-level key", "POST", base, `{"data":{},"data":{}}`, nil, 400, CodeMalformedJSON, "body"},
		{"an empty array", "POST", base, `[]`, nil, 422, CodeValidationFailed, "body"},
		{"not JSON", "POST", base, `nope`, nil, 400, CodeMalformedJSON, "body"},
		{"batch not an object", "POST", base + ":batch", `[]`, nil, 422, CodeValidationFailed, "body"},
		{"batch malformed", "POST", base + ":batch", `{"items":`, nil, 400, CodeMalformedJSON, "body"},
		{"invalid utf-8", "POST", base, "{\"data\":{\"a\":\"\xff\"}}", nil, 400, CodeInvalidText, "data.a"},
		{"empty body", "POST", base, ``, []string{"Content-Type: application/json"}, 400, CodeMalformedJSON, "body"},
		{"not an object", "POST", base, `[1,2]`, nil, 422, CodeValidationFailed, "body"},
		{"unknown field", "POST", base, `{"data":{},"extra":1}`, nil, 422, CodeValidationFailed, "extra"},
		{"field name case", "POST", base, `{"Data":{}}`, nil, 422, CodeValidationFailed, "Data"},
		{"data not object", "POST", base, `{"data":[1]}`, nil, 422, CodeValidationFailed, "data"},
		{"instance_id not string", "POST", base, `{"instance_id":5}`, nil, 422, CodeValidationFailed, "instance_id"},
		{"body too large", "POST", base, `{"data":{"a":"` + strings.Repeat("x", 5000) + `"}}`, nil, 413, CodeBodyTooLarge, "body"},
		{"too deep", "POST", base, `{"data":` + deep + `}`, nil, 413, CodeLimitExceeded, "data"},
		{"patch too deep", "PATCH", base + "/o", deep, nil, 413, CodeLimitExceeded, "data"},
		{"wrong content type", "POST", base, `{"data":{}}`, []string{"Content-Type: text/plain"}, 415, CodeUnsupportedMediaType, "Content-Type"},
		{"missing content type", "POST", base, `{"data":{}}`, []string{"Content-Type:"}, 415, CodeUnsupportedMediaType, "Content-Type"},
		{"bad charset", "POST", base, `{"data":{}}`, []string{"Content-Type: application/json; charset=latin1"}, 415, CodeUnsupportedMediaType, "Content-Type"},
		{"merge-patch on create", "POST", base, `{"data":{}}`, []string{"Content-Type: application/merge-patch+json"}, 415, CodeUnsupportedMediaType, "Content-Type"},
		{"patch as text", "PATCH", base + "/o", `{}`, []string{"Content-Type: text/plain"}, 415, CodeUnsupportedMediaType, "Content-Type"},
		{"invalid db", "POST", "/v1/dbs/Shop/classes/order/instances", `{}`, nil, 422, CodeValidationFailed, "db"},
		{"invalid db chars", "POST", "/v1/dbs/sh%2Fop/classes/order/instances", `{}`, nil, 422, CodeValidationFailed, "db"},
		{"invalid class", "POST", "/v1/dbs/shop/classes/_order/instances", `{}`, nil, 422, CodeValidationFailed, "class"},
		{"long class", "PATCH", "/v1/dbs/shop/classes/" + strings.Repeat("c", 64) + "/instances/o", `{}`, nil, 422, CodeValidationFailed, "class"},
		{"control char in path id", "PATCH", base + "/o%07x", `{}`, nil, 422, CodeValidationFailed, "instance_id"},
		{"newline in body id", "POST", base, `{"instance_id":"a\nb"}`, nil, 422, CodeValidationFailed, "instance_id"},
		{"zero-width in id", "DELETE", base + "/a%E2%80%8Bb", ``, nil, 422, CodeValidationFailed, "instance_id"},
		{"invalid utf-8 in path id", "DELETE", base + "/a%FFb", ``, nil, 400, CodeInvalidText, "instance_id"},
		{"blank id", "DELETE", base + "/%20%20", ``, nil, 422, CodeValidationFailed, "instance_id"},
		{"empty body id", "POST", base, `{"instance_id":""}`, nil, 422, CodeValidationFailed, "instance_id"},
		{"id too long", "POST", base, `{"instance_id":"` + strings.Repeat("i", 600) + `"}`, nil, 422, CodeValidationFailed, "instance_id"},
		{"key with colon", "POST", base, `{}`, []string{"Idempotency-Key: a:b"}, 422, CodeValidationFailed, "Idempotency-Key"},
		{"key with space", "POST", base, `{}`, []string{"Idempotency-Key: a b"}, 422, CodeValidationFailed, "Idempotency-Key"},
		{"key too long", "POST", base, `{}`, []string{"Idempotency-Key: " + strings.Repeat("k", 256)}, 422, CodeValidationFailed, "Idempotency-Key"},
		{"key non-ascii", "POST", base, `{}`, []string{"Idempotency-Key: clé"}, 422, CodeValidationFailed, "Idempotency-Key"},
		{"expected_seq negative", "POST", base + "?expected_seq=-1", `{}`, nil, 400, CodeInvalidParameter, "expected_seq"},
		{"expected_seq text", "PATCH", base + "/o?expected_seq=abc", `{}`, nil, 400, CodeInvalidParameter, "expected_seq"},
		{"expected_seq twice", "PATCH", base + "/o?expected_seq=1&expected_seq=1", `{}`, nil, 400, CodeInvalidParameter, "expected_seq"},
		{"If-Match weak", "PATCH", base + "/o", `{}`, []string{`If-Match: W/"1"`}, 400, CodeInvalidParameter, "If-Match"},
		{"If-Match star", "DELETE", base + "/o", ``, []string{`If-Match: *`}, 400, CodeInvalidParameter, "If-Match"},
		{"delete with body", "DELETE", base + "/o", `{"a":1}`, nil, 400, CodeUnexpectedBody, "body"},
		{"patch not object", "PATCH", base + "/o", `"x"`, nil, 422, CodeValidationFailed, "data"},
		{"unknown route", "GET", "/v1/nothing", ``, nil, 404, CodeNotFound, ""},
		{"wrong method", "PUT", base + "/o", `{}`, nil, 405, CodeMethodNotAllowed, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := a.do(c.method, c.target, c.body, c.headers...).expect(t, c.status, c.code)
			if c.field != "" && r.str("field") != c.field {
				t.Fatalf("field %q, want %q: %s", r.str("field"), c.field, r.body)
			}
			if r.str("message") == "" {
				t.Fatalf("no message: %s", r.body)
			}
			if (c.status == 413 && c.code == CodeLimitExceeded) && r.str("limit") == "" {
				t.Fatalf("no limit: %s", r.body)
			}
		})
	}
	if n := a.appendsCount(); n != 0 {
		t.Fatalf("bad input wrote %d appends", n)
	}
	// Right at the limits is accepted: data nesting 63 levels (the command
	// wraps it once more: 64).
	a.do("POST", base, `{"data":`+okDeep+`}`).expect(t, 202, "")
	a.do("PATCH", base+"/o", okDeep, "Content-Type: application/merge-patch+json; charset=UTF-8").expect(t, 202, "")
	if wr := a.do("PUT", base+"/o", `{}`); wr.header.Get("Allow") == "" {
		t.Fatalf("405 without Allow")
	}
}

func TestAuth(t *testing.T) {
	a := newTestAPI(t, apiConfig{cfg: func(c *Config) { c.Tokens = []config.Secret{"first-token", "second"} }})
	r := a.do("POST", base, `{}`).expect(t, 401, CodeUnauthorized)
	if r.header.Get("WWW-Authenticate") != `Bearer realm="sluice"` {
		t.Fatalf("WWW-Authenticate %q", r.header.Get("WWW-Authenticate"))
	}
	r = a.do("POST", base, `{}`, "Authorization: Bearer wrong").expect(t, 401, CodeUnauthorized)
	if !strings.Contains(r.header.Get("WWW-Authenticate"), `error="invalid_token"`) {
		t.Fatalf("WWW-Authenticate %q", r.header.Get("WWW-Authenticate"))
	}
	a.do("POST", base, `{}`, "Authorization: Basic Zmlyc3QtdG9rZW4=").expect(t, 401, CodeUnauthorized)
	a.do("POST", base, `{}`, "Authorization: Bearer first-token-x").expect(t, 401, CodeUnauthorized)
	a.do("GET", "/v1/unknown", ``).expect(t, 401, CodeUnauthorized) // routes are not revealed
	if n := a.appendsCount(); n != 0 {
		t.Fatalf("unauthenticated requests wrote %d appends", n)
	}
	a.do("POST", base, `{}`, "Authorization: Bearer first-token").expect(t, 202, "")
	a.do("POST", base, `{}`, "Authorization: bearer second").expect(t, 202, "")
	for _, p := range []string{"/livez", "/readyz", "/metrics", "/openapi.json"} {
		if r := a.do("GET", p, ``); r.code != 200 {
			t.Fatalf("%s: %d %s", p, r.code, r.body)
		}
	}
}

func TestNotFound(t *testing.T) {
	a := newTestAPI(t, apiConfig{})
	a.do("GET", "/v1/commands/never-sent", ``).expect(t, 404, CodeCommandNotFound)
	a.do("GET", "/v1/commands/6f1c2a47-7d1e-4c5b-9a44-2b7e3f9b8c01", ``).expect(t, 404, CodeCommandNotFound)
	a.do("GET", "/v1/commands/bad%20id", ``).expect(t, 422, CodeValidationFailed)
	r := a.do("GET", base+"/missing", ``).expect(t, 404, CodeInstanceNotFound)
	if r.num("sequence_number") != 0 || r.json["pending_commands"] != float64(0) {
		t.Fatalf("missing instance body: %s", r.body)
	}
	a.do("GET", base+"/missing/events", ``).expect(t, 404, CodeInstanceNotFound)
	a.do("GET", "/v1/dbs/shop/classes/order/nothing", ``).expect(t, 404, CodeNotFound)
}

func TestBatchMixedResults(t *testing.T) {
	a := newTestAPI(t, apiConfig{cfg: func(c *Config) { c.MaxBatchItems = 10 }})
	a.do("POST", base, `{"instance_id":"exists"}`).expect(t, 202, "")
	deep := strings.Repeat(`{"a":`, 70) + "1" + strings.Repeat("}", 70)
	body := `{"items":[
		{"op":"create","instance_id":"b-1","data":{"n":1}},
		{"op":"update","instance_id":"exists","data":{"n":2},"expected_seq":1},
		{"op":"delete","instance_id":"exists","expected_seq":1},
		{"op":"create","instance_id":"bad\u0007id"},
		{"op":"frobnicate","instance_id":"x"},
		{"op":"create","data":` + deep + `},
		{"op":"create","idempotency_key":"item-key","data":{"order_id":"from-data"},"extra":1},
		{"op":"create","idempotency_key":"item-key","data":{"order_id":"from-data"}},
		{"op":"update","instance_id":"exists"},
		"not an object"
	]}`
	r := a.do("POST", base+":batch", body).expect(t, http.StatusMultiStatus, "")
	var got BatchReplyJSON
	if err := json.Unmarshal(r.body, &got); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		status int
		code   string
		seq    int64
	}{
		{202, "", 1}, {202, "", 2}, {409, CodeConflict, 0}, {422, CodeValidationFailed, 0}, {422, CodeValidationFailed, 0},
		{413, CodeLimitExceeded, 0}, {422, CodeValidationFailed, 0}, {202, "", 1}, {422, CodeValidationFailed, 0}, {422, CodeValidationFailed, 0},
	}
	if len(got.Results) != len(want) || got.Accepted != 3 || got.Failed != 7 {
		t.Fatalf("batch reply: %s", r.body)
	}
	for i, w := range want {
		g := got.Results[i]
		if g.Index != i || g.Status != w.status || g.Error != w.code || (w.seq != 0 && g.SequenceNumber != w.seq) {
			t.Fatalf("item %d: %+v, want %+v\n%s", i, g, w, r.body)
		}
	}
	if got.Results[2].ActualSeq == nil || *got.Results[2].ActualSeq != 2 {
		t.Fatalf("item 2 actual_seq: %s", r.body)
	}
	if got.Results[7].CommandID != "item-key" || got.Results[7].AggregateID != "shop:order:from-data" {
		t.Fatalf("item 7: %+v", got.Results[7])
	}
	if n := a.appendsCount(); n != 4 {
		t.Fatalf("%d appends, want 4", n)
	}
	// A batch with an Idempotency-Key replays item by item.
	b2 := `{"items":[{"op":"create","data":{}},{"op":"create","data":{}}]}`
	first := a.do("POST", base+":batch", b2, "Idempotency-Key: batch-1").expect(t, 207, "")
	again := a.do("POST", base+":batch", b2, "Idempotency-Key: batch-1").expect(t, 207, "")
	if string(first.body) != string(again.body) || !strings.Contains(string(first.body), `"command_id":"batch-1.1"`) {
		t.Fatalf("batch replay:\n%s\n%s", first.body, again.body)
	}
	// Whole-batch failures.
	a.do("POST", base+":batch", `{"items":[]}`).expect(t, 422, CodeValidationFailed)
	a.do("POST", base+":batch", `{"items":{}}`).expect(t, 422, CodeValidationFailed)
	a.do("POST", base+":batch", `{"items":[],"x":1}`).expect(t, 422, CodeValidationFailed)
	a.do("POST", base+":batch", `{"items":[`).expect(t, 400, CodeMalformedJSON)
	a.do("POST", base+":batch", `{"items":[{"op":"delete","instance_id":"x"}]}`, "Content-Type: text/plain").expect(t, 415, CodeUnsupportedMediaType)
	a.do("POST", base+":batch?expected_seq=1", `{"items":[{"op":"delete","instance_id":"x"}]}`).expect(t, 400, CodeInvalidParameter)
	many := `{"items":[` + strings.TrimSuffix(strings.Repeat(`{"op":"create"},`, 11), ",") + `]}`
	a.do("POST", base+":batch", many).expect(t, 413, CodeLimitExceeded)
	a.do("GET", base+":batch", ``).expect(t, 405, CodeMethodNotAllowed)
}

// BatchReplyJSON decodes a batch reply in tests.
type BatchReplyJSON struct {
	Results []struct {
		Index          int    `json:"index"`
		Status         int    `json:"status"`
		Error          string `json:"error"`
		CommandID      string `json:"command_id"`
		AggregateID    string `json:"aggregate_id"`
		SequenceNumber int64  `json:"sequence_number"`
		ActualSeq      *int64 `json:"actual_seq"`
	} `json:"results"`
	Accepted int `json:"accepted"`
	Failed   int `json:"failed"`
}

// Command status follows the instance worker's registry row.
func TestCommandStatusTransitions(t *testing.T) {
	a := newTestAPI(t, apiConfig{})
	create := a.do("POST", base, `{"instance_id":"o-1"}`, "Idempotency-Key: c-1").expect(t, 202, "")
	status := func(cid string) reply {
		t.Helper()
		return a.do("GET", "/v1/commands/"+url.PathEscape(cid), ``).expect(t, 200, "")
	}
	check := func(cid, want, reason string) {
		t.Helper()
		r := status(cid)
		if r.str("status") != want || !strings.Contains(r.str("reason"), reason) {
			t.Fatalf("status %s: %s", want, r.body)
		}
	}
	check("c-1", StatusPending, "")
	ev := create.str("event_id")
	lease := a.claim(ev, "shop:order:o-1", 1)
	check("c-1", StatusProcessing, "")
	if _, err := a.reg.MarkFailed(t.Context(), lease, claim.Failure{Err: fmt.Errorf("es timeout"), Retryable: true}); err != nil {
		t.Fatal(err)
	}
	check("c-1", StatusFailed, "es timeout")
	r := status("c-1")
	if r.num("attempts") != 1 || r.str("event_type") != TypeCreate || r.num("sequence_number") != 1 || r.str("aggregate_id") != "shop:order:o-1" {
		t.Fatalf("status body: %s", r.body)
	}
	var res claim.Result
	for range 200 { // the backoff is a few ms
		var err error
		res, err = a.reg.Claim(t.Context(), claim.Request{Handler: DefaultHandler, EventID: ev, AggregateID: "shop:order:o-1", Seq: 1, Policy: claim.WaitForPredecessor})
		if err != nil {
			t.Fatal(err)
		}
		if res.Kind == claim.Claimed {
			break
		}
	}
	if res.Kind != claim.Claimed {
		t.Fatalf("reclaim: %v", res.Kind)
	}
	if err := a.reg.MarkDone(t.Context(), res.Lease, claim.Applied()); err != nil {
		t.Fatal(err)
	}
	check("c-1", StatusApplied, "")
	if status("c-1").json["processed_at"] == nil {
		t.Fatal("no processed_at")
	}

	rej := a.do("POST", base, `{"instance_id":"o-1"}`, "Idempotency-Key: c-2").expect(t, 202, "")
	a.finish(rej.str("event_id"), "shop:order:o-1", 2, claim.Rejected("instance exists"))
	check("c-2", StatusRejected, "instance exists")

	dead := a.do("DELETE", base+"/o-1", ``, "Idempotency-Key: c-3").expect(t, 202, "")
	l3 := a.claim(dead.str("event_id"), "shop:order:o-1", 3)
	if _, err := a.reg.MarkFailed(t.Context(), l3, claim.Failure{Err: fmt.Errorf("mapping error"), Retryable: false}); err != nil {
		t.Fatal(err)
	}
	check("c-3", StatusDead, "mapping error")
}

// Read-your-writes: the instance is folded from the event store, pending
// commands are counted, deletion is 404 instance_deleted.
func TestReadYourWrites(t *testing.T) {
	a := newTestAPI(t, apiConfig{})
	const agg = "shop:order:o-1"
	c := a.do("POST", base, `{"instance_id":"o-1","data":{"total":10}}`).expect(t, 202, "")
	r := a.do("GET", base+"/o-1", ``).expect(t, 404, CodeInstanceNotFound)
	if r.num("pending_commands") != 1 || r.num("sequence_number") != 1 {
		t.Fatalf("pending create: %s", r.body)
	}
	a.domain(agg, 1, TypeCreated, `{"total":10}`)
	r = a.do("GET", base+"/o-1", ``).expect(t, 200, "")
	if r.num("sequence_number") != 1 || r.num("state_sequence_number") != 1 || r.num("pending_commands") != 0 ||
		!jsonEqual(t, mustJSON(t, r.json["data"]), `{"total":10}`) || r.header.Get("ETag") != `"1"` || r.str("instance_id") != "o-1" {
		t.Fatalf("created: %s", r.body)
	}
	a.finish(c.str("event_id"), agg, 1, claim.Applied())

	// A patch not yet processed: old state, one pending command, and the
	// sequence to use as expected_seq is 2.
	a.do("PATCH", base+"/o-1", `{"total":12}`, `If-Match: "1"`).expect(t, 202, "")
	r = a.do("GET", base+"/o-1", ``).expect(t, 200, "")
	if r.num("sequence_number") != 2 || r.num("state_sequence_number") != 1 || r.num("pending_commands") != 1 {
		t.Fatalf("pending patch: %s", r.body)
	}
	a.domain(agg, 2, TypeUpdated, `{"total":12}`)
	r = a.do("GET", base+"/o-1", ``).expect(t, 200, "")
	if r.num("state_sequence_number") != 2 || r.num("pending_commands") != 0 || !jsonEqual(t, mustJSON(t, r.json["data"]), `{"total":12}`) {
		t.Fatalf("patched: %s", r.body)
	}
	// A rejected command (slot 3, finished without a domain event) does not
	// hide the state; the sequence moves on.
	rej := a.do("POST", base, `{"instance_id":"o-1"}`).expect(t, 202, "")
	a.finish(a.commandEventID(agg, 2), agg, 2, claim.Applied())
	a.finish(rej.str("event_id"), agg, 3, claim.Rejected("instance exists"))
	r = a.do("GET", base+"/o-1", ``).expect(t, 200, "")
	if r.num("sequence_number") != 3 || r.num("state_sequence_number") != 2 || r.num("pending_commands") != 0 {
		t.Fatalf("after rejection: %s", r.body)
	}
	a.do("DELETE", base+"/o-1", ``, `If-Match: "3"`).expect(t, 202, "")
	a.domain(agg, 4, TypeDeleted, `{}`)
	r = a.do("GET", base+"/o-1", ``).expect(t, 404, CodeInstanceDeleted)
	if r.num("sequence_number") != 4 {
		t.Fatalf("deleted: %s", r.body)
	}

	// The stream, paged by slots.
	p := a.do("GET", base+"/o-1/events?limit=2", ``).expect(t, 200, "")
	evs, _ := p.json["events"].([]any)
	if len(evs) != 4 || p.num("next_from_seq") != 3 || p.num("to_seq") != 2 || p.num("last_sequence") != 4 {
		t.Fatalf("page 1: %s", p.body)
	}
	p = a.do("GET", base+"/o-1/events?from_seq=3&limit=10&kind=command", ``).expect(t, 200, "")
	evs, _ = p.json["events"].([]any)
	if len(evs) != 2 || p.json["next_from_seq"] != nil || p.num("to_seq") != 4 {
		t.Fatalf("page 2: %s", p.body)
	}
	first, _ := evs[0].(map[string]any)
	if first["event_type"] != TypeCreate || first["sequence_number"] != float64(3) {
		t.Fatalf("page 2 first event: %v", first)
	}
	p = a.do("GET", base+"/o-1/events?from_seq=9", ``).expect(t, 200, "")
	if evs, _ = p.json["events"].([]any); len(evs) != 0 {
		t.Fatalf("past the end: %s", p.body)
	}
	for _, bad := range []string{"from_seq=0", "limit=0", "limit=100000", "kind=both", "from_seq=x"} {
		a.do("GET", base+"/o-1/events?"+bad, ``).expect(t, 400, CodeInvalidParameter)
	}
}

func (a *testAPI) commandEventID(aggID string, seq int64) string {
	a.t.Helper()
	ev, err := a.store.Command(a.t.(*testing.T).Context(), envelope.AggregateTypeInstance, aggID, seq)
	if err != nil {
		a.t.Fatal(err)
	}
	return ev.Envelope.EventID
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// docs/architecture.md#aggregate-identity: ids equal after NFC and trimming are one aggregate; case and
// every other difference keep them apart. Ids may hold ':' and '/'.
func TestInstanceIdentity(t *testing.T) {
	a := newTestAPI(t, apiConfig{})
	nfc, nfd := "caf\u00e9", "cafe\u0301"
	cases := []struct {
		name      string
		create    string // body instance_id
		path      string // then PATCH this path id with expected_seq=1
		wantAgg   string
		patchCode int
	}{
		{"NFD body, NFC path", nfd, url.PathEscape(nfc), "shop:order:" + nfc, 202},
		{"surrounding space", "  o-2\t", "o-2", "shop:order:o-2", 202},
		{"case differs", "Order-3", "order-3", "shop:order:Order-3", 409}, // order-3 is a new aggregate (last 0)
		{"colon and slash", "a:b/c", url.PathEscape("a:b/c"), "shop:order:a:b/c", 202},
		{"percent and dots", "../%2e", url.PathEscape("../%2e"), "shop:order:../%2e", 202},
		// A whole segment "." or ".." is cleaned away by every HTTP
		// router; percent-encoded it is the instance's own segment.
		{"dot", ".", "%2E", "shop:order:.", 202},
		{"dot dot", "..", "%2E%2E", "shop:order:..", 202},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := a.do("POST", base, `{"instance_id":`+string(mustJSON(t, c.create))+`}`).expect(t, 202, "")
			if r.str("aggregate_id") != c.wantAgg || r.num("sequence_number") != 1 {
				t.Fatalf("create: %s", r.body)
			}
			p := a.do("PATCH", base+"/"+c.path+"?expected_seq=1", `{"x":1}`)
			if p.code != c.patchCode {
				t.Fatalf("patch %s: %d %s", c.path, p.code, p.body)
			}
			if c.patchCode == 202 && p.str("aggregate_id") != c.wantAgg {
				t.Fatalf("patch went to %s, want %s", p.str("aggregate_id"), c.wantAgg)
			}
		})
	}
	// NFC and NFD creates with "only if new" meet the same aggregate.
	a.do("POST", base+"?expected_seq=0", `{"instance_id":"`+nfc+`"}`).expect(t, 409, CodeConflict)
	a.do("POST", base+"?expected_seq=0", `{"instance_id":"Caf\u00e9"}`).expect(t, 202, "")
	// Reads normalise the path id too.
	a.domain("shop:order:"+nfc, 1, TypeCreated, `{"v":1}`)
	a.do("GET", base+"/"+url.PathEscape(nfd), ``).expect(t, 200, "")
}

func TestOpenAPIDocument(t *testing.T) {
	a := newTestAPI(t, apiConfig{})
	r := a.do("GET", "/openapi.json", ``).expect(t, 200, "")
	if r.str("openapi") != "3.1.0" {
		t.Fatalf("openapi: %s", r.body[:min(len(r.body), 200)])
	}
	paths, _ := r.json["paths"].(map[string]any)
	for _, p := range []string{
		"/v1/dbs/{db}/classes/{class}/instances", "/v1/dbs/{db}/classes/{class}/instances:batch",
		"/v1/dbs/{db}/classes/{class}/instances/{id}", "/v1/dbs/{db}/classes/{class}/instances/{id}/events",
		"/v1/commands/{command_id}",
	} {
		if _, ok := paths[p]; !ok {
			t.Fatalf("openapi.json lacks %s", p)
		}
	}
	// Every error code the package defines is documented.
	for _, code := range []string{CodeMalformedJSON, CodeInvalidParameter, CodeUnexpectedBody, CodeUnauthorized, CodeNotFound,
		CodeCommandNotFound, CodeInstanceNotFound, CodeInstanceDeleted, CodeMethodNotAllowed, CodeConflict, CodeSlotConflict,
		CodeBodyTooLarge, CodeLimitExceeded, CodeUnsupportedMediaType, CodeValidationFailed, CodeIdempotencyKeyReused,
		CodeUnavailable, CodeInternal, CodeInvalidText, CodeInvalidDataKey, CodeTooManyRequests, CodeStarting, CodeNotImplemented} {
		if !strings.Contains(string(r.body), `"`+code+`"`) {
			t.Fatalf("openapi.json does not list error code %s", code)
		}
	}
}

// pending_commands counts a command only until the instance worker finishes
// it, whatever the outcome: a REJECTED command (finished without a domain
// event) and a DEAD one (failed for good) both stop counting (issue 27
// item 5), on the instance's 200 and on a missing instance's 404 alike.
func TestPendingClearedWhenFinished(t *testing.T) {
	const agg = "shop:order:o-1"
	cases := []struct {
		name   string
		finish func(a *testAPI, eventID string, seq int64)
		status string
	}{
		{"rejected", func(a *testAPI, ev string, seq int64) {
			a.finish(ev, agg, seq, claim.Rejected("instance exists"))
		}, StatusRejected},
		{"dead", func(a *testAPI, ev string, seq int64) {
			lease := a.claim(ev, agg, seq)
			if _, err := a.reg.MarkFailed(a.t.Context(), lease, claim.Failure{Err: fmt.Errorf("mapping error"), Retryable: false}); err != nil {
				a.t.Fatal(err)
			}
		}, StatusDead},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := newTestAPI(t, apiConfig{})
			// A create that never produced state: 404 with one pending
			// command until it is finished.
			first := a.do("POST", base, `{"instance_id":"o-1","data":{"total":1}}`, "Idempotency-Key: c-1").expect(t, 202, "")
			if r := a.do("GET", base+"/o-1", ``).expect(t, 404, CodeInstanceNotFound); r.num("pending_commands") != 1 {
				t.Fatalf("before: %s", r.body)
			}
			c.finish(a, first.str("event_id"), 1)
			if r := a.do("GET", "/v1/commands/c-1", ``).expect(t, 200, ""); r.str("status") != c.status {
				t.Fatalf("status: %s", r.body)
			}
			if r := a.do("GET", base+"/o-1", ``).expect(t, 404, CodeInstanceNotFound); r.num("pending_commands") != 0 || r.num("sequence_number") != 1 {
				t.Fatalf("after %s create: %s", c.name, r.body)
			}
			// An instance with state and a later command: 200 with the
			// old state and one pending command, then none.
			a.do("POST", base+"?expected_seq=1", `{"instance_id":"o-1","data":{"total":2}}`, "Idempotency-Key: c-2").expect(t, 202, "")
			a.domain(agg, 2, TypeCreated, `{"total":2}`)
			a.finish(a.commandEventID(agg, 2), agg, 2, claim.Applied())
			patch := a.do("PATCH", base+"/o-1", `{"total":3}`, `If-Match: "2"`, "Idempotency-Key: c-3").expect(t, 202, "")
			if r := a.do("GET", base+"/o-1", ``).expect(t, 200, ""); r.num("pending_commands") != 1 {
				t.Fatalf("pending patch: %s", r.body)
			}
			c.finish(a, patch.str("event_id"), 3)
			if r := a.do("GET", "/v1/commands/c-3", ``).expect(t, 200, ""); r.str("status") != c.status {
				t.Fatalf("status: %s", r.body)
			}
			r := a.do("GET", base+"/o-1", ``).expect(t, 200, "")
			if r.num("pending_commands") != 0 || r.num("sequence_number") != 3 || r.num("state_sequence_number") != 2 {
				t.Fatalf("after %s patch: %s", c.name, r.body)
			}
		})
	}
}
