// Package httpcheck provides the request rules both HTTP APIs (the
// command API's /v1 routes and the admin API) apply before any handler
// reads a request: the query string (a pair that does not decode and a
// parameter given twice are refused naming the parameter, never read as a
// default or as their first value) and the declared media type of a body.
// It keeps the guarantee that no parameter a handler reads is silently
// misread (dropped, defaulted or taken from its first copy) and no body is
// read as JSON unless it says it is. A parameter no handler of the route
// reads is not refused (docs/api.md). It also reads integer
// parameters (Int) and escapes a path segment for a request a component
// sends (PathSegment), so an id of "." or ".." never names another
// resource. FieldError carries the field a handler's refusal names to the
// code that writes the problem.
package httpcheck

import (
	"errors"
	"fmt"
	"mime"
	"net/url"
	"strconv"
	"strings"
)

// Error is a refused request: Field names the parameter ("query" when
// there is no name to give) or "Content-Type", Message says why.
type Error struct {
	Field   string
	Message string
}

func (e *Error) Error() string { return e.Message }

// FieldError is a handler's error naming the part of the request at
// fault (a query parameter, a path value, "body"): the problem an API
// answers for it names Field in its member field.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

// FieldOf is the field the first FieldError in err's chain names, or "".
func FieldOf(err error) string {
	if fe := (*FieldError)(nil); errors.As(err, &fe) {
		return fe.Field
	}
	return ""
}

// Query refuses a query string the handlers would misread: a pair that
// does not decode (a bad %-escape, or a ';', which url.Values drops with
// its pair silently, so ?aggregate_type=Order;x read the whole log and
// ?limit=%ZZ the default), and a parameter given twice (the handlers read
// the first; every parameter of both APIs takes one value). It returns
// nil for a query string both APIs read as written.
func Query(raw string) *Error {
	seen := map[string]bool{}
	for part := range strings.SplitSeq(raw, "&") {
		if part == "" {
			continue
		}
		k, v, _ := strings.Cut(part, "=")
		name, err := url.QueryUnescape(k)
		if err != nil || strings.Contains(k, ";") {
			return refuse("query", "query parameter name %q does not decode: percent-encode '%%' as %%25 and ';' as %%3B", k)
		}
		if _, err := url.QueryUnescape(v); err != nil || strings.Contains(v, ";") {
			return refuse(name, "%s=%s does not decode: percent-encode '%%' as %%25 and ';' as %%3B", name, v)
		}
		if seen[name] {
			if name == "" {
				// No name to report: the field names the query string.
				return refuse("query", "a query parameter without a name (%q) is given twice", part)
			}
			return refuse(name, "%s must be given once", name)
		}
		seen[name] = true
	}
	return nil
}

// Int reads the integer query parameter name of q, which must lie in
// lo..hi; ok is false when it is absent. A value that is not such an
// integer (an empty one too) is refused naming the parameter, in the words
// of both APIs ("limit must be an integer in 1..500, got \"0\"").
func Int(q url.Values, name string, lo, hi int64) (n int64, ok bool, e *Error) {
	if !q.Has(name) {
		return 0, false, nil
	}
	n, err := strconv.ParseInt(q.Get(name), 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, false, refuse(name, "%s must be an integer in %d..%d, got %q", name, lo, hi, q.Get(name))
	}
	return n, true, nil
}

// PathSegment escapes s as one segment of a request path: as
// url.PathEscape, and "." and ".." as %2E and %2E%2E, which PathEscape
// leaves alone and a server would resolve as dot segments, so the request
// would name another resource (the Go client's rule, client.seg).
func PathSegment(s string) string {
	if s == "." || s == ".." {
		return strings.Repeat("%2E", len(s))
	}
	return url.PathEscape(s)
}

// MediaType accepts a Content-Type header value naming one of allowed,
// with no parameter other than charset=utf-8; an empty one is refused.
func MediaType(contentType string, allowed ...string) *Error {
	want := strings.Join(allowed, " or ")
	if contentType == "" {
		return refuse("Content-Type", "Content-Type is required: %s", want)
	}
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return refuse("Content-Type", "Content-Type %q cannot be parsed; want %s", contentType, want)
	}
	for k, v := range params {
		if k != "charset" || !strings.EqualFold(v, "utf-8") {
			return refuse("Content-Type", "Content-Type parameter %s=%s is not supported (only charset=utf-8)", k, v)
		}
	}
	for _, a := range allowed {
		if mt == a {
			return nil
		}
	}
	return refuse("Content-Type", "Content-Type %s is not supported here; want %s", mt, want)
}

func refuse(field, format string, args ...any) *Error {
	return &Error{Field: field, Message: fmt.Sprintf(format, args...)}
}
