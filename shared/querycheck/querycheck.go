// Package querycheck provides the one rule both HTTP APIs (the command
// API's /v1 routes and the admin API) apply to a query string before any
// handler reads it: a pair that does not decode and a parameter given twice
// are refused naming the parameter, never read as a default or as their
// first value. It keeps the guarantee that no query parameter is silently
// ignored.
package querycheck

import (
	"fmt"
	"net/url"
	"strings"
)

// Error is a refused query string: Field names the parameter ("query"
// when there is no name to give), Message says why.
type Error struct {
	Field   string
	Message string
}

func (e *Error) Error() string { return e.Message }

// Check refuses a query string the handlers would misread: a pair that
// does not decode (a bad %-escape, or a ';', which url.Values drops with
// its pair silently, so ?aggregate_type=Order;x read the whole log and
// ?limit=%ZZ the default), and a parameter given twice (the handlers read
// the first; every parameter of both APIs takes one value). It returns
// nil for a query string both APIs read as written.
func Check(raw string) *Error {
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

func refuse(field, format string, args ...any) *Error {
	return &Error{Field: field, Message: fmt.Sprintf(format, args...)}
}
