package auth

import (
	"strings"
	"testing"
)

// FuzzAuthorization: the header parser never panics, and what it accepts
// is a non-empty token68 that parses back to itself.
func FuzzAuthorization(f *testing.F) {
	for _, s := range []string{"Bearer abc", "bearer  a==", "Basic x", "Bearer sluice_0123456789abcdef_AAAA", "Bearer =a", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		tok, err := ParseAuthorization(h)
		if err != nil {
			return
		}
		if tok == "" || len(tok) > MaxTokenLen || strings.ContainsAny(tok, " \t\r\n,\"") {
			t.Fatalf("%q accepted as %q", h, tok)
		}
		if again, err := ParseAuthorization("Bearer " + tok); err != nil || again != tok {
			t.Fatalf("round trip of %q: %q, %v", tok, again, err)
		}
		SplitKey(tok)
	})
}

// FuzzPattern: a pattern never panics when parsed or matched; a parsed
// pattern matches a resource it spells out literally (no *), and "*" of
// the same kind covers what the pattern covers.
func FuzzPattern(f *testing.F) {
	for _, s := range []string{"*", "db:orders", "db:o*/c/eu-*", "stream:Order/eu-*", "stream:*/a*b", "db:a/b/c:d/e"} {
		f.Add(s, "Instance", "orders:c:eu-1", false)
		f.Add(s, "Order", "eu-1", true)
	}
	f.Fuzz(func(t *testing.T, pattern, typ, id string, prefix bool) {
		p, err := ParsePattern(pattern)
		res := Resource{Type: typ, ID: id, Prefix: prefix}
		if err != nil {
			return
		}
		got := p.Match(res)
		if p.String() != pattern {
			t.Fatalf("String %q != %q", p.String(), pattern)
		}
		if got {
			star, _ := ParsePattern("*")
			if !star.Match(res) {
				t.Fatal("* does not cover a match")
			}
		}
		if !strings.Contains(pattern, "*") && !prefix {
			// A literal pattern matches the resource it names.
			var lit Resource
			switch p.kind {
			case 's':
				lit = Resource{Type: p.p[0], ID: p.p[1]}
			case 'd':
				lit = Resource{Type: "Instance", ID: p.p[0] + ":" + p.p[1] + ":" + p.p[2]}
			}
			if lit.Type != "" && !p.Match(lit) {
				t.Fatalf("%q does not match its own resource %+v", pattern, lit)
			}
		}
		// glob and globPrefix agree: a full match is a prefix match.
		if glob(pattern, id) && !globPrefix(pattern, id) {
			t.Fatalf("glob(%q, %q) but not globPrefix", pattern, id)
		}
	})
}
