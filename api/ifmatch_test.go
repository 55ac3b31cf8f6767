package api

import (
	"strings"
	"testing"
)

// A conflict names the input the precondition came in: If-Match when the
// request sent only the header (it named expected_seq, a query parameter
// the request did not have), expected_seq when the query has it. The
// reply stays 409 optimistic_concurrency_conflict (docs/api.md) and
// nothing is stored.
func TestConflictNamesThePreconditionsInput(t *testing.T) {
	a := newTestAPI(t, apiConfig{})
	a.do("POST", base, `{"instance_id":"m-1"}`).expect(t, 202, "")
	cases := []struct {
		name, method, target, body string
		headers                    []string
		field                      string
	}{
		{"patch with If-Match", "PATCH", base + "/m-1", `{"a":1}`, []string{`If-Match: "5"`}, "If-Match"},
		{"delete with a bare If-Match", "DELETE", base + "/m-1", ``, []string{`If-Match: 7`}, "If-Match"},
		{"create with If-Match", "POST", base, `{"instance_id":"m-1"}`, []string{`If-Match: "0"`}, "If-Match"},
		{"patch with expected_seq", "PATCH", base + "/m-1?expected_seq=5", `{"a":1}`, nil, "expected_seq"},
		{"patch with both, equal", "PATCH", base + "/m-1?expected_seq=4", `{"a":1}`, []string{`If-Match: "4"`}, "expected_seq"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := a.appendsCount()
			r := a.do(c.method, c.target, c.body, c.headers...).expect(t, 409, CodeConflict)
			if r.str("field") != c.field || !strings.HasPrefix(r.str("detail"), c.field+" ") {
				t.Fatalf("field %q detail %q, want %s", r.str("field"), r.str("detail"), c.field)
			}
			if r.num("actual_seq") != 1 {
				t.Fatalf("actual_seq %d, want 1", r.num("actual_seq"))
			}
			if n := a.appendsCount() - before; n != 0 {
				t.Fatalf("a conflict stored %d events", n)
			}
		})
	}
}
