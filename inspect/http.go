package inspect

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
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
// It does no authentication: mount it behind the admin API's (read role).
func (in *Inspector) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+TracePath+"{id}", func(w http.ResponseWriter, r *http.Request) {
		tr, err := in.Trace(r.Context(), r.PathValue("id"))
		if err != nil {
			writeProblem(w, err)
			return
		}
		writeJSON(w, http.StatusOK, tr)
	})
	mux.HandleFunc("GET "+AggregatePath+"{type}/{id...}", func(w http.ResponseWriter, r *http.Request) {
		q := AggregateQuery{Type: r.PathValue("type"), ID: r.PathValue("id")}
		for _, p := range []struct {
			name string
			set  func(int64)
		}{
			{"from_seq", func(n int64) { q.FromSeq = n }},
			{"limit", func(n int64) { q.Limit = int(n) }},
		} {
			if s := r.URL.Query().Get(p.name); s != "" {
				n, err := strconv.ParseInt(s, 10, 64)
				if err != nil || n < 0 {
					writeProblem(w, errors.Join(ErrInvalid, errors.New(p.name+" must be a non-negative integer")))
					return
				}
				p.set(n)
			}
		}
		v, err := in.Aggregate(r.Context(), q)
		if err != nil {
			writeProblem(w, err)
			return
		}
		writeJSON(w, http.StatusOK, v)
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeProblem answers err as application/problem+json: 404 for
// ErrNotFound, 400 for ErrInvalid, else 503 (a dependency failed; the
// operator may retry).
func writeProblem(w http.ResponseWriter, err error) {
	status, code := http.StatusServiceUnavailable, "unavailable"
	switch {
	case errors.Is(err, ErrNotFound):
		status, code = http.StatusNotFound, "not_found"
	case errors.Is(err, ErrInvalid):
		status, code = http.StatusBadRequest, "invalid"
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"type": "urn:sluice:problem:" + code, "title": http.StatusText(status), "status": status, "code": code, "detail": err.Error(),
	})
}
