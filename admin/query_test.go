package admin_test

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/registry"
)

// A query parameter the admin API would misread is refused 400 naming it
// in field: a limit that is not an integer in range (?limit=abc read the
// default, ?limit=-5 too), a flag that is neither true nor false, a pair
// that does not decode, a parameter given twice. Good values are served.
func TestQueryParameterRefusals(t *testing.T) {
	srv := newTokenServer(t)
	cases := []struct {
		name, target string
		status       int
		field        string
	}{
		{"audit limit not a number", "/admin/v1/audit?limit=abc", 400, "limit"},
		{"audit limit zero", "/admin/v1/audit?limit=0", 400, "limit"},
		{"audit limit above 1000", "/admin/v1/audit?limit=1001", 400, "limit"},
		{"audit limit empty", "/admin/v1/audit?limit=", 400, "limit"},
		{"audit limit twice", "/admin/v1/audit?limit=1&limit=2", 400, "limit"},
		{"audit limit bad escape", "/admin/v1/audit?limit=%ZZ", 400, "limit"},
		{"a name that does not decode", "/admin/v1/audit?li%ZZmit=2", 400, "query"},
		{"a ';' in a value", "/admin/v1/relay/parked?state=parked;x", 400, "state"},
		{"parked limit negative", "/admin/v1/relay/parked?limit=-5", 400, "limit"},
		{"parked limit not a number", "/admin/v1/relay/parked?limit=ten", 400, "limit"},
		{"dlq limit negative", "/admin/v1/dlq?limit=-1", 400, "limit"},
		{"dlq all not a flag", "/admin/v1/dlq?all=yes", 400, "all"},
		{"keys all not a flag", "/admin/v1/auth/keys?all=1", 400, "all"},
		{"aggregate view too", "/admin/v1/aggregates/Order/1?limit=1&limit=2", 400, "limit"},
		{"audit good limit", "/admin/v1/audit?limit=5", 200, ""},
		{"audit no limit", "/admin/v1/audit", 200, ""},
		{"parked good limit", "/admin/v1/relay/parked?limit=5&state=all", 200, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := httptest.NewRequest("GET", c.target, nil)
			req.Header.Set("Authorization", "Bearer "+readToken)
			w := httptest.NewRecorder()
			srv.ServeHTTP(w, req)
			if w.Code != c.status {
				t.Fatalf("status %d, want %d\n%s", w.Code, c.status, w.Body)
			}
			if c.status == 200 {
				return
			}
			var p map[string]any
			if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || w.Header().Get("Content-Type") != "application/problem+json" {
				t.Fatalf("want problem+json: %v %s", err, w.Body)
			}
			if p["code"] != "invalid" || p["field"] != c.field {
				t.Errorf("code %v field %v, want invalid %q\n%s", p["code"], p["field"], c.field, w.Body)
			}
		})
	}
}

// An action's body must be declared JSON: a body with no Content-Type,
// another media type, or a parameter other than charset=utf-8 is 415
// unsupported_media_type naming Content-Type, before the action reads it,
// and audited; application/json (with charset=utf-8 or not) reaches the
// action, and an empty body needs no Content-Type.
func TestActionBodyMediaType(t *testing.T) {
	srv := newTokenServer(t)
	do := func(method, target, contentType, body string) (int, map[string]any) {
		req := httptest.NewRequest(method, target, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+opToken)
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, req)
		var p map[string]any
		_ = json.Unmarshal(w.Body.Bytes(), &p)
		return w.Code, p
	}
	// {"zzz":1} is refused by the action itself (an unknown field): a
	// 400 naming zzz shows the body reached it.
	const target = "/admin/v1/relay/parked/1/drop"
	cases := []struct {
		name, contentType, body string
		status                  int
		code, field             string
	}{
		{"no Content-Type", "", `{"zzz":1}`, 415, "unsupported_media_type", "Content-Type"},
		{"text/plain", "text/plain", `{"zzz":1}`, 415, "unsupported_media_type", "Content-Type"},
		{"form", "application/x-www-form-urlencoded", `{"zzz":1}`, 415, "unsupported_media_type", "Content-Type"},
		{"another charset", "application/json; charset=latin1", `{"zzz":1}`, 415, "unsupported_media_type", "Content-Type"},
		{"another parameter", "application/json; v=2", `{"zzz":1}`, 415, "unsupported_media_type", "Content-Type"},
		{"unparsable", "application/json;;", `{"zzz":1}`, 415, "unsupported_media_type", "Content-Type"},
		{"json", "application/json", `{"zzz":1}`, 400, "invalid", "zzz"},
		{"json utf-8", "application/json; charset=UTF-8", `{"zzz":1}`, 400, "invalid", "zzz"},
		// One JSON value: the second was ignored and the action ran.
		{"trailing data", "application/json", `{"dry_run":true} {"zzz":1}`, 400, "invalid", "body"},
		{"trailing garbage", "application/json", `{"dry_run":true}x`, 400, "invalid", "body"},
		{"trailing space", "application/json", "{\"zzz\":1} \n", 400, "invalid", "zzz"},
		{"empty body, no Content-Type", "", ``, 404, "not_found", ""},
		// Over 1 MiB: refused whole, naming the body (it was cut at 1 MiB
		// and answered 400 "unexpected EOF" naming nothing useful).
		{"over 1 MiB", "application/json", `{"zzz":"` + strings.Repeat("x", 1<<20) + `"}`, 413, "body_too_large", "body"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, p := do("POST", target, c.contentType, c.body)
			if status != c.status || p["code"] != c.code || (c.field != "" && p["field"] != c.field) {
				t.Fatalf("%d %v, want %d %s field %q", status, p, c.status, c.code, c.field)
			}
			if status != 415 && status != 413 {
				return
			}
			req := httptest.NewRequest("GET", "/admin/v1/audit?limit=1", nil)
			req.Header.Set("Authorization", "Bearer "+readToken)
			w := httptest.NewRecorder()
			srv.ServeHTTP(w, req)
			var recs []admin.AuditRecord
			if err := json.Unmarshal(w.Body.Bytes(), &recs); err != nil || len(recs) != 1 {
				t.Fatalf("audit: %v %s", err, w.Body)
			}
			if r := recs[0]; r.Action != "relay.parked.drop" || r.Outcome != c.code || r.Status != c.status || r.Target != target || c.status == 413 && len(r.Detail) > 4096 {
				t.Errorf("audit record %+v, want the refused drop", r)
			}
		})
	}
}

// newTokenServer is an admin server on a fresh database with both tokens
// (opToken, readToken) and nothing but the registry behind it.
func newTokenServer(t *testing.T) *admin.Server {
	t.Helper()
	_, pool := testenv.NewMigratedDatabase(t)
	reg, err := registry.New(registry.Config{Owner: "t"}, registry.Deps{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := admin.New(admin.Config{Process: mustConfig(t), OperatorToken: opToken, ReadToken: readToken}, admin.Deps{Pool: pool, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// A name or position in the path that does not exist, or is not one, is
// refused naming the path value in field, as a consumer group is ("group"):
// these named nothing.
func TestPathValueRefusalsNameTheField(t *testing.T) {
	srv, _, _ := keyServer(t)
	for _, c := range []struct {
		name, method, target, body string
		status                     int
		field                      string
	}{
		{"rebuild of an unknown projection", "POST", "/admin/v1/projections/nosuch/rebuild", `{"version":2}`, 404, "name"},
		{"rollback of an unknown projection", "POST", "/admin/v1/projections/nosuch/rollback", `{}`, 404, "name"},
		{"revoke of an unknown key", "POST", "/admin/v1/auth/keys/nosuch/revoke", `{}`, 404, "key_id"},
		{"rotate of an unknown key", "POST", "/admin/v1/auth/keys/nosuch/rotate", `{}`, 404, "key_id"},
		{"parked position not a number", "POST", "/admin/v1/relay/parked/abc/drop", `{}`, 400, "position"},
		{"parked position zero", "POST", "/admin/v1/relay/parked/0/republish", `{}`, 400, "position"},
		{"parked position that holds no record", "POST", "/admin/v1/relay/parked/7/drop", `{}`, 404, "position"},
		{"drop with a topic", "POST", "/admin/v1/relay/parked/7/drop", `{"topic":"t"}`, 400, "topic"},
		{"redrive of nothing", "POST", "/admin/v1/dlq/redrive", `{"dry_run":true}`, 400, "letter"},
		{"schema of an unknown type", "GET", "/admin/v1/schemas/Nosuch", "", 404, "event_type"},
		{"delete of an unknown type", "DELETE", "/admin/v1/schemas/Nosuch", "", 404, "event_type"},
		{"schema version that does not exist", "GET", "/admin/v1/schemas/Nosuch/versions/3", "", 404, "version"},
		{"upcaster that does not exist", "GET", "/admin/v1/schemas/Nosuch/upcasters/1", "", 404, "from"},
	} {
		t.Run(c.name, func(t *testing.T) {
			req := httptest.NewRequest(c.method, c.target, strings.NewReader(c.body))
			req.Header.Set("Authorization", "Bearer "+opToken)
			if c.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			w := httptest.NewRecorder()
			srv.ServeHTTP(w, req)
			var p map[string]any
			_ = json.Unmarshal(w.Body.Bytes(), &p)
			if w.Code != c.status || p["field"] != c.field || w.Header().Get("Content-Type") != "application/problem+json" {
				t.Errorf("%s %s: %d %s; want %d naming %q", c.method, c.target, w.Code, w.Body, c.status, c.field)
			}
		})
	}
}
