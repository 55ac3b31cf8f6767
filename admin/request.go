package admin

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/sluicehq/sluice/shared/httpcheck"
)

// checkQuery refuses a query string the handlers would misread
// (httpcheck.Query, the rule of the command API's /v1 routes), naming the
// parameter.
func checkQuery(raw string) error {
	if e := httpcheck.Query(raw); e != nil {
		return atField(e.Field, invalid("%s", e.Message))
	}
	return nil
}

// queryInt reads the integer parameter name in lo..hi, def when absent;
// a value that is not such an integer (also an empty one) is refused
// naming the parameter (httpcheck.Int, the rule of the inspect reads too).
func queryInt(q url.Values, name string, def, lo, hi int) (int, error) {
	n, ok, e := httpcheck.Int(q, name, int64(lo), int64(hi))
	if e != nil {
		return 0, atField(e.Field, invalid("%s", e.Message))
	}
	if !ok {
		return def, nil
	}
	return int(n), nil
}

// queryBool reads the flag parameter name: "true" or "false" (absent:
// false); anything else is refused naming the parameter (?all=yes read as
// false).
func queryBool(q url.Values, name string) (bool, error) {
	switch v := q.Get(name); {
	case !q.Has(name) || v == "false":
		return false, nil
	case v == "true":
		return true, nil
	default:
		return false, atField(name, invalid("%s must be true or false, got %q", name, v))
	}
}

// maxListLimit is the largest limit of a list endpoint (parked records,
// dead letters).
const maxListLimit = 10000

// checkMediaType refuses an action body that is not declared JSON: a
// request with a body must say Content-Type application/json, with no
// parameter but charset=utf-8 (the command API's rule); a request without
// a body needs none.
func checkMediaType(r *http.Request, body []byte) error {
	if len(body) == 0 {
		return nil
	}
	if e := httpcheck.MediaType(r.Header.Get("Content-Type"), "application/json"); e != nil {
		return atField(e.Field, kind(errUnsupportedMedia, errors.New(e.Message)))
	}
	return nil
}

// checkText refuses a value Postgres cannot hold as text (a NUL, or bytes
// that are not UTF-8), naming field: handed on, it failed the query and
// was answered 503, as if Postgres were out.
func checkText(field, v string) error {
	if i := strings.IndexByte(v, 0); i >= 0 {
		return atField(field, invalid("%s %q: contains NUL at byte %d", field, v, i))
	}
	if !utf8.ValidString(v) {
		return atField(field, invalid("%s %q: is not UTF-8", field, v))
	}
	return nil
}

// checkRequestText applies checkText to every path value of the
// endpoint's pattern and every query parameter, naming the one at fault.
func checkRequestText(r *http.Request) error {
	for rest := r.Pattern; ; {
		_, after, ok := strings.Cut(rest, "{")
		if !ok {
			break
		}
		name, tail, _ := strings.Cut(after, "}")
		rest = tail
		name = strings.TrimSuffix(name, "...")
		if err := checkText(name, r.PathValue(name)); err != nil {
			return err
		}
	}
	for name, vs := range r.URL.Query() {
		for _, v := range vs {
			if err := checkText(name, v); err != nil {
				return err
			}
		}
	}
	return nil
}
