package readmodel

import (
	"net/http"
	"net/url"
	"strings"
)

// PrefixEscaping keeps a request's percent-encoding when
// ELASTICSEARCH_URLS names a path prefix (https://proxy/es). The
// go-elasticsearch transport joins the prefix to the request's URL.Path and
// leaves URL.RawPath as the request had it, without the prefix; net/url
// then finds RawPath no longer encodes Path and sends Path escaped its own
// way, which keeps '/' as it is: a document id "a/b", sent as "a%2Fb",
// reached Elasticsearch as two segments. RoundTrip puts the escaped prefix
// in front of the request's own RawPath, so the bytes after the prefix are
// the ones the client built.
type PrefixEscaping struct {
	Base http.RoundTripper
}

// RoundTrip sends r with its escaping kept (a copy of r when it changes).
func (t PrefixEscaping) RoundTrip(r *http.Request) (*http.Response, error) {
	if raw, ok := prefixedRawPath(r.URL); ok {
		c := *r
		u := *r.URL
		u.RawPath = raw
		c.URL = &u
		r = &c
	}
	return t.Base.RoundTrip(r)
}

// prefixedRawPath returns the RawPath u should have: the escaped form of
// the prefix that was put in front of Path, followed by u.RawPath. ok is
// false when u needs nothing (no RawPath, or one that still encodes Path)
// or when Path does not end with what RawPath encodes.
func prefixedRawPath(u *url.URL) (string, bool) {
	if u.RawPath == "" || u.EscapedPath() == u.RawPath {
		return "", false
	}
	tail, err := url.PathUnescape(u.RawPath)
	if err != nil || !strings.HasSuffix(u.Path, tail) {
		return "", false
	}
	prefix := (&url.URL{Path: strings.TrimSuffix(u.Path, tail)}).EscapedPath()
	return prefix + u.RawPath, true
}
