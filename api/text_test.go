package api

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// badTexts are JSON string bodies that are not valid text: lone surrogate
// escapes and invalid UTF-8. Before issue 26.2 was fixed each was decoded
// as U+FFFD and accepted.
var badTexts = []struct{ name, json string }{
	{"lone high", `\ud800`},
	{"lone high max", `\udbff`},
	{"lone high upper", `\uD834`},
	{"lone low", `\udc00`},
	{"lone low max", `\uDFFF`},
	{"reversed pair", `\udc00\ud800`},
	{"high then letter", `\ud800\u0041`},
	{"high then newline escape", `\ud83d\n`},
	{"invalid byte", "\xff"},
	{"utf-8 encoded surrogate", "\xed\xa0\x80"},
	{"overlong", "\xc0\xaf"},
	{"truncated", "\xe2\x82"},
}

// badPathTexts are percent-encoded path segments that do not decode to
// UTF-8 (a surrogate cannot be written any other way in a path).
var badPathTexts = []struct{ name, seg string }{
	{"invalid byte", "a%FFb"},
	{"encoded surrogate", "%ED%A0%80"},
	{"encoded low surrogate", "x%ED%BF%BF"},
	{"overlong slash", "%C0%AF"},
	{"truncated", "%E2%82"},
	{"latin-1", "caf%E9"},
}

// TestInvalidTextRefused: invalid text in any body (create, patch, batch),
// id, key or value, and in any path wildcard or the Idempotency-Key, is a
// 400 problem+json with code invalid_text naming the field path; nothing
// is appended.
func TestInvalidTextRefused(t *testing.T) {
	a := newTestAPI(t, apiConfig{})
	type req struct {
		name, method, target, body string
		headers                    []string
		field                      string
	}
	var cases []req
	for _, bt := range badTexts {
		s := bt.json
		cases = append(cases,
			req{"create instance_id/" + bt.name, "POST", base, `{"instance_id":"o-` + s + `"}`, nil, "instance_id"},
			req{"create data value/" + bt.name, "POST", base, `{"data":{"a":{"b":["x","` + s + `"]}}}`, nil, "data.a.b[1]"},
			req{"create data key/" + bt.name, "POST", base, `{"data":{"k` + s + `":1}}`, nil, "data.k"},
			req{"create order_id/" + bt.name, "POST", base, `{"data":{"order_id":"` + s + `"}}`, nil, "data.order_id"},
			req{"patch value/" + bt.name, "PATCH", base + "/o-1", `{"a":"` + s + `"}`, []string{"Content-Type: application/merge-patch+json"}, "data.a"},
			req{"patch key/" + bt.name, "PATCH", base + "/o-1", `{"n":{"` + s + `":null}}`, []string{"Content-Type: application/merge-patch+json"}, "data.n"},
			req{"batch data/" + bt.name, "POST", base + ":batch", `{"items":[{"op":"create","data":{}},{"op":"create","data":{"a":"` + s + `"}}]}`, nil, "items[1].data.a"},
			req{"batch instance_id/" + bt.name, "POST", base + ":batch", `{"items":[{"op":"delete","instance_id":"` + s + `"}]}`, nil, "items[0].instance_id"},
			req{"batch key/" + bt.name, "POST", base + ":batch", `{"items":[{"op":"create","idempotency_key":"` + s + `"}]}`, nil, "items[0].idempotency_key"},
		)
	}
	for _, bp := range badPathTexts {
		p := bp.seg
		cases = append(cases,
			req{"path id delete/" + bp.name, "DELETE", base + "/" + p, ``, nil, "instance_id"},
			req{"path id patch/" + bp.name, "PATCH", base + "/" + p, `{}`, nil, "instance_id"},
			req{"path id get/" + bp.name, "GET", base + "/" + p, ``, nil, "instance_id"},
			req{"path id events/" + bp.name, "GET", base + "/" + p + "/events", ``, nil, "instance_id"},
			req{"path db/" + bp.name, "POST", "/v1/dbs/" + p + "/classes/order/instances", `{}`, nil, "db"},
			req{"path class/" + bp.name, "POST", "/v1/dbs/shop/classes/" + p + "/instances:batch", `{"items":[{"op":"create"}]}`, nil, "class"},
			req{"path command_id/" + bp.name, "GET", "/v1/commands/" + p, ``, nil, "command_id"},
		)
		key, _ := url.PathUnescape(p)
		cases = append(cases,
			req{"Idempotency-Key/" + bp.name, "POST", base, `{}`, []string{"Idempotency-Key: " + key}, "Idempotency-Key"},
			req{"batch Idempotency-Key/" + bp.name, "POST", base + ":batch", `{"items":[{"op":"create"}]}`, []string{"Idempotency-Key: " + key}, "Idempotency-Key"},
		)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := a.do(c.method, c.target, c.body, c.headers...)
			if r.code != http.StatusBadRequest || r.str("code") != CodeInvalidText {
				t.Fatalf("got %d %s, want 400 %s\n%s", r.code, r.str("code"), CodeInvalidText, r.body)
			}
			if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
				t.Fatalf("Content-Type %q, want application/problem+json", ct)
			}
			if r.str("type") != ProblemTypePrefix+CodeInvalidText || r.str("title") == "" || r.num("status") != 400 ||
				r.str("detail") == "" || r.str("error") != CodeInvalidText || r.str("message") != r.str("detail") {
				t.Fatalf("not a problem document: %s", r.body)
			}
			if !strings.HasPrefix(r.str("field"), c.field) {
				t.Fatalf("field %q, want %q…: %s", r.str("field"), c.field, r.body)
			}
		})
	}
	if n := a.appendsCount(); n != 0 {
		t.Fatalf("invalid text wrote %d appends", n)
	}
	// "\udbff" and "\ufffd" once named one aggregate; U+FFFD itself is a
	// valid id, the lone surrogate is refused.
	a.do("POST", base+"?expected_seq=0", `{"instance_id":"\ufffd"}`).expect(t, 202, "")
	a.do("POST", base+"?expected_seq=0", `{"instance_id":"\udbff"}`).expect(t, 400, CodeInvalidText)
	// Valid escapes, surrogate pairs included, are accepted.
	a.do("POST", base, `{"instance_id":"\ud83d\ude80","data":{"\uD834\uDD1E":"\\ud800 \u00e9"}}`).expect(t, 202, "")
}

// TestProblemDocument: every error body is an RFC 9457 problem document
// with the API's code and the members the API always had.
func TestProblemDocument(t *testing.T) {
	a := newTestAPI(t, apiConfig{})
	for _, c := range []struct {
		method, target, body string
		status               int
		code                 string
	}{
		{"POST", base, `{"data":`, 400, CodeMalformedJSON},
		{"POST", base, `{"extra":1}`, 422, CodeValidationFailed},
		{"GET", "/v1/nothing", ``, 404, CodeNotFound},
		{"PUT", base + "/o", `{}`, 405, CodeMethodNotAllowed},
	} {
		r := a.do(c.method, c.target, c.body).expect(t, c.status, c.code)
		if r.header.Get("Content-Type") != "application/problem+json" || r.str("type") != ProblemTypePrefix+c.code ||
			r.num("status") != int64(c.status) || r.str("code") != c.code || r.str("title") == "" || r.str("detail") == "" {
			t.Fatalf("%s %s: not a problem document: %s %s", c.method, c.target, r.header.Get("Content-Type"), r.body)
		}
	}
}
