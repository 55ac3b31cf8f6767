package httpcheck

import (
	"errors"
	"fmt"
	"net/url"
	"testing"
)

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

func TestInt(t *testing.T) {
	for _, tc := range []struct {
		name, raw string
		n         int64
		ok        bool
		refused   bool
	}{
		{"absent", "", 0, false, false},
		{"in range", "limit=7", 7, true, false},
		{"the bounds", "limit=500", 500, true, false},
		{"below", "limit=0", 0, false, true},
		{"above", "limit=501", 0, false, true},
		{"not a number", "limit=abc", 0, false, true},
		{"empty", "limit=", 0, false, true},
		{"beyond int64", "limit=99999999999999999999", 0, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, _ := url.ParseQuery(tc.raw)
			n, ok, e := Int(q, "limit", 1, 500)
			if n != tc.n || ok != tc.ok || (e != nil) != tc.refused || e != nil && e.Field != "limit" {
				t.Errorf("Int(%q) = %d, %v, %+v; want %d, %v, refused %v naming limit", tc.raw, n, ok, e, tc.n, tc.ok, tc.refused)
			}
		})
	}
}

func TestPathSegment(t *testing.T) {
	for in, want := range map[string]string{
		".": "%2E", "..": "%2E%2E", "...": "...", "a.b": "a.b", "a/b": "a%2Fb", "a b": "a%20b", "?#": "%3F%23",
	} {
		if got := PathSegment(in); got != want {
			t.Errorf("PathSegment(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestFieldOf(t *testing.T) {
	base := errors.New("bad")
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"none", base, ""},
		{"nil", nil, ""},
		{"direct", &FieldError{Field: "limit", Err: base}, "limit"},
		{"wrapped", fmt.Errorf("list: %w", &FieldError{Field: "name", Err: base}), "name"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := FieldOf(c.err); got != c.want {
				t.Fatalf("FieldOf = %q, want %q", got, c.want)
			}
			if c.want != "" && !errors.Is(c.err, base) {
				t.Fatal("FieldError does not unwrap to its error")
			}
		})
	}
}
