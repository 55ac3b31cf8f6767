package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sluicehq/sluice/shared/envelope"
)

// FuzzRequestBody: whatever the body, id, key and headers, the API answers
// with a status below 500 and, for errors, a JSON error body — never a panic
// (the handler turns a panic into 500, which fails the target). It runs on
// the real store (file backend and Postgres, as the other tests): every
// 202, alone or as a batch item, must name a command that is stored and
// readable (checkAccepted).
func FuzzRequestBody(f *testing.F) {
	seeds := []string{
		`{"instance_id":"o-1","data":{"total":10}}`, `{"data":{"order_id":42}}`, `{"data":{"a":{"b":[1,2,{"c":null}]}}}`,
		`{"items":[{"op":"create","data":{}},{"op":"update","instance_id":"x","data":{"a":1},"expected_seq":1},{"op":"delete","instance_id":"x"}]}`,
		`{"data":{"a":1,"a":2}}`, `[`, `{"data":` + strings.Repeat("[", 100), "{\"instance_id\":\"\xff\"}", `{}`, `null`, `"x"`, `{"items":[1]}`,
		`{"data":{"order_id":"a:b/c"}} `, `{"instance_id":"\u0000"}`, `{"data":{"order_id":1e400}}`,
		// invalid text (issue 26.2): lone surrogate escapes, invalid UTF-8
		`{"instance_id":"\ud800"}`, `{"instance_id":"\udbff"}`, `{"data":{"a":"\udc00\ud800"}}`, `{"data":{"\uDFFF":1}}`,
		`{"a":"\ud83d\n"}`, "{\"data\":{\"a\":\"\xed\xa0\x80\"}}", `{"items":[{"op":"create","instance_id":"\ud800"}]}`,
		`{"instance_id":"\ud83d\ude80","data":{"\ud834\udd1e":"\\ud800"}}`,
	}
	for i, s := range seeds {
		f.Add(uint8(i), s, "o-1", "key-1", "1")
	}
	f.Add(uint8(2), ``, "\xed\xa0\x80", "key-1", "")
	f.Add(uint8(5), ``, "o-1", "k\xff", "")
	f.Add(uint8(4), ``, "a\xc0\xafb", "", "")
	a := newTestAPI(f, apiConfig{})
	h := a.h
	f.Fuzz(func(t *testing.T, op uint8, body, id, key, seq string) {
		path := base
		method := "POST"
		ct := "application/json"
		switch op % 6 {
		case 1:
			method, path, ct = "PATCH", base+"/"+url.PathEscape(id), "application/merge-patch+json"
		case 2:
			method, path = "DELETE", base+"/"+url.PathEscape(id)
		case 3:
			path = base + ":batch"
		case 4:
			method, path = "GET", base+"/"+url.PathEscape(id)
		case 5:
			method, path = "GET", "/v1/commands/"+url.PathEscape(key)
		}
		req := httptest.NewRequest(method, path+"?expected_seq="+url.QueryEscape(seq), strings.NewReader(body))
		req.Header.Set("Content-Type", ct)
		if key != "" {
			req.Header["Idempotency-Key"] = []string{key}
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s %s %q: %d %s", method, path, body, rec.Code, rec.Body.Bytes())
		}
		if rec.Code >= 400 {
			var e struct {
				Type    string `json:"type"`
				Title   string `json:"title"`
				Status  int    `json:"status"`
				Detail  string `json:"detail"`
				Code    string `json:"code"`
				Error   string `json:"error"`
				Message string `json:"message"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == "" || e.Message == "" ||
				e.Code != e.Error || e.Type != ProblemTypePrefix+e.Code || e.Title == "" || e.Status != rec.Code || e.Detail == "" ||
				rec.Header().Get("Content-Type") != "application/problem+json" {
				t.Fatalf("%s %s: %d without a problem+json error body: %s", method, path, rec.Code, rec.Body.Bytes())
			}
			return
		}
		switch rec.Code {
		case http.StatusAccepted:
			var acc Accepted
			if err := json.Unmarshal(rec.Body.Bytes(), &acc); err != nil {
				t.Fatalf("%s %s: 202 body: %v: %s", method, path, err, rec.Body.Bytes())
			}
			checkAccepted(t, a, acc)
		case http.StatusMultiStatus:
			var reply struct {
				Results []struct {
					Status int `json:"status"`
					Accepted
				} `json:"results"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &reply); err != nil {
				t.Fatalf("%s %s: 207 body: %v: %s", method, path, err, rec.Body.Bytes())
			}
			for _, r := range reply.Results {
				if r.Status == http.StatusAccepted {
					checkAccepted(t, a, r.Accepted)
				}
			}
		}
		// A path segment of "." or ".." (the id, or the key of
		// /v1/commands/{key}) is a dot segment: the mux redirects to the
		// cleaned path (307) before any handler reads the body, so nothing
		// was accepted. (docs/api.md: such ids cannot be addressed.)
		if rec.Code == http.StatusTemporaryRedirect || rec.Code == http.StatusMovedPermanently {
			seg := id
			if op%6 == 5 {
				seg = key
			}
			if (seg != "." && seg != "..") || rec.Header().Get("Location") == "" {
				t.Fatalf("%s %s: unexpected redirect %d to %q", method, path, rec.Code, rec.Header().Get("Location"))
			}
			return
		}
		// Invalid text is never accepted: not in a body a command was
		// built from, not in a path id, not in a key.
		if _, _, ok := envelope.ScanJSONText([]byte(body)); !ok && (method == "POST" || method == "PATCH") {
			t.Fatalf("%s %s accepted a body with invalid text: %d %q", method, path, rec.Code, body)
		}
		if (op%6 == 1 || op%6 == 2 || op%6 == 4) && !utf8.ValidString(id) {
			t.Fatalf("%s accepted an id with invalid UTF-8: %d %q", method, rec.Code, id)
		}
		if key != "" && !utf8.ValidString(key) && method != "GET" {
			t.Fatalf("%s accepted an Idempotency-Key with invalid UTF-8: %d %q", method, rec.Code, key)
		}
	})
}

// checkAccepted checks what a 202 promises: the command it names is stored
// (readable by event_id from the real store) with the acknowledged
// aggregate, slot and command id, and its status URL answers.
func checkAccepted(t *testing.T, a *testAPI, acc Accepted) {
	t.Helper()
	if acc.EventID == "" || acc.CommandID == "" || acc.StatusURL == "" {
		t.Fatalf("202 without event_id, command_id or status_url: %+v", acc)
	}
	ev, err := a.store.ByEventID(context.Background(), acc.EventID)
	if err != nil {
		t.Fatalf("202 for event %s, not readable from the store: %v", acc.EventID, err)
	}
	e := ev.Envelope
	if e.Kind != envelope.KindCommand || e.AggregateID != acc.AggregateID || e.SequenceNumber != acc.SequenceNumber || e.Metadata.CommandID() != acc.CommandID {
		t.Fatalf("202 %+v, stored %s %s seq %d command_id %q", acc, e.Kind, e.AggregateID, e.SequenceNumber, e.Metadata.CommandID())
	}
	if r := doHandler(t, a.h, http.MethodGet, acc.StatusURL, ""); r.code != http.StatusOK {
		t.Fatalf("202's status URL %s answers %d: %s", acc.StatusURL, r.code, r.body)
	}
}
