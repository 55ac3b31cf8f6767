package admin

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/auth"
	"github.com/sluicehq/sluice/shared/httpcheck"
)

// The API-key endpoints (docs/security.md, "API keys"): list with
// admin_read; create, revoke and rotate with admin_act, audited like every
// action. A new secret is in the answer only, never in the audit record.
func (s *Server) keyRoutes() {
	s.read("GET "+Prefix+"auth/keys", s.keysList)
	s.act("POST "+Prefix+"auth/keys", "auth.key.create", s.keyCreate)
	s.act("POST "+Prefix+"auth/keys/{key_id}/revoke", "auth.key.revoke", s.keyRevoke)
	s.act("POST "+Prefix+"auth/keys/{key_id}/rotate", "auth.key.rotate", s.keyRotate)
}

var errNoKeys = errors.New("admin: API keys are not available in this process")

func (s *Server) keysList(r *http.Request) (any, error) {
	q := r.URL.Query()
	all, err := queryBool(q, "all")
	if err != nil {
		return nil, err
	}
	if s.opts.Keys == nil {
		return nil, errNoKeys
	}
	return s.opts.Keys.List(r.Context(), auth.ListFilter{Principal: q.Get("principal"), All: all})
}

// KeyCreateRequest makes an API key.
type KeyCreateRequest struct {
	Principal   string       `json:"principal"`
	Grants      []auth.Grant `json:"grants"`
	Description string       `json:"description"`
	// ExpiresIn, a Go duration ("720h"), ends the key; "" never.
	ExpiresIn string `json:"expires_in"`
}

// KeyCreated is the answer of a create or a rotation: Secret is the full
// key, shown this once.
type KeyCreated struct {
	Key    auth.Key  `json:"key"`
	Secret string    `json:"secret"`
	Old    *auth.Key `json:"old,omitempty"`
}

// decodeKeyCreate reads a KeyCreateRequest, naming a member of a grant at
// fault by its place (grants[1].ops): the decoder names it without the
// index ("grants.ops"), or, for an unknown one, by its bare name ("x").
func decodeKeyCreate(body []byte) (KeyCreateRequest, error) {
	var raw struct { // KeyCreateRequest, its grants undecoded
		Principal   string            `json:"principal"`
		Grants      []json.RawMessage `json:"grants"`
		Description string            `json:"description"`
		ExpiresIn   string            `json:"expires_in"`
	}
	if err := decode(body, &raw); err != nil {
		return KeyCreateRequest{}, err
	}
	req := KeyCreateRequest{Principal: raw.Principal, Description: raw.Description, ExpiresIn: raw.ExpiresIn}
	for i, g := range raw.Grants {
		at := "grants[" + strconv.Itoa(i) + "]"
		var grant auth.Grant
		if err := decode(g, &grant); err != nil {
			if f := httpcheck.FieldOf(err); f != "" && f != "body" {
				at += "." + f
			}
			return KeyCreateRequest{}, atField(at, err)
		}
		req.Grants = append(req.Grants, grant)
	}
	return req, nil
}

func (s *Server) keyCreate(r *http.Request, body []byte) (Action, error) {
	req, err := decodeKeyCreate(body)
	if err != nil {
		return Action{}, err
	}
	a := Action{Target: "principal " + req.Principal}
	if s.opts.Keys == nil {
		return a, errNoKeys
	}
	cr := auth.CreateRequest{Principal: req.Principal, Grants: req.Grants, Description: req.Description, By: whoOf(r)}
	if req.ExpiresIn != "" {
		d, err := time.ParseDuration(req.ExpiresIn)
		if err != nil || d <= 0 {
			return a, atField("expires_in", invalid("expires_in %q: want a positive duration such as 720h", req.ExpiresIn))
		}
		t := time.Now().Add(d)
		cr.ExpiresAt = &t
	}
	if len(req.Grants) == 0 {
		return a, atField("grants", invalid("a key needs at least one grant"))
	}
	for i, g := range req.Grants {
		// One at a time, so that the refusal names the grant at fault
		// (CompileGrants compiles each on its own: nothing is left to
		// check of the list as a whole).
		if _, err := auth.CompileGrants([]auth.Grant{g}); err != nil {
			return a, atField("grants["+strconv.Itoa(i)+"]", invalid("%v", err))
		}
		if err := auth.CheckAdminScope(g); err != nil {
			return a, atField("grants["+strconv.Itoa(i)+"]", invalid("%v", err))
		}
	}
	if err := auth.ValidatePrincipal(req.Principal); err != nil {
		return a, atField("principal", invalid("%v", err))
	}
	if err := auth.ValidateDescription(req.Description); err != nil {
		return a, atField("description", invalid("%v", err))
	}
	key, secret, err := s.opts.Keys.Create(r.Context(), cr)
	if err != nil {
		return a, err
	}
	a.Target = "key " + key.ID + " of " + key.Principal
	a.Status = http.StatusCreated
	a.Result = KeyCreated{Key: key, Secret: secret}
	a.Audit = KeyCreated{Key: key, Secret: "[shown once, not recorded]"}
	return a, nil
}

func (s *Server) keyRevoke(r *http.Request, body []byte) (Action, error) {
	if err := decode(body, &struct{}{}); err != nil {
		return Action{}, err
	}
	id := r.PathValue("key_id")
	a := Action{Target: "key " + id}
	if s.opts.Keys == nil {
		return a, errNoKeys
	}
	key, err := s.opts.Keys.Revoke(r.Context(), id, whoOf(r))
	if errors.Is(err, auth.ErrKeyNotFound) {
		return a, atField("key_id", kind(errNotFound, err))
	}
	if err != nil {
		return a, err
	}
	a.Target += " of " + key.Principal
	a.Result = key
	return a, nil
}

// KeyRotateRequest rotates a key: Grace (a Go duration, default 24h) is
// how long the old secret keeps working; "0s" revokes it at once.
type KeyRotateRequest struct {
	Grace string `json:"grace"`
}

func (s *Server) keyRotate(r *http.Request, body []byte) (Action, error) {
	var req KeyRotateRequest
	if err := decode(body, &req); err != nil {
		return Action{}, err
	}
	id := r.PathValue("key_id")
	a := Action{Target: "key " + id}
	if s.opts.Keys == nil {
		return a, errNoKeys
	}
	grace := auth.DefaultRotationGrace
	if req.Grace != "" {
		d, err := time.ParseDuration(req.Grace)
		if err != nil || d < 0 {
			return a, atField("grace", invalid("grace %q: want a duration >= 0 such as 24h", req.Grace))
		}
		grace = d
	}
	rot, secret, err := s.opts.Keys.Rotate(r.Context(), id, grace, whoOf(r))
	switch {
	case errors.Is(err, auth.ErrKeyNotFound):
		return a, atField("key_id", kind(errNotFound, err))
	case errors.Is(err, auth.ErrKeyRevoked):
		return a, kind(errConflict, err)
	case err != nil:
		return a, err
	}
	a.Target = "key " + id + " -> " + rot.New.ID + " of " + rot.New.Principal
	a.Status = http.StatusCreated
	a.Result = KeyCreated{Key: rot.New, Secret: secret, Old: &rot.Old}
	a.Audit = KeyCreated{Key: rot.New, Secret: "[shown once, not recorded]", Old: &rot.Old}
	return a, nil
}
