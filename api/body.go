package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/httpcheck"
)

// fieldBody is the field of a refusal of the request body as a whole (not
// JSON, not an object, a body where none is taken).
const fieldBody = "body"

// Media types the API accepts.
const (
	mediaJSON       = "application/json"
	mediaMergePatch = "application/merge-patch+json"
)

// readBody reads the whole request body, at most limit bytes; a longer body
// is 413 body_too_large naming field "body" (a refusal of the body as a
// whole) and is not read further.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *Error) {
	if e := checkContentEncoding(w, r); e != nil {
		return nil, e
	}
	if r.ContentLength > limit {
		return nil, bodyTooLarge(limit)
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, bodyTooLarge(limit)
		}
		return nil, newError(http.StatusBadRequest, CodeMalformedJSON, fieldBody, "reading the request body failed: %v", err)
	}
	return b, nil
}

// checkContentEncoding refuses a body in a content coding (gzip, br, …):
// the API reads bodies as sent and would misread a compressed one — a
// gzipped body was refused as invalid text, and a body labelled gzip but
// sent plain was stored. 415 naming Content-Encoding, with Accept-Encoding:
// identity (RFC 9110, 15.5.16). A request without a body is not refused.
func checkContentEncoding(w http.ResponseWriter, r *http.Request) *Error {
	if r.ContentLength == 0 {
		return nil
	}
	for _, v := range r.Header.Values("Content-Encoding") {
		for _, c := range strings.Split(v, ",") {
			if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
				w.Header().Set("Accept-Encoding", "identity")
				return newError(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType, "Content-Encoding",
					"Content-Encoding %s is not supported: send the body uncompressed", c)
			}
		}
	}
	return nil
}

func bodyTooLarge(limit int64) *Error {
	e := newError(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, fieldBody, "the request body exceeds the limit of %d bytes (SLUICE_API_MAX_BODY_BYTES)", limit)
	e.Limit = strconv.FormatInt(limit, 10) + " bytes"
	return e
}

// checkMediaType accepts a Content-Type naming one of allowed, with no
// parameter other than charset=utf-8.
func checkMediaType(r *http.Request, allowed ...string) *Error {
	// Content-Type has one value (RFC 9110, 8.3); the first of two was
	// read and the other ignored.
	if n := len(r.Header.Values("Content-Type")); n > 1 {
		return newError(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType, "Content-Type", "Content-Type is given %d times; give it once", n)
	}
	if e := httpcheck.MediaType(r.Header.Get("Content-Type"), allowed...); e != nil {
		return newError(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType, e.Field, "%s", e.Message)
	}
	return nil
}

// depthRule says how deep a request document may nest: the user's data
// object sits at depth offset+1 of the document (offset 0: the document is
// the data, a merge patch; 1: {"data": {…}}), and may itself nest at most
// maxData levels (the data object is level 1).
type depthRule struct {
	offset  int
	maxData int
}

// scanObject checks that b is one well-formed JSON object in valid UTF-8,
// with no duplicate key at any level and no nesting beyond the rule, with
// the module's one strict object scanner (envelope.ScanObject: a token scan,
// never recursion over untrusted input), and returns its top-level members
// and their names in document order. The members are sub-slices of b.
func scanObject(b []byte, rule depthRule, field string) (map[string]json.RawMessage, []string, *Error) {
	members := map[string]json.RawMessage{}
	var order []string
	err := envelope.ScanObject(b, envelope.ObjectRule{
		Field:    field,
		Offset:   rule.offset,
		MaxDepth: rule.maxData,
		OnKey:    func(k string) error { order = append(order, k); return nil },
		OnValue:  func(k string, v []byte) { members[k] = v },
	})
	if err != nil {
		return nil, nil, bodyError(err, rule, field)
	}
	return members, order, nil
}

// bodyError maps a refusal of envelope.ScanObject to the API's error: 400
// malformed_json naming field, 422 when the body is JSON but not an object,
// 413 limit_exceeded naming the member too deep, 400 invalid_text (issue
// 26.2: invalid UTF-8 and lone surrogate escapes are refused before
// decoding, never turned into U+FFFD).
func bodyError(err error, rule depthRule, field string) *Error {
	var oe *envelope.ObjectError
	if !errors.As(err, &oe) {
		return validationAs(err, "")
	}
	malformed := func(format string, args ...any) *Error {
		return newError(http.StatusBadRequest, CodeMalformedJSON, field, format, args...)
	}
	switch oe.Fault {
	case envelope.ObjectEmpty:
		return malformed("the body is empty; want a JSON object")
	case envelope.ObjectNotAnObject:
		return newError(http.StatusUnprocessableEntity, CodeValidationFailed, field, "must be a JSON object")
	case envelope.ObjectTruncated:
		return malformed("unexpected end of JSON input")
	case envelope.ObjectDuplicateKey:
		return malformed("duplicate key %q", oe.Key)
	case envelope.ObjectTrailingData:
		return malformed("trailing data after the JSON object")
	case envelope.ObjectTooDeep:
		cur := field
		if rule.offset > 0 && oe.Member != "" {
			cur = oe.Member
		}
		e := newError(http.StatusRequestEntityTooLarge, CodeLimitExceeded, cur,
			"nesting depth exceeds the limit of %d levels (the data object is level 1; the limit is EVENT_STORE_MAX_DATA_DEPTH minus the level the command wraps around data)", rule.maxData)
		e.Limit = fmt.Sprintf("depth %d", rule.maxData)
		return e
	default:
		return malformed("not valid JSON: %v", oe.Err)
	}
}

// scanBody is scanObject of the whole request body: a refusal that names
// no member names the body (fieldBody).
func scanBody(b []byte, rule depthRule) (map[string]json.RawMessage, []string, *Error) {
	members, order, e := scanObject(b, rule, "")
	if e != nil && e.Field == "" {
		e.Field = fieldBody
	}
	return members, order, e
}

// onlyFields rejects members not in allowed (exact, case-sensitive names).
func onlyFields(order []string, allowed ...string) *Error {
	for _, k := range order {
		ok := false
		for _, a := range allowed {
			if k == a {
				ok = true
				break
			}
		}
		if !ok {
			return unprocessable(k, "unknown field %q; allowed: %s", k, strings.Join(allowed, ", "))
		}
	}
	return nil
}

// isObject reports whether a raw JSON value is an object.
func isObject(v json.RawMessage) bool { return len(v) > 0 && v[0] == '{' }

// isNull reports whether a raw JSON value is null.
func isNull(v json.RawMessage) bool { return string(v) == "null" }

// stringMember decodes a member that must be a JSON string.
func stringMember(v json.RawMessage, field string) (string, *Error) {
	var s string
	if len(v) == 0 || v[0] != '"' || json.Unmarshal(v, &s) != nil {
		return "", unprocessable(field, "must be a JSON string")
	}
	return s, nil
}

// parseSeq parses a non-negative sequence number.
func parseSeq(s string) (int64, bool) {
	if s == "" || len(s) > 19 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n >= 0
}

// expectedSeq reads the OCC precondition from the expected_seq query
// parameter or the If-Match header ("5", the ETag form "\"5\""). Both may be
// given only if they agree.
func expectedSeq(r *http.Request) (*int64, *Error) {
	var q, h *int64
	if vals, ok := r.URL.Query()["expected_seq"]; ok {
		if len(vals) != 1 {
			return nil, badParam("expected_seq", "expected_seq must be given once")
		}
		n, ok := parseSeq(vals[0])
		if !ok {
			return nil, badParam("expected_seq", "expected_seq must be an integer >= 0, got %q", vals[0])
		}
		q = &n
	}
	if vals := r.Header.Values("If-Match"); len(vals) > 0 {
		if len(vals) != 1 {
			return nil, badParam("If-Match", "If-Match must be given once, with one sequence number")
		}
		v := strings.TrimSpace(vals[0])
		if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			v = v[1 : len(v)-1]
		}
		n, ok := parseSeq(v)
		if !ok {
			return nil, badParam("If-Match", "If-Match must be one strong ETag of a sequence number (\"5\" or 5), got %q", vals[0])
		}
		h = &n
	}
	switch {
	case q != nil && h != nil && *q != *h:
		return nil, badParam("expected_seq", "expected_seq=%d and If-Match %d disagree", *q, *h)
	case q != nil:
		return q, nil
	default:
		return h, nil
	}
}
