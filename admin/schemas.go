package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice/schema"
	"github.com/sluicehq/sluice/shared/envelope"
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
			return nil, atField("version", invalid("version %q: a number >= 1", r.PathValue("version")))
		}
		v, err := s.schemas.Get(r.Context(), r.PathValue("type"), n)
		return v, schemaError(err)
	})
	s.act("POST "+Prefix+"schemas/{type}", "schema.register", s.schemaRegister)
	s.act("POST "+Prefix+"schemas/{type}/check", "schema.check", s.schemaCheck)
	s.act("PUT "+Prefix+"schemas/{type}/compatibility", "schema.compatibility", s.schemaCompatibility)
	s.act("DELETE "+Prefix+"schemas/{type}", "schema.delete", s.schemaDelete)
	const upcaster = "schemas/{type}/upcasters/{from}"
	s.read("GET "+Prefix+upcaster, func(r *http.Request) (any, error) {
		from, err := fromVersion(r)
		if err != nil {
			return nil, err
		}
		u, err := s.schemas.GetUpcaster(r.Context(), r.PathValue("type"), from)
		return u, schemaError(err)
	})
	s.act("PUT "+Prefix+upcaster, "schema.upcaster", s.upcasterSet)
	s.act("DELETE "+Prefix+upcaster, "schema.upcaster_delete", s.upcasterDelete)
}

// SchemaRequest registers or checks a schema: the JSON Schema document,
// the type's mode to set first (optional), an upcaster from the previous
// version (the YAML file's text, optional; docs/schemas.md#upcasting-on-read)
// with the name it is known by, and a dry run.
type SchemaRequest struct {
	Schema         json.RawMessage `json:"schema"`
	Compatibility  string          `json:"compatibility"`
	Upcaster       string          `json:"upcaster"`
	UpcasterSource string          `json:"upcaster_source"`
	DryRun         bool            `json:"dry_run"`
}

// UpcasterRequest sets an upcaster: the YAML file's text, the name it is
// known by in messages, and a dry run.
type UpcasterRequest struct {
	Upcaster string `json:"upcaster"`
	Source   string `json:"source"`
	DryRun   bool   `json:"dry_run"`
}

func fromVersion(r *http.Request) (int, error) {
	n, err := strconv.Atoi(r.PathValue("from"))
	if err != nil || n < 1 {
		return 0, atField("from", invalid("from %q: a version number >= 1", r.PathValue("from")))
	}
	return n, nil
}

// upcasterAction is the start of the upcaster actions (set, delete): the
// event type and version of the path, and the Action whose Target the
// audit record names them by ("schema T upcaster vN"; without the version
// when the path's is not one, so that the refusal is recorded too). A
// write (set) first refuses an event type outside the rule
// (checkEventType); a delete takes any, as the schema delete does.
func upcasterAction(r *http.Request, write bool) (a Action, typ string, from int, err error) {
	typ = r.PathValue("type")
	a = Action{Target: "schema " + typ + " upcaster"}
	if write {
		if err = checkEventType(typ); err != nil {
			return a, typ, 0, err
		}
	}
	if from, err = fromVersion(r); err != nil {
		return a, typ, 0, err
	}
	a.Target = fmt.Sprintf("schema %s upcaster v%d", typ, from)
	return a, typ, from, nil
}

func (s *Server) upcasterSet(r *http.Request, body []byte) (Action, error) {
	a, typ, from, err := upcasterAction(r, true)
	if err != nil {
		return a, err
	}
	var req UpcasterRequest
	if err := decode(body, &req); err != nil {
		return a, err
	}
	if req.Upcaster == "" {
		return a, atField("upcaster", invalid("body: upcaster (the upcaster file's YAML text) is required"))
	}
	u, err := schema.ParseUpcaster(req.Source, []byte(req.Upcaster))
	if err != nil {
		return a, schemaError(err)
	}
	if u.EventType != typ || u.From != from {
		return a, atField("upcaster", invalid("the upcaster is of %s from v%d, not of %s from v%d as the path says", u.EventType, u.From, typ, from))
	}
	res, err := s.schemas.SetUpcaster(r.Context(), []byte(req.Upcaster), schema.UpcasterOptions{Source: req.Source, DryRun: req.DryRun})
	a.DryRun, a.Result = req.DryRun, res
	if err == nil && !res.Existing && !res.Replaced && !req.DryRun {
		a.Status = http.StatusCreated
	}
	return a, schemaError(err)
}

func (s *Server) upcasterDelete(r *http.Request, body []byte) (Action, error) {
	a, typ, from, err := upcasterAction(r, false)
	if err != nil {
		return a, err
	}
	var req struct {
		DryRun bool `json:"dry_run"`
	}
	if err := decode(body, &req); err != nil {
		return a, err
	}
	err = s.schemas.DeleteUpcaster(r.Context(), typ, from, req.DryRun)
	a.DryRun, a.Result = req.DryRun, map[string]any{"event_type": typ, "from": from, "to": from + 1, "deleted": err == nil, "dry_run": req.DryRun}
	return a, schemaError(err)
}

func schemaError(err error) error {
	var ie *schema.IncompatibleError
	var se *schema.InvalidSchemaError
	var ce *schema.UpcasterCheckError
	var ue *schema.UpcasterError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, schema.ErrNotFound):
		return atField(schemaNotFoundField(err), kind(errNotFound, err))
	case errors.As(err, &ie):
		return atField("schema", kind(errConflict, err))
	case errors.As(err, &ce):
		return atField("upcaster", kind(errConflict, err))
	case errors.As(err, &se):
		return atField("schema", kind(errInvalid, err))
	case errors.As(err, &ue):
		return atField("upcaster", kind(errInvalid, err))
	}
	return err
}

// schemaNotFoundField names the part of the request a schema.ErrNotFound
// refuses, from what the registry says is missing: the body's upcaster
// when a version it reads or produces is missing, the path's version or
// upcaster from, else the event type (no schema registered).
func schemaNotFoundField(err error) string {
	var nf *schema.NotFoundError
	if !errors.As(err, &nf) {
		return "event_type"
	}
	switch nf.Missing {
	case schema.MissingUpcasterVersion:
		return "upcaster"
	case schema.MissingUpcaster:
		return "from"
	case schema.MissingVersion:
		return "version"
	}
	return "event_type"
}

// checkEventType refuses a path's event type outside the rule of
// docs/architecture.md#event-types, naming the field event_type.
func checkEventType(typ string) error {
	if err := envelope.ValidateEventType(typ); err != nil {
		return atField("event_type", invalid("event type %q: %v", typ, err))
	}
	return nil
}

func (s *Server) schemaRegister(r *http.Request, body []byte) (Action, error) {
	typ := r.PathValue("type")
	a := Action{Target: "schema " + typ}
	if err := checkEventType(typ); err != nil {
		return a, err
	}
	var req SchemaRequest
	if err := decode(body, &req); err != nil {
		return a, err
	}
	if len(req.Schema) == 0 {
		return a, atField("schema", invalid("body: schema (the JSON Schema document) is required"))
	}
	var mode schema.Compatibility
	if req.Compatibility != "" {
		m, err := schema.ParseCompatibility(req.Compatibility)
		if err != nil {
			return a, atField("compatibility", invalid("%v", err))
		}
		mode = m
	}
	o := schema.RegisterOptions{Compatibility: mode, DryRun: req.DryRun}
	if req.Upcaster != "" {
		o.Upcaster, o.UpcasterSource = []byte(req.Upcaster), req.UpcasterSource
	}
	res, err := s.schemas.Register(r.Context(), typ, req.Schema, o)
	a.DryRun, a.Result = req.DryRun, res
	if err == nil && !res.Existing && !req.DryRun {
		a.Status = http.StatusCreated
	}
	return a, schemaError(err)
}

func (s *Server) schemaCheck(r *http.Request, body []byte) (Action, error) {
	typ := r.PathValue("type")
	a := Action{Target: "schema " + typ, DryRun: true}
	if err := checkEventType(typ); err != nil {
		return a, err
	}
	var req SchemaRequest
	if err := decode(body, &req); err != nil {
		return a, err
	}
	var up []byte
	if req.Upcaster != "" {
		up = []byte(req.Upcaster)
	}
	res, err := s.schemas.CheckWithUpcaster(r.Context(), typ, req.Schema, up, req.UpcasterSource)
	a.Result = res
	return a, schemaError(err)
}

func (s *Server) schemaCompatibility(r *http.Request, body []byte) (Action, error) {
	typ := r.PathValue("type")
	a := Action{Target: "schema " + typ}
	if err := checkEventType(typ); err != nil {
		return a, err
	}
	var req struct {
		Compatibility string `json:"compatibility"`
	}
	if err := decode(body, &req); err != nil {
		return a, err
	}
	mode, err := schema.ParseCompatibility(req.Compatibility)
	if err != nil || req.Compatibility == "" {
		return a, atField("compatibility", invalid("compatibility must be one of %v", schema.Compatibilities))
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
