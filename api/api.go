package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/auth"
	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/config"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/httpcheck"
	"github.com/sluicehq/sluice/shared/observability"
	"github.com/sluicehq/sluice/shared/tracing"
)

// Defaults of Config's Go-only knobs; MaxBodyBytes and MaxInFlight default
// to those of the tags of Settings.
const (
	DefaultMaxBatchItems  = 500
	DefaultHandler        = "instanceworker"
	DefaultMaxEventsPage  = 1000
	defaultEventsPageSize = 100
	// defaultRetryAfter is the Retry-After of a 429 or 503 whose cause
	// names no better delay: long enough not to hammer a struggling
	// dependency, short enough that a client's retry lands soon after it
	// is back.
	defaultRetryAfter = time.Second
)

// EventStore is what the API needs of the event store (*eventstore.Store).
type EventStore interface {
	Append(ctx context.Context, envs ...envelope.Envelope) ([]eventstore.Result, error)
	Stream(ctx context.Context, aggregateType, aggregateID string, fromSeq, toSeq int64, kind envelope.Kind) ([]eventstore.Event, error)
	ByEventID(ctx context.Context, eventID string) (eventstore.Event, error)
}

// AppendReadier is the readiness of an EventStore that has one
// (*eventstore.Store: AppendReady): nil while it takes appends on any of
// its servers. The API's "event store" readiness check is made of it; a
// store without it has no such check (the wiring pins that
// *eventstore.Store has it).
type AppendReadier interface {
	AppendReady(ctx context.Context) error
}

// CommandRegistry is what the API needs of the processed-event registry
// (*registry.Registry): the rows of a command and the instance worker's last
// finished slot of an aggregate.
type CommandRegistry interface {
	Get(ctx context.Context, eventID string) ([]claim.Row, error)
	LastSequence(ctx context.Context, handler, aggregateID string) (int64, error)
}

// SequenceReader returns an aggregate's last handed-out sequence number:
// the value an expected_seq is compared with (0 when the aggregate has no
// slot). *eventstore.Store implements it (LastSequence).
type SequenceReader interface {
	LastSequence(ctx context.Context, aggregateType, aggregateID string) (int64, error)
}

// Config configures the API handler: every tunable (docs/architecture.md,
// "One construction convention"). New applies the defaults noted to the
// fields left zero.
type Config struct {
	// Settings is the SLUICE_API_* section; the handler reads Tokens
	// (SLUICE_API_TOKENS: the accepted bearer tokens when Deps.Auth is
	// nil; when empty, /v1 is open), MaxBodyBytes (SLUICE_API_MAX_BODY_BYTES,
	// the bound of a request body) and MaxInFlight (SLUICE_API_MAX_IN_FLIGHT:
	// one /v1 request more is answered 429 too_many_requests with
	// Retry-After at once, instead of queueing behind the event store's
	// group commit until clients time out). Its zero fields take the
	// defaults of its tags.
	Settings

	// The knobs below have no variable of their own (Go only).

	// MaxBatchBodyBytes bounds a batch body. Default 8 × MaxBodyBytes.
	MaxBatchBodyBytes int64
	// MaxBatchItems bounds the items of one batch. Default 500 (the
	// default group-commit size).
	MaxBatchItems int
	// Limits are the event store's envelope limits (EVENT_STORE_MAX_*), so
	// that the API rejects what the store would, before appending.
	// Default: envelope.DefaultLimits(), field by field.
	Limits envelope.Limits
	// Handler is the instance worker's registry handler name, whose row of
	// a command is its status. Default "instanceworker".
	Handler string
	// MaxEventsPage bounds the limit of one events page. Default 1000.
	MaxEventsPage int
	// SSEPollInterval is how often a subscription polls when Deps.Commits
	// is nil (default 1 s); SSEHeartbeat is the keep-alive comment interval
	// (default 15 s).
	SSEPollInterval time.Duration
	SSEHeartbeat    time.Duration
}

// Deps are the resources of the API handler. Store, Registry and
// Sequences are required; the others are optional.
type Deps struct {
	Store     EventStore
	Registry  CommandRegistry
	Sequences SequenceReader
	// Logger receives one line per 5xx reply (and debug lines per request).
	// Default: slog.Default().
	Logger *slog.Logger
	// Auth authenticates /v1 requests (docs/security.md); nil: one made of
	// Config.Tokens. RateLimits are the per-principal limits (nil: none).
	Auth       *auth.Authenticator
	RateLimits *auth.Limiter
	// Metrics is the Prometheus registry the API registers its metrics on
	// and serves at /metrics; Health serves /livez and /readyz. Defaults:
	// new ones (observability.NewRegistry, NewHealth).
	Metrics *prometheus.Registry
	Health  *observability.Health
	// Events serves the event API (/v1/streams, /v1/log; events.go); nil
	// leaves it out. Commits wakes its subscriptions on commits (nil: they
	// poll every Config.SSEPollInterval).
	Events  EventLog
	Commits CommitNotifier
	// Schemas checks the data of each appended event against its event
	// type's registered schema (*schema.Registry; docs/schemas.md); nil
	// checks nothing.
	Schemas SchemaValidator
	// TracerProvider traces each /v1 request and its append
	// (docs/tracing.md); nil or a no-op provider: off.
	TracerProvider trace.TracerProvider
}

// Option is a test hook of the API handler (docs/architecture.md, "One
// construction convention"); there is none yet.
type Option func(*hooks)

type hooks struct{}

// built is what New was given, defaults applied: the handlers read both
// through server.opts (s.opts.MaxBodyBytes, s.opts.Store).
type built struct {
	Config
	Deps
}

// server is the API's state; everything is per instance.
type server struct {
	opts    built
	log     *slog.Logger
	auth    *auth.Authenticator
	limiter *auth.Limiter
	mux     *http.ServeMux
	// handler is the router inside the cross-cutting layers (layers).
	handler http.Handler
	metrics *metrics
	// inflight holds one token per /v1 request being served
	// (Config.MaxInFlight).
	inflight chan struct{}
	tracer   trace.Tracer // nil: tracing off
}

// New returns the API's HTTP handler: the /v1 routes, /openapi.json and the
// observability endpoints /metrics, /livez and /readyz.
func New(cfg Config, deps Deps, opts ...Option) (http.Handler, error) {
	if deps.Store == nil || deps.Registry == nil || deps.Sequences == nil {
		return nil, errors.New("api: Deps.Store, Deps.Registry and Deps.Sequences are required")
	}
	var h hooks
	for _, o := range opts {
		o(&h)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	if deps.Metrics == nil {
		deps.Metrics = observability.NewRegistry()
	}
	if deps.Health == nil {
		deps.Health = observability.NewHealth()
	}
	m, err := newMetrics(deps.Metrics)
	if err != nil {
		return nil, err
	}
	s := &server{opts: built{cfg, deps}, log: deps.Logger, metrics: m, inflight: make(chan struct{}, cfg.MaxInFlight),
		tracer: tracing.Tracer(deps.TracerProvider)}
	s.auth, s.limiter = deps.Auth, deps.RateLimits
	if s.auth == nil {
		tokens := make([]string, 0, len(cfg.Tokens))
		for _, t := range cfg.Tokens {
			if t.Value() != "" {
				tokens = append(tokens, t.Value())
			}
		}
		s.auth = auth.NewAuthenticator(auth.Options{Tokens: tokens})
	}
	// No readiness check of the registry: it serves only command-status
	// and read-your-writes reads, which answer 503 while it is out, and an
	// API that went unready with it would refuse appends its store could
	// take (docs/scale-out.md#health).
	if h, ok := deps.Store.(AppendReadier); ok {
		// Ready while any of the store's servers takes appends: with the
		// shards over several servers, one down refuses only its shards'
		// appends, and an API a load balancer took out would refuse the
		// others' too (docs/operations.md#a-postgres-server-holding-some-shards-is-down).
		deps.Health.AddReadiness("event store", h.AppendReady)
	}
	mux := observability.Handler(deps.Metrics, deps.Health)
	const inst = "/v1/dbs/{db}/classes/{class}/instances"
	mux.HandleFunc("POST "+inst, s.handleCreate)
	mux.HandleFunc("POST "+inst+":batch", s.handleBatch)
	mux.HandleFunc("PATCH "+inst+"/{id}", s.handleUpdate)
	mux.HandleFunc("DELETE "+inst+"/{id}", s.handleDelete)
	mux.HandleFunc("GET "+inst+"/{id}", s.handleGetInstance)
	mux.HandleFunc("GET "+inst+"/{id}/events", s.handleEvents)
	mux.HandleFunc("GET /v1/commands/{command_id}", s.handleCommandStatus)
	mux.HandleFunc("GET /openapi.json", serveOpenAPI)
	if deps.Events != nil {
		s.mountEvents(mux)
	}
	s.mux = mux
	s.handler = s.layers()
	return s, nil
}

// withDefaults returns c with every default applied: the defaults of the
// SLUICE_API_* tags for what the caller left zero, then those of the
// Go-only knobs; or why c cannot configure the API.
func (c Config) withDefaults() (Config, error) {
	config.FillZero(&c.Settings)
	if c.MaxBatchBodyBytes <= 0 {
		c.MaxBatchBodyBytes = 8 * c.MaxBodyBytes
	}
	if c.MaxBatchItems <= 0 {
		c.MaxBatchItems = DefaultMaxBatchItems
	}
	if c.Handler == "" {
		c.Handler = DefaultHandler
	}
	if c.MaxEventsPage <= 0 {
		c.MaxEventsPage = DefaultMaxEventsPage
	}
	if c.SSEPollInterval <= 0 {
		c.SSEPollInterval = DefaultSSEPollInterval
	}
	if c.SSEHeartbeat <= 0 {
		c.SSEHeartbeat = DefaultSSEHeartbeat
	}
	c.Limits = withDefaultLimits(c.Limits)
	if c.Limits.MaxDataDepth < 2 {
		return c, fmt.Errorf("api: the data depth limit %d leaves no room for instance data (want >= 2)", c.Limits.MaxDataDepth)
	}
	return c, nil
}

// withDefaultLimits applies the envelope's defaults, as the store does.
func withDefaultLimits(l envelope.Limits) envelope.Limits { return l.WithDefaults() }

// ServeHTTP serves a request through the API's layers (middleware.go).
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// checkQuery refuses a /v1 query string the handlers would misread
// (httpcheck.Query), as 400 invalid_parameter naming the parameter.
func checkQuery(raw string) *Error {
	if e := httpcheck.Query(raw); e != nil {
		return badParam(e.Field, "%s", e.Message)
	}
	return nil
}

// route is the innermost layer: the router, with its own 404/405 turned
// into JSON error bodies.
func (s *server) route(w http.ResponseWriter, r *http.Request) {
	if pattern := routeOf(r).pattern; pattern != "" {
		if e := checkPathText(pattern, r.URL.EscapedPath()); e != nil {
			writeError(w, e)
			return
		}
		if isV1(r) {
			if e := checkQuery(r.URL.RawQuery); e != nil {
				writeError(w, e)
				return
			}
		}
		s.mux.ServeHTTP(w, r)
		return
	}
	// No route: let the router decide (404, 405 with Allow, or a redirect
	// to the cleaned path) and reply with a JSON body for the errors.
	rec := &recorder{header: http.Header{}, Code: http.StatusOK}
	s.mux.ServeHTTP(rec, r)
	switch rec.Code {
	case http.StatusMethodNotAllowed:
		w.Header().Set("Allow", rec.header.Get("Allow"))
		writeError(w, newError(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "", "method %s is not allowed here; allowed: %s", r.Method, rec.header.Get("Allow")))
	case http.StatusNotFound:
		writeError(w, newError(http.StatusNotFound, CodeNotFound, "", "no such route: %s %s", r.Method, r.URL.EscapedPath()))
	default:
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.body.Bytes())
	}
}

// checkPathText refuses a request whose path wildcards ({db}, {class},
// {id}, {command_id}) do not percent-decode to valid UTF-8: 400
// invalid_text naming the wildcard (issue 26.2: invalid text is refused,
// never replaced). A percent-encoded surrogate (%ED%A0%80) is invalid UTF-8.
func checkPathText(pattern, escapedPath string) *Error {
	if _, p, ok := strings.Cut(pattern, " "); ok {
		pattern = p
	}
	var e *Error
	wildcards(pattern, escapedPath, func(name, seg string) bool {
		v, err := url.PathUnescape(seg)
		if err != nil {
			return true // the router decided on this path; it decodes
		}
		if name == "id" {
			name = "instance_id" // as the other errors about it say
		}
		if err := envelope.CheckText(v, name); err != nil {
			e = validationAs(err, name)
			return false
		}
		return true
	})
	return e
}

// wildcards calls fn with each wildcard's name of a route's path pattern
// ("/v1/dbs/{db}/…") and the escaped path's segment in its place, in
// order, while fn returns true; segments are taken by position, as the
// router matched them, without splitting either string into a slice.
func wildcards(pattern, escapedPath string, fn func(name, seg string) bool) {
	for pattern != "" && escapedPath != "" {
		var ps, seg string
		ps, pattern, _ = strings.Cut(pattern, "/")
		seg, escapedPath, _ = strings.Cut(escapedPath, "/")
		if len(ps) >= 2 && ps[0] == '{' && ps[len(ps)-1] == '}' && !fn(ps[1:len(ps)-1], seg) {
			return
		}
	}
}

// recorder captures the router's own replies (404, 405, redirects).
type recorder struct {
	header http.Header
	Code   int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) WriteHeader(code int)        { r.Code = code }
func (r *recorder) Write(b []byte) (int, error) { return r.body.Write(b) }

// statusWriter remembers the status code written.
type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.code, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.code, w.wrote = http.StatusOK, true
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) status() int {
	if !w.wrote {
		return http.StatusOK
	}
	return w.code
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// writeJSON writes v as the JSON body with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	writeBody(w, status, "application/json", v)
}

// writeBody writes v as JSON of the media type with status.
func writeBody(w http.ResponseWriter, status int, mediaType string, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		status = http.StatusInternalServerError
		buf.Reset()
		mediaType = mediaProblem
		buf.WriteString(`{"type":"` + ProblemTypePrefix + CodeInternal + `","title":"Internal error","status":500,"detail":"encoding the reply failed","code":"internal_error","error":"internal_error","message":"encoding the reply failed"}` + "\n")
	}
	w.Header().Set("Content-Type", mediaType)
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func writeError(w http.ResponseWriter, e *Error) {
	if e.Status == http.StatusUnauthorized && w.Header().Get("WWW-Authenticate") == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
	}
	if after := e.retryAfter; after > 0 || e.Status == http.StatusTooManyRequests || e.Status == http.StatusServiceUnavailable {
		if after <= 0 {
			after = defaultRetryAfter
		}
		w.Header().Set("Retry-After", strconv.Itoa(int((after+time.Second-1)/time.Second)))
	}
	writeBody(w, e.Status, mediaProblem, e)
}

// fail writes e and logs it when it is a server-side failure.
func (s *server) fail(w http.ResponseWriter, r *http.Request, e *Error) {
	if e.Status >= 500 {
		s.log.Error("api: request failed", "method", r.Method, "path", r.URL.EscapedPath(), "status", e.Status, "code", e.Code, "err", e.cause)
	}
	writeError(w, e)
}
