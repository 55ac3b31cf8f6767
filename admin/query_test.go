package admin_test

import (
	"encoding/json"
	"net/http/httptest"
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
	_, pool := testenv.NewMigratedDatabase(t)
	reg, err := registry.New(registry.Config{Owner: "t"}, registry.Deps{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := admin.New(admin.Config{Process: mustConfig(t), OperatorToken: opToken, ReadToken: readToken}, admin.Deps{Pool: pool, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
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
