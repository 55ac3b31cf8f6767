package httpcheck

import "testing"

func TestQuery(t *testing.T) {
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
			e := Query(tc.raw)
			switch {
			case tc.field == "" && e != nil:
				t.Errorf("Query(%q) = %v, want accepted", tc.raw, e)
			case tc.field != "" && (e == nil || e.Field != tc.field):
				t.Errorf("Query(%q) = %+v, want a refusal naming %q", tc.raw, e, tc.field)
			}
		})
	}
}

func TestMediaType(t *testing.T) {
	for _, tc := range []struct {
		name, ct string
		ok       bool
	}{
		{"json", "application/json", true},
		{"json, utf-8", "application/json; charset=UTF-8", true},
		{"the other allowed", "application/merge-patch+json", true},
		{"none", "", false},
		{"unparsable", "application/json; =", false},
		{"another charset", "application/json; charset=latin1", false},
		{"another parameter", "application/json; v=1", false},
		{"another type", "text/plain", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := MediaType(tc.ct, "application/json", "application/merge-patch+json")
			if tc.ok != (e == nil) || e != nil && e.Field != "Content-Type" {
				t.Errorf("MediaType(%q) = %+v, want accepted %v", tc.ct, e, tc.ok)
			}
		})
	}
}
