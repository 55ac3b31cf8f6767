package api

import (
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/sluicehq/sluice/auth"
	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/shared/envelope"
)

// Access control of /v1 (docs/security.md): who the request is from
// (auth.Authenticator), whether its route's operation is granted on the
// route's resource, the per-principal limits, and the principal recorded
// in what it appends.

// CodeForbidden is a request outside the principal's grants (403).
const CodeForbidden = "forbidden"

func init() {
	problemTitles[CodeForbidden] = "Forbidden"
}

// authorize authenticates r, checks the permission its route needs before
// anything is read or stored, and applies the per-principal limits. It
// returns r carrying the principal (auth.FromContext) and the func that
// ends what it opened (a subscription's slot).
func (s *server) authorize(w http.ResponseWriter, r *http.Request, pattern string) (*http.Request, func(), *Error) {
	nop := func() {}
	p, err := s.auth.Authenticate(r.Context(), r.Header.Get("Authorization"))
	if err != nil {
		if errors.Is(err, auth.ErrUnavailable) {
			return r, nop, &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
				Message: "the API keys cannot be read; retry after Retry-After", cause: err}
		}
		if !errors.Is(err, auth.ErrNoCredentials) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sluice", error="invalid_token"`)
		}
		return r, nop, newError(http.StatusUnauthorized, CodeUnauthorized, "Authorization", "%s", err.Error())
	}
	r = r.WithContext(auth.WithPrincipal(r.Context(), p))
	op, res, ok := routePermission(pattern, r)
	if !ok {
		return r, nop, nil // no route: the router answers
	}
	var allowed bool
	switch {
	case pattern == "GET /v1/commands/{command_id}": // checked again on the command's instance
		allowed = p.AllowsAny(auth.OpRead) || p.AllowsAny(auth.OpCommand)
	case res == nil:
		allowed = p.AllowsAny(op)
	default:
		allowed = p.Allows(op, *res)
	}
	if !allowed {
		r0 := auth.Resource{}
		if res != nil {
			r0 = *res
		}
		return r, nop, forbidden(p, op, r0)
	}
	switch op {
	case auth.OpAppend, auth.OpCommand:
		if ok, after := s.limiter.Allow(p.Name, op); !ok {
			e := newError(http.StatusTooManyRequests, CodeTooManyRequests, "",
				"%s is over its rate of %s requests (SLUICE_AUTH_RATE_%sS); retry after Retry-After", who(p), op, strings.ToUpper(string(op)))
			e.retryAfter = after
			return r, nop, e
		}
	case auth.OpSubscribe:
		release, ok := s.limiter.OpenSubscription(p.Name)
		if !ok {
			return r, nop, newError(http.StatusTooManyRequests, CodeTooManyRequests, "",
				"%s has %d subscriptions open already (SLUICE_AUTH_MAX_SUBSCRIPTIONS); close one or retry after Retry-After", who(p), s.limiter.MaxSubscriptions())
		}
		return r, release, nil
	}
	return r, nop, nil
}

func who(p *auth.Principal) string {
	if p.Name == "" {
		return "the anonymous principal"
	}
	return "principal " + p.Name
}

// forbidden is the 403 naming the missing permission.
func forbidden(p *auth.Principal, op auth.Operation, res auth.Resource) *Error {
	e := newError(http.StatusForbidden, CodeForbidden, "", "%s; nothing was read or stored", (&auth.DeniedError{Principal: p.Name, Op: op, Resource: res}).Error())
	e.Permission = string(op) + " on " + res.String()
	return e
}

// routePermission is the operation a route needs and its resource (nil:
// the route's resource is only known later: the log, filtered event by
// event, and a command's status). ok is false for a path no route matches.
func routePermission(pattern string, r *http.Request) (op auth.Operation, res *auth.Resource, ok bool) {
	method, path, _ := strings.Cut(pattern, " ")
	if path == "" {
		return "", nil, false
	}
	v := pathValues(path, r.URL.EscapedPath())
	const inst = "/v1/dbs/{db}/classes/{class}/instances"
	instance := func(exact bool) *auth.Resource {
		prefix := v["db"] + ":" + v["class"] + ":"
		if exact {
			if id, err := envelope.InstanceAggregateID(v["db"], v["class"], v["id"]); err == nil {
				return &auth.Resource{Type: envelope.AggregateTypeInstance, ID: id}
			}
			// Invalid: the handler refuses it; only the prefix is known.
		}
		return &auth.Resource{Type: envelope.AggregateTypeInstance, ID: prefix, Prefix: true}
	}
	switch {
	case path == inst || path == inst+":batch":
		return auth.OpCommand, instance(false), true
	case path == inst+"/{id}" && method != http.MethodGet:
		return auth.OpCommand, instance(true), true
	case path == inst+"/{id}" || path == inst+"/{id}/events":
		return auth.OpRead, instance(true), true
	case path == "/v1/commands/{command_id}":
		return auth.OpRead, nil, true
	case path == "/v1/streams/{aggregate_type}/{aggregate_id}/events":
		res := &auth.Resource{Type: v["aggregate_type"], ID: v["aggregate_id"]}
		if id, err := envelope.NormalizeAggregateID(res.ID); err == nil {
			res.ID = id
		}
		if method == http.MethodPost {
			return auth.OpAppend, res, true
		}
		return auth.OpRead, res, true
	case path == "/v1/log" || path == "/v1/log/subscribe" || path == "/v1/streams/{aggregate_type}/subscribe":
		op := auth.OpRead
		if strings.HasSuffix(path, "/subscribe") {
			op = auth.OpSubscribe
		}
		t := v["aggregate_type"]
		if t == "" {
			t = r.URL.Query().Get("aggregate_type")
		}
		if t == "" {
			return op, nil, true
		}
		return op, &auth.Resource{Type: t, Prefix: true}, true
	}
	// A route added without a permission is refused to everyone, never
	// open: no grant names this operation.
	return "route_without_permission", &auth.Resource{}, true
}

// pathValues are the percent-decoded wildcards of a route's path.
func pathValues(pattern, escapedPath string) map[string]string {
	out := map[string]string{}
	wildcards(pattern, escapedPath, func(name, seg string) bool {
		if v, err := url.PathUnescape(seg); err == nil {
			out[name] = v
		}
		return true
	})
	return out
}

// principalOf is the request's principal (Anonymous outside /v1's check,
// as in tests calling handlers directly).
func principalOf(r *http.Request) *auth.Principal {
	if p := auth.FromContext(r.Context()); p != nil {
		return p
	}
	return auth.Anonymous
}

// checkAggregate is the exact check of an operation on the aggregate an
// envelope names, once known (a create's instance id, a batch item).
func checkAggregate(r *http.Request, op auth.Operation, env envelope.Envelope) *Error {
	p := principalOf(r)
	res := auth.Resource{Type: env.AggregateType, ID: env.AggregateID}
	if p.Allows(op, res) {
		return nil
	}
	return forbidden(p, op, res)
}

// mayRead reports whether the request's principal may receive ev by op
// (read for the log, subscribe for subscriptions): the log and the
// subscriptions skip the others, so no tenant sees another's events, and
// their positions stay cursors (every position before the next one is
// final, delivered or not).
func mayRead(p *auth.Principal, op auth.Operation, ev eventstore.Event) bool {
	return p.Allows(op, auth.Resource{Type: ev.Envelope.AggregateType, ID: ev.Envelope.AggregateID})
}

// stampPrincipal records the request's principal in m, replacing any value
// the client gave: the key is never the client's to set.
func stampPrincipal(r *http.Request, m *envelope.Metadata) {
	delete(*m, envelope.MetaPrincipal)
	if p := principalOf(r); p.Name != "" {
		m.SetString(envelope.MetaPrincipal, p.Name)
	}
}
