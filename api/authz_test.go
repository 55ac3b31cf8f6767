package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sluicehq/sluice/auth"
	"github.com/sluicehq/sluice/shared/envelope"
)

// authAPI is an event and command API that requires credentials, with
// API keys in the test's database.
type authAPI struct {
	*testAPI
	keys    *auth.Keys
	secrets map[string]string // principal → Authorization header
}

const fullToken = "full-access-token"

func newAuthAPI(t *testing.T, limits auth.Config, grants map[string][]string) *authAPI {
	t.Helper()
	var keys *auth.Keys
	a := newTestAPI(t, apiConfig{cfg: func(c *Config) {
		c.SSEPollInterval = 20 * time.Millisecond
		c.SSEHeartbeat = 200 * time.Millisecond
	}, deps: func(d *Deps) { d.Events = d.Store.(EventLog) }})
	keys = auth.NewKeys(a.pool, auth.KeysOptions{Refresh: time.Hour})
	aa := &authAPI{testAPI: a, keys: keys, secrets: map[string]string{}}
	for name, gs := range grants {
		aa.secrets[name] = "Bearer " + aa.makeKey(t, name, gs...)
	}
	h, err := New(Config{SSEPollInterval: 20 * time.Millisecond, SSEHeartbeat: 200 * time.Millisecond},
		Deps{Store: a.store, Registry: a.reg, Sequences: a.store, Events: a.store,
			Auth:       auth.NewAuthenticator(auth.Options{Keys: keys, Tokens: []string{fullToken}, AdminToken: "admin-token"}),
			RateLimits: auth.NewLimiter(limits)})
	if err != nil {
		t.Fatal(err)
	}
	a.h = h
	return aa
}

func (a *authAPI) makeKey(t *testing.T, principal string, grants ...string) string {
	t.Helper()
	var gs []auth.Grant
	for _, s := range grants {
		g, err := auth.ParseGrant(s)
		if err != nil {
			t.Fatal(err)
		}
		gs = append(gs, g)
	}
	_, secret, err := a.keys.Create(context.Background(), auth.CreateRequest{Principal: principal, Grants: gs, By: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return secret
}

// Every route × operation × principal: allowed requests do their work;
// a denied one answers 403 naming the permission, an unauthenticated,
// wrong or revoked credential 401, and neither stores anything.
func TestAccessControlMatrix(t *testing.T) {
	a := newAuthAPI(t, auth.Config{}, map[string][]string{
		"team-a": {"append,read,subscribe=stream:Order/a-*", "command,read,subscribe=db:alpha"},
		"team-b": {"append,read,subscribe=stream:Order/b-*", "command,read,subscribe=db:beta"},
		"reader": {"read,subscribe=*"},
		"writer": {"append,command=*"},
	})
	revoked := a.makeKey(t, "gone", "*=*")
	id, _, _ := auth.SplitKey(revoked)
	if _, err := a.keys.Revoke(context.Background(), id, "test"); err != nil {
		t.Fatal(err)
	}
	headers := map[string]string{
		"team-a":  a.secrets["team-a"],
		"team-b":  a.secrets["team-b"],
		"reader":  a.secrets["reader"],
		"writer":  a.secrets["writer"],
		"full":    "Bearer " + fullToken,
		"admin":   "Bearer admin-token",
		"revoked": "Bearer " + revoked,
		"wrong":   "Bearer " + revoked[:len(revoked)-2] + "xx",
		"none":    "",
		"garbage": "Basic dXNlcjpwdw==",
	}
	// A command of team-a's db, whose status is read below.
	const cmdKey = "alpha-command-1"
	a.do("POST", "/v1/dbs/alpha/classes/c/instances", `{"instance_id":"i0"}`, "Authorization: Bearer "+fullToken, "Idempotency-Key: "+cmdKey).expect(t, 202, "")
	a.do("POST", "/v1/streams/Order/a-1/events", appendBody("any", newEvents(1, "PLACED")...), "Authorization: Bearer "+fullToken).expect(t, 201, "")

	type route struct {
		name, method, path string
		body               func() string
		op                 auth.Operation
		owned              bool // the resource is team-a's (false: the whole log)
		ok                 int  // the status of an allowed request
		writes             bool
	}
	routes := []route{
		{"create", "POST", "/v1/dbs/alpha/classes/c/instances", func() string { return `{"instance_id":"` + uuid.NewString() + `"}` }, auth.OpCommand, true, 202, true},
		{"batch", "POST", "/v1/dbs/alpha/classes/c/instances:batch", func() string { return `{"items":[{"op":"create","instance_id":"` + uuid.NewString() + `"}]}` }, auth.OpCommand, true, 207, true},
		{"update", "PATCH", "/v1/dbs/alpha/classes/c/instances/i0", func() string { return `{"data":{"x":1}}` }, auth.OpCommand, true, 202, true},
		{"delete", "DELETE", "/v1/dbs/alpha/classes/c/instances/i0", nil, auth.OpCommand, true, 202, true},
		{"get instance", "GET", "/v1/dbs/alpha/classes/c/instances/i0", nil, auth.OpRead, true, 404, false},
		{"instance events", "GET", "/v1/dbs/alpha/classes/c/instances/i0/events", nil, auth.OpRead, true, 200, false},
		{"command status", "GET", "/v1/commands/" + cmdKey, nil, auth.OpRead, true, 200, false},
		{"append", "POST", "/v1/streams/Order/a-1/events", func() string { return appendBody("any", newEvents(1, "PLACED")...) }, auth.OpAppend, true, 201, true},
		{"read stream", "GET", "/v1/streams/Order/a-1/events", nil, auth.OpRead, true, 200, false},
		{"read log", "GET", "/v1/log", nil, auth.OpRead, false, 200, false},
		{"read log of a type", "GET", "/v1/log?aggregate_type=Order", nil, auth.OpRead, false, 200, false},
		{"subscribe log", "GET", "/v1/log/subscribe?from_position=1", nil, auth.OpSubscribe, false, 200, false},
		{"subscribe type", "GET", "/v1/streams/Order/subscribe?from_position=1", nil, auth.OpSubscribe, false, 200, false},
	}
	// allowed is the expected decision: 0 allowed, else the status.
	allowed := func(who string, rt route) int {
		switch who {
		case "revoked", "wrong", "none", "garbage":
			return 401
		case "full", "team-a":
			return 0
		case "admin":
			return 403
		case "reader":
			if rt.op == auth.OpRead || rt.op == auth.OpSubscribe {
				return 0
			}
			return 403
		case "writer":
			if rt.op == auth.OpAppend || rt.op == auth.OpCommand || rt.name == "command status" {
				return 0 // a command's status: read or command on its instance
			}
			return 403
		case "team-b":
			if !rt.owned {
				return 0 // the log, filtered
			}
			if rt.name == "command status" {
				return 404 // another tenant's command is unknown
			}
			return 403
		}
		panic(who)
	}
	for _, rt := range routes {
		for who, h := range headers {
			t.Run(rt.name+"/"+who, func(t *testing.T) {
				before := a.appendsCount()
				body := ""
				if rt.body != nil {
					body = rt.body()
				}
				hdrs := []string{"Authorization: " + h}
				if h == "" {
					hdrs = []string{"Authorization:"}
				}
				var code int
				var r reply
				if rt.op == auth.OpSubscribe {
					code = subscribeStatus(t, a.h, rt.path, h)
				} else {
					r = a.do(rt.method, rt.path, body, hdrs...)
					code = r.code
				}
				want := allowed(who, rt)
				switch {
				case want == 0 && code != rt.ok:
					t.Fatalf("allowed: got %d, want %d: %s", code, rt.ok, r.body)
				case want != 0 && code != want:
					t.Fatalf("got %d, want %d: %s", code, want, r.body)
				}
				if want == 403 && rt.op != auth.OpSubscribe {
					if r.str("error") != CodeForbidden || !strings.HasPrefix(r.str("permission"), string(rt.op)+" on ") {
						t.Fatalf("403 without the permission: %s", r.body)
					}
				}
				if want == 401 && r.header != nil && r.header.Get("WWW-Authenticate") == "" {
					t.Fatal("401 without WWW-Authenticate")
				}
				after := a.appendsCount()
				if want != 0 && after != before {
					t.Fatalf("a denied request stored %d events", after-before)
				}
				if want == 0 && rt.writes && after == before {
					t.Fatal("an allowed write stored nothing")
				}
			})
		}
	}
}

// subscribeStatus opens a subscription for a moment and returns its
// status.
func subscribeStatus(t *testing.T, h http.Handler, path, authz string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req := httptest.NewRequest("GET", path, nil).WithContext(ctx)
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code == 403 && !strings.Contains(rec.Body.String(), `"permission":"subscribe on `) {
		t.Fatalf("403 without the permission: %s", rec.Body.String())
	}
	return rec.Code
}

// A grant on an id prefix is checked on each command's exact instance: in
// a batch, the item outside it fails alone with 403 and is not stored.
func TestAccessControlExactInstance(t *testing.T) {
	a := newAuthAPI(t, auth.Config{}, map[string][]string{"narrow": {"command,read=db:alpha/c/x-*"}})
	h := "Authorization: " + a.secrets["narrow"]
	before := a.appendsCount()
	r := a.do("POST", "/v1/dbs/alpha/classes/c/instances:batch",
		`{"items":[{"op":"create","instance_id":"x-1"},{"op":"create","instance_id":"y-1"}]}`, h).expect(t, 207, "")
	res := r.json["results"].([]any)
	if s0, s1 := res[0].(map[string]any)["status"], res[1].(map[string]any)["status"]; s0 != 202.0 || s1 != 403.0 {
		t.Fatalf("statuses %v %v: %s", s0, s1, r.body)
	}
	if n := a.appendsCount() - before; n != 1 {
		t.Fatalf("%d stored, want 1", n)
	}
	a.do("POST", "/v1/dbs/alpha/classes/c/instances", `{"instance_id":"y-2"}`, h).expect(t, 403, CodeForbidden)
	a.do("POST", "/v1/dbs/alpha/classes/c/instances", `{"instance_id":"x-2"}`, h).expect(t, 202, "")
	a.do("PATCH", "/v1/dbs/alpha/classes/c/instances/y-1", `{"data":{}}`, h).expect(t, 403, CodeForbidden)
	a.do("POST", "/v1/dbs/alpha/classes/d/instances", `{"instance_id":"x-3"}`, h).expect(t, 403, CodeForbidden)
}

// The principal is recorded in what is appended, never the client's
// value; the domain event of a command inherits it.
func TestPrincipalRecorded(t *testing.T) {
	a := newAuthAPI(t, auth.Config{}, map[string][]string{"team-a": {"*=*"}})
	h := "Authorization: " + a.secrets["team-a"]
	a.do("POST", "/v1/streams/Order/a-1/events",
		`{"events":[{"event_type":"PLACED","metadata":{"principal":"someone-else","k":"v"}}]}`, h).expect(t, 201, "")
	evs, err := a.store.Stream(context.Background(), "Order", "a-1", 1, 0, "")
	if err != nil || len(evs) != 1 {
		t.Fatal(evs, err)
	}
	if p, _ := evs[0].Envelope.Metadata.String(envelope.MetaPrincipal); p != "team-a" {
		t.Fatalf("event principal %q: %s", p, evs[0].Raw)
	}
	a.do("POST", "/v1/dbs/alpha/classes/c/instances", `{"instance_id":"i1"}`, h).expect(t, 202, "")
	a.do("POST", "/v1/dbs/alpha/classes/c/instances", `{"instance_id":"i2"}`, "Authorization: Bearer "+fullToken).expect(t, 202, "")
	for id, want := range map[string]string{"alpha:c:i1": "team-a", "alpha:c:i2": "api-token:1"} {
		cmd := a.stream(id)[0].Envelope
		if p, _ := cmd.Metadata.String(envelope.MetaPrincipal); p != want {
			t.Fatalf("%s: command principal %q, want %q", id, p, want)
		}
		dom := envelope.DomainEventFor(cmd, cmd.Metadata.CommandID(), TypeCreated, json.RawMessage(`{}`))
		if p, _ := dom.Metadata.String(envelope.MetaPrincipal); p != want {
			t.Fatalf("%s: domain event principal %q, want %q", id, p, want)
		}
	}
	// On an open API, a client's principal is dropped.
	open := eventAPI(t, false)
	open.do("POST", "/v1/streams/Order/o-1/events",
		`{"events":[{"event_type":"PLACED","metadata":{"principal":"forged"}}]}`).expect(t, 201, "")
	evs, _ = open.store.Stream(context.Background(), "Order", "o-1", 1, 0, "")
	if _, ok := evs[0].Envelope.Metadata[envelope.MetaPrincipal]; ok {
		t.Fatalf("open API kept a client principal: %s", evs[0].Raw)
	}
}

// Two tenants subscribed to the whole log while both write: each receives
// exactly its own events, in order, and a resumed subscription goes on
// from its last id.
func TestSubscribeTwoTenants(t *testing.T) {
	a := newAuthAPI(t, auth.Config{}, map[string][]string{
		"team-a": {"append,read,subscribe=stream:Order/a-*", "command,read,subscribe=db:alpha"},
		"team-b": {"append,read,subscribe=stream:Order/b-*", "command,read,subscribe=db:beta"},
	})
	srv := httptest.NewServer(a.h)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	open := func(who, lastID string) *sseStream {
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/log/subscribe?from_position=1", nil)
		req.Header.Set("Authorization", a.secrets[who])
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("subscribe %s: %v %v", who, resp, err)
		}
		t.Cleanup(func() { _ = resp.Body.Close() })
		return &sseStream{br: bufio.NewReader(resp.Body)}
	}
	const n = 20
	type tenant struct{ name, stream, db string }
	tenants := []tenant{{"team-a", "/v1/streams/Order/a-1/events", "alpha"}, {"team-b", "/v1/streams/Order/b-1/events", "beta"}}
	subs := map[string]*sseStream{}
	for _, tn := range tenants {
		subs[tn.name] = open(tn.name, "")
	}
	var wg sync.WaitGroup
	want := map[string][]string{}
	var mu sync.Mutex
	for _, tn := range tenants {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				if i%2 == 0 {
					evs := newEvents(1, "PLACED")
					r := doHandler(t, a.h, "POST", tn.stream, appendBody("any", evs...), "Authorization: "+a.secrets[tn.name])
					if r.code != 201 {
						t.Errorf("%s append: %d %s", tn.name, r.code, r.body)
						return
					}
					mu.Lock()
					want[tn.name] = append(want[tn.name], evs[0].ID)
					mu.Unlock()
				} else {
					r := doHandler(t, a.h, "POST", "/v1/dbs/"+tn.db+"/classes/c/instances", `{"instance_id":"i`+fmt.Sprint(i)+`"}`, "Authorization: "+a.secrets[tn.name])
					if r.code != 202 {
						t.Errorf("%s command: %d %s", tn.name, r.code, r.body)
						return
					}
					mu.Lock()
					want[tn.name] = append(want[tn.name], r.str("event_id"))
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for _, tn := range tenants {
		got := subs[tn.name].read(t, n)
		var ids []string
		for _, ev := range got {
			var env envelope.Envelope
			if err := json.Unmarshal([]byte(ev.data), &env); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, env.EventID)
			if p, _ := env.Metadata.String(envelope.MetaPrincipal); p != tn.name {
				t.Fatalf("%s received an event of %q: %s", tn.name, p, ev.data)
			}
		}
		if fmt.Sprint(ids) != fmt.Sprint(want[tn.name]) {
			t.Fatalf("%s received %v\nwant %v", tn.name, ids, want[tn.name])
		}
		// Nothing else follows: the next event is this tenant's marker,
		// also through a subscription resumed from the last id.
		resumed := open(tn.name, got[len(got)-1].id)
		marker := newEvents(1, "MARKER")
		doHandler(t, a.h, "POST", tn.stream, appendBody("any", marker...), "Authorization: "+a.secrets[tn.name]).expect(t, 201, "")
		for _, s := range []*sseStream{subs[tn.name], resumed} {
			ev := s.read(t, 1)[0]
			if !strings.Contains(ev.data, marker[0].ID) {
				t.Fatalf("%s: after its own events came %s", tn.name, ev.data)
			}
		}
	}
	// The plain log is filtered the same way.
	r := doHandler(t, a.h, "GET", "/v1/log?limit=1000", "", "Authorization: "+a.secrets["team-b"]).expect(t, 200, "")
	for _, raw := range r.json["events"].([]any) {
		b, _ := json.Marshal(raw)
		if !strings.Contains(string(b), `"principal":"team-b"`) {
			t.Fatalf("team-b read %s", b)
		}
	}
	if len(r.json["events"].([]any)) != n+1 {
		t.Fatalf("team-b read %d events, want %d", len(r.json["events"].([]any)), n+1)
	}
}

// sseStream reads one subscription's events.
type sseStream struct{ br *bufio.Reader }

func (s *sseStream) read(t *testing.T, n int) []sseEvent {
	t.Helper()
	return sseRead(t, s.br, n, 15*time.Second)
}

// Per-principal limits answer 429 with Retry-After and store nothing.
func TestPrincipalRateLimits(t *testing.T) {
	a := newAuthAPI(t, auth.Config{AppendRate: 0.01, CommandRate: 0.01, MaxSubscriptions: 1},
		map[string][]string{"team-a": {"*=*"}, "team-b": {"*=*"}})
	ha, hb := "Authorization: "+a.secrets["team-a"], "Authorization: "+a.secrets["team-b"]
	a.do("POST", "/v1/streams/Order/a-1/events", appendBody("any", newEvents(1, "PLACED")...), ha).expect(t, 201, "")
	before := a.appendsCount()
	r := a.do("POST", "/v1/streams/Order/a-1/events", appendBody("any", newEvents(1, "PLACED")...), ha).expect(t, 429, CodeTooManyRequests)
	if r.header.Get("Retry-After") == "" || a.appendsCount() != before {
		t.Fatalf("429 without Retry-After or with a write: %v", r.header)
	}
	a.do("POST", "/v1/streams/Order/b-1/events", appendBody("any", newEvents(1, "PLACED")...), hb).expect(t, 201, "")
	a.do("POST", "/v1/dbs/alpha/classes/c/instances", `{}`, ha).expect(t, 202, "")
	a.do("POST", "/v1/dbs/alpha/classes/c/instances", `{}`, ha).expect(t, 429, CodeTooManyRequests)
	a.do("GET", "/v1/log", "", ha).expect(t, 200, "") // reads are not rate limited

	srv := httptest.NewServer(a.h)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/log/subscribe", nil)
	req.Header.Set("Authorization", a.secrets["team-a"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatal(resp, err)
	}
	defer resp.Body.Close()
	if code := subscribeStatus(t, a.h, "/v1/log/subscribe", a.secrets["team-a"]); code != 429 {
		t.Fatalf("second subscription: %d", code)
	}
	if code := subscribeStatus(t, a.h, "/v1/log/subscribe", a.secrets["team-b"]); code != 200 {
		t.Fatalf("another principal's subscription: %d", code)
	}
}
