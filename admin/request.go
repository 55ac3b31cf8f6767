package admin

import (
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/shared/querycheck"
)

// checkQuery refuses a query string the handlers would misread
// (querycheck.Check, the rule of the command API's /v1 routes), naming the
// parameter.
func checkQuery(raw string) error {
	if e := querycheck.Check(raw); e != nil {
		return atField(e.Field, invalid("%s", e.Message))
	}
	return nil
}

// queryInt reads the integer parameter name in min..max, def when absent;
// a value that is not such an integer (also an empty one) is refused
// naming the parameter.
func queryInt(q url.Values, name string, def, lo, hi int) (int, error) {
	if !q.Has(name) {
		return def, nil
	}
	n, err := strconv.Atoi(q.Get(name))
	if err != nil || n < lo || n > hi {
		return 0, atField(name, invalid("%s must be an integer in %d..%d, got %q", name, lo, hi, q.Get(name)))
	}
	return n, nil
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
	const want = "application/json"
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return atField("Content-Type", kind(errUnsupportedMedia, fmt.Errorf("a request with a body needs Content-Type: %s", want)))
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return atField("Content-Type", kind(errUnsupportedMedia, fmt.Errorf("Content-Type %q cannot be parsed; want %s", ct, want)))
	}
	for k, v := range params {
		if k != "charset" || !strings.EqualFold(v, "utf-8") {
			return atField("Content-Type", kind(errUnsupportedMedia, fmt.Errorf("Content-Type parameter %s=%s is not supported (only charset=utf-8)", k, v)))
		}
	}
	if mt != want {
		return atField("Content-Type", kind(errUnsupportedMedia, fmt.Errorf("Content-Type %s is not supported; want %s", mt, want)))
	}
	return nil
}
