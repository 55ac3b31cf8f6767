package admin

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice/schema"
)

// ---- event schemas (docs/schemas.md) ---------------------------------------

func (s *Server) schemaRoutes() {
	s.read("GET "+Prefix+"schemas", func(r *http.Request) (any, error) { return s.schemas.Types(r.Context()) })
	s.read("GET "+Prefix+"schemas/{type}", func(r *http.Request) (any, error) {
		v, err := s.schemas.Get(r.Context(), r.PathValue("type"), 0)
		return v, schemaError(err)
	})
	s.read("GET "+Prefix+"schemas/{type}/versions/{version}", func(r *http.Request) (any, error) {
		n, err := strconv.Atoi(r.PathValue("version"))
		if err != nil || n < 1 {
			return nil, invalid("version %q: a number >= 1", r.PathValue("version"))
		}
		v, err := s.schemas.Get(r.Context(), r.PathValue("type"), n)
		return v, schemaError(err)
	})
	s.act("POST "+Prefix+"schemas/{type}", "schema.register", s.schemaRegister)
	s.act("POST "+Prefix+"schemas/{type}/check", "schema.check", s.schemaCheck)
	s.act("PUT "+Prefix+"schemas/{type}/compatibility", "schema.compatibility", s.schemaCompatibility)
	s.act("DELETE "+Prefix+"schemas/{type}", "schema.delete", s.schemaDelete)
}

// SchemaRequest registers or checks a schema: the JSON Schema document,
// the type's mode to set first (optional) and a dry run.
type SchemaRequest struct {
	Schema        json.RawMessage `json:"schema"`
	Compatibility string          `json:"compatibility"`
	DryRun        bool            `json:"dry_run"`
}

func schemaError(err error) error {
	var ie *schema.IncompatibleError
	var se *schema.InvalidSchemaError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, schema.ErrNotFound):
		return kind(errNotFound, err)
	case errors.As(err, &ie):
		return kind(errConflict, err)
	case errors.As(err, &se):
		return kind(errInvalid, err)
	}
	return err
}

func (s *Server) schemaRegister(r *http.Request, body []byte) (Action, error) {
	typ := r.PathValue("type")
	a := Action{Target: "schema " + typ}
	var req SchemaRequest
	if err := decode(body, &req); err != nil {
		return a, err
	}
	if len(req.Schema) == 0 {
		return a, invalid("body: schema (the JSON Schema document) is required")
	}
	var mode schema.Compatibility
	if req.Compatibility != "" {
		m, err := schema.ParseCompatibility(req.Compatibility)
		if err != nil {
			return a, invalid("%v", err)
		}
		mode = m
	}
	res, err := s.schemas.Register(r.Context(), typ, req.Schema, schema.RegisterOptions{Compatibility: mode, DryRun: req.DryRun})
	a.DryRun, a.Result = req.DryRun, res
	if err == nil && !res.Existing && !req.DryRun {
		a.Status = http.StatusCreated
	}
	return a, schemaError(err)
}

func (s *Server) schemaCheck(r *http.Request, body []byte) (Action, error) {
	typ := r.PathValue("type")
	a := Action{Target: "schema " + typ, DryRun: true}
	var req SchemaRequest
	if err := decode(body, &req); err != nil {
		return a, err
	}
	res, err := s.schemas.Check(r.Context(), typ, req.Schema)
	a.Result = res
	return a, schemaError(err)
}

func (s *Server) schemaCompatibility(r *http.Request, body []byte) (Action, error) {
	typ := r.PathValue("type")
	a := Action{Target: "schema " + typ}
	var req struct {
		Compatibility string `json:"compatibility"`
	}
	if err := decode(body, &req); err != nil {
		return a, err
	}
	mode, err := schema.ParseCompatibility(req.Compatibility)
	if err != nil || req.Compatibility == "" {
		return a, invalid("compatibility must be one of %v", schema.Compatibilities)
	}
	a.Result = map[string]any{"event_type": typ, "compatibility": mode}
	return a, schemaError(s.schemas.SetCompatibility(r.Context(), typ, mode))
}

func (s *Server) schemaDelete(r *http.Request, body []byte) (Action, error) {
	typ := r.PathValue("type")
	a := Action{Target: "schema " + typ}
	var req struct {
		Version int  `json:"version"`
		DryRun  bool `json:"dry_run"`
	}
	if err := decode(body, &req); err != nil {
		return a, err
	}
	deleted, err := s.schemas.Delete(r.Context(), typ, req.Version, req.DryRun)
	a.DryRun, a.Result = req.DryRun, map[string]any{"event_type": typ, "deleted_versions": deleted, "dry_run": req.DryRun}
	return a, schemaError(err)
}
