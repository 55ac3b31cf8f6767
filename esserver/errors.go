package esserver

import (
	"fmt"
	"net/http"
)

// esError is an Elasticsearch exception as rendered in error bodies.
type esError struct {
	Status   int
	Type     string
	Reason   string
	Meta     []kv // extra fields rendered after reason, in order
	CausedBy *esError
	// RootCause overrides the root cause list (defaults to the error itself,
	// or the deepest caused_by).
	RootCause []*esError
}

type kv struct {
	K string
	V any
}

func (e *esError) Error() string { return e.Type + ": " + e.Reason }

func newErr(status int, typ, format string, args ...any) *esError {
	return &esError{Status: status, Type: typ, Reason: fmt.Sprintf(format, args...)}
}

func (e *esError) with(k string, v any) *esError {
	e.Meta = append(e.Meta, kv{k, v})
	return e
}

// object renders the exception without root_cause (as used for bulk items
// and nested causes).
func (e *esError) object() *orderedMap {
	m := newOrderedMap()
	m.Set("type", e.Type)
	m.Set("reason", e.Reason)
	for _, p := range e.Meta {
		m.Set(p.K, p.V)
	}
	if e.CausedBy != nil {
		m.Set("caused_by", e.CausedBy.object())
	}
	return m
}

// body renders the full top-level error response body.
func (e *esError) body() *orderedMap {
	roots := e.RootCause
	if roots == nil {
		roots = []*esError{e}
	}
	rc := make([]any, 0, len(roots))
	for _, r := range roots {
		o := newOrderedMap()
		o.Set("type", r.Type)
		o.Set("reason", r.Reason)
		for _, p := range r.Meta {
			o.Set(p.K, p.V)
		}
		rc = append(rc, o)
	}
	inner := newOrderedMap()
	inner.Set("root_cause", rc)
	obj := e.object()
	for i, k := range obj.keys {
		inner.Set(k, obj.vs[i])
	}
	out := newOrderedMap()
	out.Set("error", inner)
	out.Set("status", e.Status)
	return out
}

func errIllegalArgument(format string, args ...any) *esError {
	return newErr(http.StatusBadRequest, "illegal_argument_exception", format, args...)
}

func errParsing(format string, args ...any) *esError {
	return newErr(http.StatusBadRequest, "parsing_exception", format, args...)
}

func errXContent(format string, args ...any) *esError {
	return newErr(http.StatusBadRequest, "x_content_parse_exception", format, args...)
}

func errValidation(msgs ...string) *esError {
	r := "Validation Failed: "
	for i, m := range msgs {
		r += fmt.Sprintf("%d: %s;", i+1, m)
	}
	return newErr(http.StatusBadRequest, "action_request_validation_exception", "%s", r)
}

// errValidationException is Elasticsearch's ValidationException (a 400
// validation_exception), which RestRequest throws for its own checks.
func errValidationException(msgs ...string) *esError {
	r := "Validation Failed: "
	for i, m := range msgs {
		r += fmt.Sprintf("%d: %s;", i+1, m)
	}
	return newErr(http.StatusBadRequest, "validation_exception", "%s", r)
}

func errIndexNotFound(name string) *esError {
	return newErr(http.StatusNotFound, "index_not_found_exception", "no such index [%s]", name).
		with("resource.type", "index_or_alias").with("resource.id", name).
		with("index_uuid", "_na_").with("index", name)
}

func errVersionConflict(ix *index, id, reason string) *esError {
	return newErr(http.StatusConflict, "version_conflict_engine_exception", "[%s]: version conflict, %s", id, reason).
		with("index_uuid", ix.uuid).with("shard", "0").with("index", ix.name)
}

func errInvalidIndexName(name, why string) *esError {
	return newErr(http.StatusBadRequest, "invalid_index_name_exception", "Invalid index name [%s], %s", name, why).
		with("index_uuid", "_na_").with("index", name)
}

func errAlreadyExists(name, uuid string) *esError {
	return newErr(http.StatusBadRequest, "resource_already_exists_exception", "index [%s/%s] already exists", name, uuid).
		with("index_uuid", uuid).with("index", name)
}

func errMapperParsing(format string, args ...any) *esError {
	return newErr(http.StatusBadRequest, "mapper_parsing_exception", format, args...)
}

// searchPhaseFailure wraps a shard-level failure the way Elasticsearch
// reports failed searches: search_phase_execution_exception whose root
// cause and caused_by is the shard failure.
func searchPhaseFailure(cause *esError) *esError {
	return &esError{
		Status:    cause.Status,
		Type:      "search_phase_execution_exception",
		Reason:    "all shards failed",
		Meta:      []kv{{"phase", "query"}, {"grouped", true}},
		CausedBy:  cause,
		RootCause: []*esError{cause},
	}
}

func errDocParsing(format string, args ...any) *esError {
	return newErr(http.StatusBadRequest, "document_parsing_exception", "[1:2] "+format, args...)
}
