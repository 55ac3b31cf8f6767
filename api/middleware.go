package api

// This file holds the API's cross-cutting code as composable layers, each
// a func(http.Handler) http.Handler: the route and status of a request,
// tracing, metrics, panic recovery, authentication and authorization, the
// in-flight limit. ServeHTTP runs a request through them, outermost first.

import (
	"context"
	"net/http"
	"strings"
	"time"
)

// layer is one piece of cross-cutting code around a handler.
type layer func(http.Handler) http.Handler

// chain wraps h in ls, the first outermost.
func chain(h http.Handler, ls ...layer) http.Handler {
	for i := len(ls) - 1; i >= 0; i-- {
		h = ls[i](h)
	}
	return h
}

// layers is the API's handler: the router inside its layers.
func (s *server) layers() http.Handler {
	return chain(http.HandlerFunc(s.route),
		s.routing,     // the route pattern and the status writer, for every layer below
		s.tracing,     // a server span per /v1 request (Deps.TracerProvider)
		s.measuring,   // sluice_api_requests by route and status, after recovery wrote its 500
		s.recovering,  // a panic becomes a 500 problem+json
		s.authorizing, // /v1: the principal and its grants (authz.go)
		s.limiting,    // /v1: at most Config.MaxInFlight requests at once
	)
}

// routeInfo is what routing learns of a request for the layers below it.
type routeInfo struct {
	pattern string // the router's pattern, "" when no route matches
	route   string // pattern, or "unmatched": the metrics' and spans' label
	sw      *statusWriter
}

type routeKey struct{}

// routeOf returns the request's routeInfo (a zero one outside routing).
func routeOf(r *http.Request) routeInfo {
	ri, _ := r.Context().Value(routeKey{}).(routeInfo)
	return ri
}

// isV1 reports whether the request is for the /v1 API.
func isV1(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/v1/") || r.URL.Path == "/v1" }

// routing finds the request's route and wraps the writer in a
// statusWriter that the layers below read the status from.
func (s *server) routing(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, pattern := s.mux.Handler(r)
		ri := routeInfo{pattern: pattern, route: pattern, sw: &statusWriter{ResponseWriter: w}}
		if ri.route == "" {
			ri.route = "unmatched"
		}
		next.ServeHTTP(ri.sw, r.WithContext(context.WithValue(r.Context(), routeKey{}, ri)))
	})
}

// tracing starts a server span for each /v1 request when tracing is on.
func (s *server) tracing(next http.Handler) http.Handler {
	if s.tracer == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/v1/") {
			next.ServeHTTP(w, r)
			return
		}
		ri := routeOf(r)
		r, end := s.traceRequest(r, ri.route, ri.sw)
		defer end()
		next.ServeHTTP(w, r)
	})
}

// measuring records each request's route, status and duration.
func (s *server) measuring(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ri := routeOf(r)
		defer func() { s.metrics.observe(ri.route, ri.sw.status(), time.Since(start)) }()
		next.ServeHTTP(w, r)
	})
}

// recovering turns a panic into a logged 500 problem+json (unless the
// answer had begun); http.ErrAbortHandler goes on up, as net/http wants.
func (s *server) recovering(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				ri := routeOf(r)
				s.log.Error("api: panic serving request", "method", r.Method, "route", ri.route, "panic", p)
				if !ri.sw.wrote {
					writeError(w, newError(http.StatusInternalServerError, CodeInternal, "", "internal error"))
				}
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// authorizing authenticates every /v1 request and checks its principal's
// grants for the route (authz.go); the request goes on with the principal
// in its context.
func (s *server) authorizing(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isV1(r) {
			next.ServeHTTP(w, r)
			return
		}
		r2, release, e := s.authorize(w, r, routeOf(r).pattern)
		if e != nil {
			s.fail(w, r2, e)
			return
		}
		defer release()
		next.ServeHTTP(w, r2)
	})
}

// limiting answers 429 at once when Config.MaxInFlight /v1 requests are
// being served. A subscription (…/subscribe, server-sent events) holds its
// connection for as long as the client reads: it takes no slot, or a few
// subscribers would lock every command out.
func (s *server) limiting(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isV1(r) || strings.HasSuffix(routeOf(r).pattern, "/subscribe") {
			next.ServeHTTP(w, r)
			return
		}
		select {
		case s.inflight <- struct{}{}:
			defer func() { <-s.inflight }()
		default:
			writeError(w, newError(http.StatusTooManyRequests, CodeTooManyRequests, "",
				"the API is serving %d requests already (SLUICE_API_MAX_IN_FLIGHT); retry after Retry-After", cap(s.inflight)))
			return
		}
		next.ServeHTTP(w, r)
	})
}
