package querycheck

import "testing"

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name, raw, field string // field "" : accepted
	}{
		{"empty", "", ""},
		{"plain pairs", "limit=10&cursor=abc", ""},
		{"escapes that decode", "q=a%20b&name=%3B", ""},
		{"empty pairs between", "a=1&&b=2", ""},
		{"a value that does not decode", "limit=%ZZ", "limit"},
		{"a ';' in a value", "aggregate_type=Order;x", "aggregate_type"},
		{"a name that does not decode", "%ZZ=1", "query"},
		{"a parameter twice", "limit=1&limit=2", "limit"},
		{"a parameter twice, once escaped", "limit=1&li%6Dit=2", "limit"},
		{"a nameless pair twice", "=1&=2", "query"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := Check(tc.raw)
			switch {
			case tc.field == "" && e != nil:
				t.Errorf("Check(%q) = %v, want accepted", tc.raw, e)
			case tc.field != "" && (e == nil || e.Field != tc.field):
				t.Errorf("Check(%q) = %+v, want a refusal naming %q", tc.raw, e, tc.field)
			}
		})
	}
}
