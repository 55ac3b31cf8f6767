// Package admin is the admin REST API under /admin/v1/ (docs/console.md):
// an overview of the whole pipeline and the operator actions of the CLI —
// relay checkpoint, parked records, consumer-group reset, dead letters,
// projection rebuild and rollback, verify — calling the same package code
// as `sluice` does (dlq, consumer, relay, projectionworker,
// instanceworker).
//
// Guarantees: it is never open. Every request needs a bearer token: the
// operator token (SLUICE_ADMIN_TOKEN) may read and act, the read token
// (SLUICE_ADMIN_READ_TOKEN) may read only; without a token configured every
// request is answered 401, a read token on an action 403. Every action,
// dry run or not, is recorded before the answer is sent: a row in
// sluice.admin_audit (owned by this package) and a log line; an action
// whose audit row cannot be written is not reported as done.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/elastic/go-elasticsearch/v8"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/auth"
	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/pipeline/sluiceconfig"
	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/schema"
	"github.com/sluicehq/sluice/shared/httpcheck"
	"github.com/sluicehq/sluice/shared/observability"
	"github.com/sluicehq/sluice/shared/suggest"
)

// Prefix is the path prefix of the admin API.
const Prefix = "/admin/v1/"

// Roles of a token.
const (
	RoleOperator = "operator"
	RoleRead     = "read"
)

// Config is what the admin API reads and decides by (docs/architecture.md,
// "One construction convention").
type Config struct {
	// Process is the process configuration (required).
	Process *sluiceconfig.Config
	// OperatorToken and ReadToken are the accepted bearer tokens ("" none).
	// Ignored when Deps.Auth is set.
	OperatorToken, ReadToken string
	// Projections are the projections whose versions and groups the
	// overview shows (default: every built-in projection).
	Projections []projectionworker.Projection
	// DLQTopics are the dead-letter topics the overview counts (default:
	// the configured commands and events DLQ topics).
	DLQTopics []string
	// Services are the services running in other processes
	// (SLUICE_ADMIN_SERVICES), whose /readyz and /metrics are read too.
	Services []Service
	// Workers are the worker groups this deployment runs (default: the
	// instance worker's): listed even before they exist in Kafka. A group
	// of another handler is listed only when it exists there.
	Workers []Worker
}

// Deps are the admin API's resources.
type Deps struct {
	// Pool is the main role's database (DATABASE_URL: the audit, event
	// schemas); required. StorePool holds the relay's lease and parked
	// records (EVENT_STORE_DATABASE_URL) and RegistryPool the registry
	// (REGISTRY_DATABASE_URL) that a projection rebuild uses; nil: Pool
	// (one database, docs/scale-out.md).
	Pool         *pgxpool.Pool
	StorePool    *pgxpool.Pool
	RegistryPool *pgxpool.Pool
	Store        *eventstore.Store
	Bucket       objstore.Bucket
	Registry     *registry.Registry // required
	// Schemas is the schema registry (docs/schemas.md); nil: one on Pool
	// with Process.Schema.
	Schemas *schema.Registry
	ES      *elasticsearch.Client
	Logger  *slog.Logger
	// Auth authenticates requests (nil: one made of the two tokens): a
	// principal granted admin_act has the operator role, one granted only
	// admin_read the read role (docs/security.md). Keys, when set, serves
	// the API-key endpoints (/admin/v1/auth/keys).
	Auth *auth.Authenticator
	Keys *auth.Keys
	// Health and Metrics are this api process's readiness checks and
	// Prometheus registry (in sluice dev every service runs in this
	// process, so they cover them all): the health strip and the flow
	// charts read them.
	Health  *observability.Health
	Metrics prometheus.Gatherer
}

// Option is a test hook of the admin API; there are none yet.
type Option func(*settings)

// settings are New's Config and Deps, with their defaults applied.
type settings struct {
	Config
	Deps
}

// Server is the admin API.
type Server struct {
	opts settings
	log  *slog.Logger
	mux  *http.ServeMux
	jobs *jobs
	// schemas is Options.Schemas.
	schemas *schema.Registry
}

// New returns the admin API. It holds no connections of its own beyond
// what Deps gives; Kafka clients are opened per request.
func New(cfg Config, deps Deps, opts ...Option) (*Server, error) {
	o := settings{Config: cfg, Deps: deps}
	for _, opt := range opts {
		opt(&o)
	}
	if o.Process == nil || o.Pool == nil || o.Registry == nil {
		return nil, errors.New("admin: New needs Config.Process, Deps.Pool and Deps.Registry")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.StorePool == nil {
		o.StorePool = o.Pool
	}
	if o.RegistryPool == nil {
		o.RegistryPool = o.Pool
	}
	if len(o.Projections) == 0 {
		o.Projections = projectionworker.Builtins()
	}
	if len(o.DLQTopics) == 0 {
		o.DLQTopics = []string{o.Process.Kafka.CommandsDLQTopic, o.Process.Kafka.EventsDLQTopic}
	}
	if len(o.Workers) == 0 {
		o.Workers = []Worker{{Handler: instanceworker.HandlerName, Group: o.Process.Kafka.Group(instanceworker.GroupName)}}
	}
	if o.Schemas == nil {
		o.Schemas = schema.New(o.Pool, o.Process.Schema, o.Logger)
	}
	s := &Server{opts: o, log: o.Logger, mux: http.NewServeMux(), jobs: newJobs(), schemas: o.Schemas}
	if s.opts.Auth == nil {
		s.opts.Auth = auth.NewAuthenticator(auth.Options{AdminToken: o.OperatorToken, AdminReadToken: o.ReadToken, Required: true})
	}
	s.routes()
	return s, nil
}

// ServeHTTP authenticates and dispatches.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := r.Header.Get("Authorization")
	var p *auth.Principal
	var err error
	if h != "" {
		p, err = s.opts.Auth.Authenticate(r.Context(), h)
	}
	if errors.Is(err, auth.ErrUnavailable) {
		writeProblem(w, http.StatusServiceUnavailable, "unavailable", err.Error())
		return
	}
	if h == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sluice-admin"`)
		writeProblem(w, http.StatusUnauthorized, "unauthorized",
			"the admin API needs a bearer token (SLUICE_ADMIN_TOKEN, SLUICE_ADMIN_READ_TOKEN or an API key granted admin_read on *); with none configured it is closed")
		return
	}
	if err != nil {
		// A token was presented and refused (unknown, revoked, expired,
		// malformed): say so, as RFC 6750 section 3.1 and the /v1 API do.
		w.Header().Set("WWW-Authenticate", `Bearer realm="sluice-admin", error="invalid_token"`)
		writeProblem(w, http.StatusUnauthorized, "unauthorized", err.Error())
		return
	}
	// The admin resources are covered by the pattern * only
	// (docs/security.md, "Resource patterns"): admin_act on db:orders is
	// not the operator role, which could make itself a key on *.
	role := ""
	switch {
	case p.Allows(auth.OpAdminAct, adminResource):
		role = RoleOperator
	case p.Allows(auth.OpAdminRead, adminResource):
		role = RoleRead
	default:
		writeForbidden(w, "admin_read on *", "principal "+p.Name+" lacks the permission admin_read on *")
		return
	}
	if err := checkQuery(r.URL.RawQuery); err != nil {
		writeError(w, err)
		return
	}
	ctx := context.WithValue(r.Context(), roleKey{}, role)
	s.mux.ServeHTTP(w, r.WithContext(auth.WithPrincipal(ctx, p)))
}

type roleKey struct{}

// adminResource is what every admin request acts on: the zero Resource,
// which only a grant on * covers.
var adminResource = auth.Resource{}

func roleOf(r *http.Request) string {
	v, _ := r.Context().Value(roleKey{}).(string)
	return v
}

// whoOf names the request's principal in the audit log: "admin:operator"
// or "admin:read" for the admin tokens, the key's principal for a key.
func whoOf(r *http.Request) string {
	if p := auth.FromContext(r.Context()); p != nil && p.Name != "" {
		return p.Name
	}
	return who(roleOf(r))
}

// read registers a read endpoint (both roles).
func (s *Server) read(pattern string, h func(*http.Request) (any, error)) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		if err := checkRequestText(r); err != nil {
			writeError(w, err)
			return
		}
		v, err := h(r)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, v)
	})
}

// Action is what an action handler returns: its target and result.
type Action struct {
	Target string
	DryRun bool
	Result any
	// Status is the HTTP status of a success (default 200).
	Status int
	// Audit, when set, is recorded instead of Result (a new key's secret
	// is answered once and never recorded).
	Audit any
}

// act registers an action endpoint: the operator role only, its request
// decoded into the handler's body, audited.
func (s *Server) act(pattern, name string, h func(r *http.Request, body []byte) (Action, error)) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		role := roleOf(r)
		body, err := io.ReadAll(io.LimitReader(r.Body, maxActionBody+1))
		if err != nil {
			writeProblemAt(w, http.StatusBadRequest, "invalid", "body", "read body: "+err.Error())
			return
		}
		// A body over the limit is refused whole (it was cut at the limit
		// and read as JSON, answered 400 "unexpected EOF") and not kept in
		// the audit record.
		tooLarge := len(body) > maxActionBody
		if tooLarge {
			body = nil
		}
		if role != RoleOperator {
			_ = s.audit(r.Context(), auditEntry{Who: whoOf(r), Role: role, Action: name, Target: r.URL.Path, DryRun: dryRunOf(body), Outcome: "forbidden", Status: http.StatusForbidden, Request: body})
			writeForbidden(w, "admin_act on *", "the read-only role may not act (it lacks admin_act on *); use the operator token (SLUICE_ADMIN_TOKEN) or a key granted admin_act on *")
			return
		}
		// A body not declared JSON is refused (and audited) before the
		// action reads it.
		var a Action
		switch {
		case tooLarge:
			err = atField("body", kind(errTooLarge, fmt.Errorf("the request body exceeds the limit of %d bytes", maxActionBody)))
		default:
			err = checkMediaType(r, body)
		}
		if err == nil {
			err = checkRequestText(r)
		}
		if err == nil {
			a, err = h(r, body)
		} else {
			a.Target = r.URL.Path
		}
		status := a.Status
		if status == 0 {
			status = http.StatusOK
		}
		e := auditEntry{Who: whoOf(r), Role: role, Action: name, Target: a.Target, DryRun: a.DryRun || dryRunOf(body), Outcome: "ok", Status: status, Request: body, Result: a.Result}
		if a.Audit != nil {
			e.Result = a.Audit
		}
		if err != nil {
			e.Status, e.Code = problemOf(err)
			e.Outcome, e.Result = e.Code, map[string]string{"error": err.Error()}
		}
		if aerr := s.audit(r.Context(), e); aerr != nil {
			// Say what happened to the action itself: it was "the action
			// ran (invalid)" even for a refused one.
			what := "the action ran"
			switch {
			case err != nil:
				what = fmt.Sprintf("the action failed (%s: %v)", e.Code, err)
			case e.DryRun:
				what = "the dry run ran and changed nothing"
			}
			writeProblem(w, http.StatusServiceUnavailable, "audit_failed",
				fmt.Sprintf("%s, but its audit record could not be written: %v", what, aerr))
			return
		}
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, status, a.Result)
	})
}

// dryRunOf reads "dry_run" from a JSON body.
func dryRunOf(body []byte) bool {
	var v struct {
		DryRun bool `json:"dry_run"`
	}
	_ = json.Unmarshal(body, &v)
	return v.DryRun
}

// decode reads a JSON request body into v, refusing unknown fields and
// anything after the one JSON value.
func decode(body []byte, v any) error {
	if len(strings.TrimSpace(string(body))) == 0 {
		return nil
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		// Name the member at fault when the decoder says which.
		field := "body"
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			field = te.Field
		} else if name, ok := strings.CutPrefix(err.Error(), `json: unknown field "`); ok {
			field = strings.TrimSuffix(name, `"`)
		}
		return atField(field, invalid("body: %v", err))
	}
	// One JSON value: what follows it was ignored ({"db":"a"}{"db":"b"}
	// ran the action on a), where the command API refuses it.
	if _, err := dec.Token(); err != io.EOF {
		return atField("body", invalid("body: trailing data after the JSON object"))
	}
	return nil
}

// Error kinds of the handlers, mapped to problem+json.
var (
	errInvalid  = errors.New("invalid")
	errNotFound = errors.New("not_found")
	errConflict = errors.New("conflict")
	errUnsafe   = errors.New("unsafe")
	// errUnsupportedMedia is a body not declared application/json.
	errUnsupportedMedia = errors.New("unsupported_media_type")
	// errTooLarge is a body over maxActionBody.
	errTooLarge = errors.New("body_too_large")
)

// maxActionBody is the largest request body of an action (1 MiB, the
// command API's default SLUICE_API_MAX_BODY_BYTES).
const maxActionBody = 1 << 20

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errInvalid, fmt.Sprintf(format, a...))
}

func kind(k error, err error) error { return fmt.Errorf("%w: %w", k, err) }

// atField names field as the part of the request err refuses (nil stays nil).
func atField(field string, err error) error {
	if err == nil {
		return nil
	}
	return &httpcheck.FieldError{Field: field, Err: err}
}

func problemOf(err error) (int, string) {
	switch {
	case errors.Is(err, errInvalid):
		return http.StatusBadRequest, "invalid"
	case errors.Is(err, errNotFound), suggest.IsNotFound(err):
		return http.StatusNotFound, "not_found"
	case errors.Is(err, errConflict):
		return http.StatusConflict, "conflict"
	case errors.Is(err, errUnsafe):
		return http.StatusUnprocessableEntity, "unsafe"
	case errors.Is(err, errUnsupportedMedia):
		return http.StatusUnsupportedMediaType, "unsupported_media_type"
	case errors.Is(err, errTooLarge):
		return http.StatusRequestEntityTooLarge, "body_too_large"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return http.StatusServiceUnavailable, "unavailable"
	}
	return http.StatusServiceUnavailable, "unavailable"
}

func writeError(w http.ResponseWriter, err error) {
	status, code := problemOf(err)
	detail := err.Error()
	for _, k := range []error{errInvalid, errNotFound, errConflict, errUnsafe, errUnsupportedMedia, errTooLarge} {
		detail = strings.TrimPrefix(detail, k.Error()+": ")
	}
	writeProblemAt(w, status, code, httpcheck.FieldOf(err), detail)
}

// writeProblem answers an RFC 9457 problem, in the shape of the command
// API's (type urn:sluice:problem:{code}, title, status, code, detail).
func writeProblem(w http.ResponseWriter, status int, code, detail string) {
	writeProblemAt(w, status, code, "", detail)
}

// writeProblemAt is writeProblem with the member field naming the part of
// the request at fault (left out when "").
func writeProblemAt(w http.ResponseWriter, status int, code, field, detail string) {
	var members map[string]any
	if field != "" {
		members = map[string]any{"field": field}
	}
	writeProblemWith(w, status, code, detail, members)
}

// writeForbidden is the 403 naming the missing permission in the member
// permission, as the command API's 403 does ("admin_act on *").
func writeForbidden(w http.ResponseWriter, permission, detail string) {
	writeProblemWith(w, http.StatusForbidden, "forbidden", detail, map[string]any{"permission": permission})
}

// writeProblemWith writes the problem with the extra members given.
func writeProblemWith(w http.ResponseWriter, status int, code, detail string, members map[string]any) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1") // as the command API's 503s
	}
	w.WriteHeader(status)
	p := map[string]any{
		"type": "urn:sluice:problem:" + code, "title": http.StatusText(status), "status": status, "code": code, "detail": detail,
	}
	for k, v := range members {
		p[k] = v
	}
	_ = json.NewEncoder(w).Encode(p)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// jobs tracks the long actions (projection rebuild and rollback) this
// process started, for the overview.
type jobs struct {
	mu   sync.Mutex
	byID map[string]*Job
	seq  int
}

// Job is a long action running in this process.
type Job struct {
	ID         string                     `json:"id"`
	Kind       string                     `json:"kind"`
	Projection string                     `json:"projection"`
	Version    int                        `json:"version,omitempty"`
	StartedAt  time.Time                  `json:"started_at"`
	EndedAt    time.Time                  `json:"ended_at,omitzero"`
	Progress   *projectionworker.Progress `json:"progress,omitempty"`
	Summary    *projectionworker.Summary  `json:"summary,omitempty"`
	Error      string                     `json:"error,omitempty"`
}

func newJobs() *jobs { return &jobs{byID: map[string]*Job{}} }

// start records a new job of projection, unless one is running (nil):
// the check and the start are one step, so two requests at once (a
// double click) cannot both start a job.
func (j *jobs) start(kind, projection string, version int) *Job {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.runningLocked(projection) {
		return nil
	}
	j.seq++
	job := &Job{ID: fmt.Sprintf("%s-%s-%d", kind, projection, j.seq), Kind: kind, Projection: projection, Version: version, StartedAt: time.Now().UTC()}
	j.byID[job.ID] = job
	return job
}

func (j *jobs) update(f func()) {
	j.mu.Lock()
	defer j.mu.Unlock()
	f()
}

func (j *jobs) list() []Job {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make([]Job, 0, len(j.byID))
	for _, job := range j.byID {
		c := *job
		if job.Progress != nil {
			p := *job.Progress
			c.Progress = &p
		}
		out = append(out, c)
	}
	return out
}

func (j *jobs) runningLocked(projection string) bool {
	for _, job := range j.byID {
		if job.Projection == projection && job.EndedAt.IsZero() {
			return true
		}
	}
	return false
}
