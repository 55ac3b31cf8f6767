package inspect

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/shared/httpcheck"
)

// Routes of Handler, under the admin API's prefix.
const (
	TracePath     = "/admin/v1/trace/"
	AggregatePath = "/admin/v1/aggregates/"
)

// Handler serves the read-only admin endpoints of this package (JSON):
//
//	GET /admin/v1/trace/{id}                    Trace (a command_id or event_id)
//	GET /admin/v1/aggregates/{type}/{id}        Aggregate (?from_seq=&limit=)
//
// A bad request is a 400 problem naming the field at fault (a query
// parameter, or the path value id, aggregate_type or aggregate_id).
// It does no authentication: mount it behind the admin API's (read role).
func (in *Inspector) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+TracePath+"{id}", func(w http.ResponseWriter, r *http.Request) {
		if err := checkQuery(r); err != nil {
			writeProblem(w, err)
			return
		}
		tr, err := in.Trace(r.Context(), r.PathValue("id"))
		if err != nil {
			writeProblem(w, notFoundAt("id", err))
			return
		}
		writeJSON(w, http.StatusOK, tr)
	})
	aggregate := func(w http.ResponseWriter, r *http.Request) {
		if err := checkQuery(r); err != nil {
			writeProblem(w, err)
			return
		}
		q := AggregateQuery{Type: r.PathValue("type"), ID: r.PathValue("id")}
		query := r.URL.Query()
		// from_seq 0 (or none) is the last page; limit is 1..MaxPageSize,
		// refused outside as by the admin API's lists (never capped).
		from, _, e := httpcheck.Int(query, "from_seq", 0, math.MaxInt64)
		if e == nil {
			var limit int64
			limit, _, e = httpcheck.Int(query, "limit", 1, MaxPageSize)
			q.FromSeq, q.Limit = from, int(limit)
		}
		if e != nil {
			writeProblem(w, invalidAt(e.Field, "%s", e.Message))
			return
		}
		v, err := in.Aggregate(r.Context(), q)
		if err != nil {
			writeProblem(w, notFoundAt("aggregate_id", err))
			return
		}
		writeJSON(w, http.StatusOK, v)
	}
	mux.HandleFunc("GET "+AggregatePath+"{type}/{id...}", aggregate)
	// Without the id's segment: refused naming aggregate_id (the router
	// redirected it to {type}/, which is).
	mux.HandleFunc("GET "+AggregatePath+"{type}", aggregate)
	// Any other request under the two prefixes: a problem, as the admin
	// API answers it (the router's own were text/plain, and a path short
	// of a segment was redirected).
	for _, prefix := range []string{TracePath, AggregatePath} {
		mux.HandleFunc(prefix, func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				w.Header().Set("Allow", "GET, HEAD")
				writeStatus(w, http.StatusMethodNotAllowed, "method_not_allowed", "method "+r.Method+" is not allowed on "+r.URL.Path+"; allowed: GET, HEAD", "")
				return
			}
			writeStatus(w, http.StatusNotFound, "not_found", "no admin endpoint "+r.Method+" "+r.URL.Path+": "+TracePath+"{id} or "+AggregatePath+"{type}/{id} (docs/console.md)", "")
		})
	}
	return mux
}

// checkQuery refuses a query string the handlers would misread, with the
// rule of the command and admin APIs (httpcheck.Query), naming the
// parameter.
func checkQuery(r *http.Request) error {
	if e := httpcheck.Query(r.URL.RawQuery); e != nil {
		return invalidAt(e.Field, "%s", e.Message)
	}
	return nil
}

// notFoundAt names field as what an ErrNotFound did not find (other
// errors unchanged).
func notFoundAt(field string, err error) error {
	if errors.Is(err, ErrNotFound) {
		return &httpcheck.FieldError{Field: field, Err: err}
	}
	return err
}

// invalidAt is an ErrInvalid naming field.
func invalidAt(field, format string, a ...any) error {
	return &httpcheck.FieldError{Field: field, Err: fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, a...))}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeProblem answers err as application/problem+json: 404 for
// ErrNotFound, 400 for ErrInvalid (naming the field when err says which),
// else 503 (a dependency failed; the operator may retry).
func writeProblem(w http.ResponseWriter, err error) {
	status, code := http.StatusServiceUnavailable, "unavailable"
	switch {
	case errors.Is(err, ErrNotFound):
		status, code = http.StatusNotFound, "not_found"
	case errors.Is(err, ErrInvalid):
		status, code = http.StatusBadRequest, "invalid"
	}
	writeStatus(w, status, code, strings.TrimPrefix(strings.TrimPrefix(err.Error(), ErrInvalid.Error()+": "), ErrNotFound.Error()+": "), httpcheck.FieldOf(err))
}

// writeStatus answers a problem of status with code and detail, naming
// field when it is not "".
func writeStatus(w http.ResponseWriter, status int, code, detail, field string) {
	p := map[string]any{
		"type": "urn:sluice:problem:" + code, "title": http.StatusText(status), "status": status, "code": code, "detail": detail,
	}
	if field != "" {
		p["field"] = field
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(p)
}
