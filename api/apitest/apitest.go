// Package apitest provides a test helper that holds an HTTP API to its
// OpenAPI document: every exchange a test makes through a Validator is
// checked with kin-openapi (openapi3filter.ValidateRequest and
// ValidateResponse), and the test fails on any response whose status,
// content type, headers or body the document does not describe.
//
// The guarantee it keeps: a test suite that sends all its requests through
// a Validator cannot pass while the served document and the handlers
// disagree on a reply the suite provokes. The command API's suite (package
// api) uses it with api.OpenAPI(); other HTTP surfaces use it with their own
// documents:
//
//	v := apitest.MustNew(t, api.OpenAPI())
//	h = v.Handler(t, h)                                // an http.Handler under test
//	client := &http.Client{Transport: v.RoundTripper(t, nil)} // a running server
//
// Requests are validated too, but a request the document calls invalid is
// not itself a failure (suites send bad input on purpose): it fails only
// when the API nevertheless answers it with a 2xx other than 207, because
// then the document is stricter than the handler (a 207 reports its parts'
// failures one by one: a batch with a malformed item is answered 207).
//
// A request no documented operation matches must be answered 404 (no such
// path) or 405 (no such method) — or 401 when the document requires
// authentication globally, since the API checks credentials first — with a
// body of the document's components/schemas/Error.
package apitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// Validator checks requests and responses against one OpenAPI document.
// It is safe for concurrent use.
type Validator struct {
	doc    *openapi3.T
	router routers.Router
	// fallback is the schema of a reply to a request no documented route
	// matches (the router's own 404 and 405): nil when the document has
	// no components/schemas/Error.
	fallback *openapi3.SchemaRef
}

// New loads and validates the document and prepares a router over it. The
// document's servers are ignored: requests are matched by path alone,
// whatever host a test server listens on.
func New(doc []byte) (*Validator, error) {
	loader := openapi3.NewLoader()
	d, err := loader.LoadFromData(doc)
	if err != nil {
		return nil, fmt.Errorf("apitest: load the OpenAPI document: %w", err)
	}
	if err := d.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("apitest: the OpenAPI document is not valid: %w", err)
	}
	d.Servers = nil
	closeResponseObjects(d)
	r, err := gorillamux.NewRouter(d)
	if err != nil {
		return nil, fmt.Errorf("apitest: route the OpenAPI document: %w", err)
	}
	v := &Validator{doc: d, router: r}
	if d.Components != nil {
		v.fallback = d.Components.Schemas["Error"]
	}
	return v, nil
}

// closeResponseObjects makes every object schema reachable from a response
// that lists properties and says nothing of others refuse undocumented
// members (additionalProperties: false), in the validator's copy only: the
// published document stays open to additions, as clients expect, while a
// suite fails on a member the handlers send but the document does not name.
func closeResponseObjects(d *openapi3.T) {
	seen := map[*openapi3.Schema]bool{}
	var walk func(*openapi3.SchemaRef)
	walk = func(ref *openapi3.SchemaRef) {
		if ref == nil || ref.Value == nil || seen[ref.Value] {
			return
		}
		s := ref.Value
		seen[s] = true
		if len(s.Properties) > 0 && s.AdditionalProperties.Has == nil && s.AdditionalProperties.Schema == nil {
			no := false
			s.AdditionalProperties.Has = &no
		}
		for _, p := range s.Properties {
			walk(p)
		}
		walk(s.Items)
		for _, group := range []openapi3.SchemaRefs{s.OneOf, s.AnyOf, s.AllOf} {
			for _, r := range group {
				walk(r)
			}
		}
	}
	for _, item := range d.Paths.Map() {
		for _, op := range item.Operations() {
			for _, resp := range op.Responses.Map() {
				if resp.Value == nil {
					continue
				}
				for _, mt := range resp.Value.Content {
					walk(mt.Schema)
				}
			}
		}
	}
}

// MustNew is New that fails the test on error.
func MustNew(t testing.TB, doc []byte) *Validator {
	t.Helper()
	v, err := New(doc)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Check validates one exchange: req with its body reqBody (req.Body is not
// read), and the response's status, header and body. It returns nil when
// the document describes the exchange.
func (v *Validator) Check(req *http.Request, reqBody []byte, status int, header http.Header, body []byte) error {
	ctx := req.Context()
	vreq := req.Clone(ctx)
	vreq.Body = io.NopCloser(bytes.NewReader(reqBody))
	vreq.ContentLength = int64(len(reqBody))
	route, params, err := v.router.FindRoute(vreq)
	if err != nil {
		return v.checkUnrouted(req, err, status, header, body)
	}
	in := &openapi3filter.RequestValidationInput{
		Request: vreq, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, RejectWhenRequestBodyNotSpecified: true, MultiError: true},
	}
	reqErr := openapi3filter.ValidateRequest(ctx, in)
	if reqErr != nil && status >= 200 && status < 300 && status != http.StatusMultiStatus {
		return fmt.Errorf("%s %s: the document calls the request invalid, yet the API answered %d: %w", req.Method, req.URL.RequestURI(), status, reqErr)
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 status,
		Header:                 header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		return fmt.Errorf("%s %s → %d %s: the reply does not match the document: %w\nbody: %s", req.Method, req.URL.RequestURI(), status, header.Get("Content-Type"), err, clip(body))
	}
	return nil
}

// checkUnrouted accepts a reply to a request that matches no documented
// operation only when it is the router's own 404 (no such path) or 405 (no
// such method), or a 401 under global security, and its body is a problem
// document of the Error schema.
func (v *Validator) checkUnrouted(req *http.Request, routeErr error, status int, header http.Header, body []byte) error {
	var re *routers.RouteError
	if !errors.As(routeErr, &re) {
		return fmt.Errorf("%s %s: %w", req.Method, req.URL.RequestURI(), routeErr)
	}
	want := http.StatusNotFound
	if errors.Is(re, routers.ErrMethodNotAllowed) {
		want = http.StatusMethodNotAllowed
	}
	if status != want && (status != http.StatusUnauthorized || len(v.doc.Security) == 0) {
		return fmt.Errorf("%s %s: the document has no such operation (%v), yet the API answered %d", req.Method, req.URL.RequestURI(), routeErr, status)
	}
	if v.fallback == nil {
		return nil
	}
	if ct := header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		return fmt.Errorf("%s %s → %d: content type %q, want application/problem+json", req.Method, req.URL.RequestURI(), status, ct)
	}
	value, err := decodeJSON(body)
	if err != nil {
		return fmt.Errorf("%s %s → %d: %w", req.Method, req.URL.RequestURI(), status, err)
	}
	if err := v.fallback.Value.VisitJSON(value, openapi3.MultiErrors()); err != nil {
		return fmt.Errorf("%s %s → %d: the problem document does not match the Error schema: %w\nbody: %s", req.Method, req.URL.RequestURI(), status, err, clip(body))
	}
	return nil
}

func decodeJSON(body []byte) (any, error) {
	var value any
	if err := json.Unmarshal(body, &value); err != nil {
		return nil, fmt.Errorf("the body is not JSON: %w", err)
	}
	return value, nil
}

// Handler returns h wrapped so that every exchange through it is checked;
// a mismatch fails t (t.Errorf: the test goes on and reports every one).
func (v *Validator) Handler(t testing.TB, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var reqBody []byte
		if r.Body != nil {
			reqBody, _ = io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(reqBody))
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if err := v.Check(r, reqBody, rec.Code, rec.Header(), rec.Body.Bytes()); err != nil {
			t.Errorf("OpenAPI: %v", err)
		}
		for k, vs := range rec.Header() {
			w.Header()[k] = vs
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	})
}

// RoundTripper returns an http.RoundTripper over rt (nil:
// http.DefaultTransport) that checks every exchange; a mismatch fails t.
// The response body is read whole and handed on unchanged.
func (v *Validator) RoundTripper(t testing.TB, rt http.RoundTripper) http.RoundTripper {
	if rt == nil {
		rt = http.DefaultTransport
	}
	return roundTripper{v: v, t: t, rt: rt}
}

type roundTripper struct {
	v  *Validator
	t  testing.TB
	rt http.RoundTripper
}

func (r roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	var reqBody []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
		reqBody = b
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(reqBody))
	}
	res, err := r.rt.RoundTrip(req)
	if err != nil {
		return res, err
	}
	body, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	res.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return res, err
	}
	if err := r.v.Check(req, reqBody, res.StatusCode, res.Header, body); err != nil {
		r.t.Errorf("OpenAPI: %v", err)
	}
	return res, nil
}

func clip(b []byte) string {
	if len(b) > 2000 {
		return string(b[:2000]) + "…"
	}
	return string(b)
}
