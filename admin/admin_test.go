package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/pipeline/sluiceconfig"
	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/worker"
)

const (
	opToken   = "operator-secret"
	readToken = "reader-secret"
)

// env is a running pipeline with the admin API mounted on its API.
type env struct {
	*pipelinetest.Env
	t *testing.T
}

func start(t *testing.T) *env {
	t.Helper()
	e := pipelinetest.Start(t, pipelinetest.Options{APIRoutes: adminRoutes(t, nil)})
	return &env{Env: e, t: t}
}

// adminRoutes mounts the admin API on the pipeline's API: the tests'
// tokens, a registry and the read model on the pipeline's deps; with,
// when not nil, adds to the admin API's configuration and deps.
func adminRoutes(t *testing.T, with func(pipeline.Deps, *admin.Config, *admin.Deps)) func(d pipeline.Deps) map[string]http.Handler {
	return func(d pipeline.Deps) map[string]http.Handler {
		reg, err := registry.New(registry.Config{Owner: "admin-test"}, registry.Deps{Pool: d.Pool})
		if err != nil {
			t.Fatal(err)
		}
		es, err := readmodel.NewClient(d.Config.Elasticsearch)
		if err != nil {
			t.Fatal(err)
		}
		cfg := admin.Config{Process: d.Config, OperatorToken: opToken, ReadToken: readToken}
		deps := admin.Deps{Pool: d.Pool, Store: d.Store, Bucket: d.Bucket, Registry: reg, ES: es, Logger: d.Logger}
		if with != nil {
			with(d, &cfg, &deps)
		}
		srv, err := admin.New(cfg, deps)
		if err != nil {
			t.Fatal(err)
		}
		return map[string]http.Handler{admin.Prefix: srv}
	}
}

// call sends method path with the token and body; it returns the status
// and the decoded JSON answer.
func (e *env) call(method, path, token string, body any) (int, map[string]any, http.Header) {
	e.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, e.APIURL+path, rd)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	out := map[string]any{}
	if len(bytes.TrimSpace(raw)) > 0 && raw[0] == '{' {
		if err := json.Unmarshal(raw, &out); err != nil {
			e.t.Fatalf("%s %s: %d %s: %v", method, path, resp.StatusCode, raw, err)
		}
	} else if len(bytes.TrimSpace(raw)) > 0 {
		out["_raw"] = string(raw)
	}
	return resp.StatusCode, out, resp.Header
}

func (e *env) create(id string) {
	e.t.Helper()
	resp, err := http.Post(e.APIURL+"/v1/dbs/shop/classes/orders/instances", "application/json", strings.NewReader(`{"instance_id":"`+id+`","data":{"n":1}}`))
	if err != nil || resp.StatusCode != http.StatusAccepted {
		e.t.Fatalf("create %s: %v %v", id, resp, err)
	}
	resp.Body.Close()
}

// Without a configured token the admin API is closed: 401 to everything.
func TestNoTokenConfiguredIsClosed(t *testing.T) {
	_, pool := testenv.NewMigratedDatabase(t)
	reg, err := registry.New(registry.Config{Owner: "t"}, registry.Deps{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	cfg := mustConfig(t)
	srv, err := admin.New(admin.Config{Process: cfg}, admin.Deps{Pool: pool, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ method, path, auth string }{
		{"GET", "/admin/v1/overview", ""},
		{"GET", "/admin/v1/overview", "Bearer "},
		{"GET", "/admin/v1/overview", "Bearer anything"},
		{"POST", "/admin/v1/dlq/drop", "Bearer anything"},
	} {
		req := httptest.NewRequest(tc.method, tc.path, strings.NewReader("{}"))
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, req)
		if w.Code != http.StatusUnauthorized || w.Header().Get("Content-Type") != "application/problem+json" || w.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("%s %s with %q: %d %s, want 401 problem+json", tc.method, tc.path, tc.auth, w.Code, w.Header())
		}
	}
}

// When the audit record cannot be written the answer is 503 audit_failed
// with Retry-After, and its detail says what became of the action: done,
// a dry run, or failed (it said "the action ran (invalid)" for a refused
// one).
func TestAuditFailureSaysWhatRan(t *testing.T) {
	ctx := context.Background()
	_, pool := testenv.NewMigratedDatabase(t)
	reg, err := registry.New(registry.Config{Owner: "t"}, registry.Deps{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	cfg := mustConfig(t)
	srv, err := admin.New(admin.Config{Process: cfg, OperatorToken: opToken}, admin.Deps{Pool: pool, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ALTER TABLE sluice.admin_audit RENAME TO admin_audit_gone`); err != nil {
		t.Fatal(err)
	}
	group := cfg.Kafka.Group(instanceworker.GroupName)
	cases := []struct {
		name, path, body string
		says             string
		paused           bool
	}{
		{"dry run", "/admin/v1/consumers/" + group + "/pause", `{"dry_run":true}`, "the dry run ran and changed nothing, but", false},
		{"refused", "/admin/v1/consumers/" + group + "/reset", `{"to":"yesterday"}`, "the action failed (invalid: ", false},
		{"done", "/admin/v1/consumers/" + group + "/pause", `{"reason":"x"}`, "the action ran, but", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := httptest.NewRequest("POST", c.path, strings.NewReader(c.body))
			req.Header.Set("Authorization", "Bearer "+opToken)
			req.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			srv.ServeHTTP(w, req)
			var p map[string]any
			_ = json.Unmarshal(w.Body.Bytes(), &p)
			if w.Code != http.StatusServiceUnavailable || p["code"] != "audit_failed" || w.Header().Get("Retry-After") == "" {
				t.Fatalf("%d %v %v, want 503 audit_failed with Retry-After", w.Code, w.Header(), p)
			}
			if d, _ := p["detail"].(string); !strings.HasPrefix(d, c.says) {
				t.Errorf("detail %q, want it to start %q", d, c.says)
			}
			st, err := reg.GroupPaused(ctx, group)
			if err != nil || st.Paused != c.paused {
				t.Errorf("group paused %v (%v), want %v", st.Paused, err, c.paused)
			}
		})
	}
}

// A pause must work while Kafka is out: when the group cannot be looked
// up there (here: no broker listens), the flag of a group this process
// does not configure is set all the same, as docs/console.md says; only a
// group Kafka answers is unknown is refused.
func TestPauseWhileKafkaIsOut(t *testing.T) {
	ctx := context.Background()
	_, pool := testenv.NewMigratedDatabase(t)
	reg, err := registry.New(registry.Config{Owner: "t"}, registry.Deps{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nobody := ln.Addr().String()
	ln.Close() // nothing listens there: every connection is refused
	cfg, err := sluiceconfig.Load(map[string]string{"KAFKA_BROKERS": nobody})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := admin.New(admin.Config{Process: cfg, OperatorToken: opToken}, admin.Deps{Pool: pool, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	const group = "sluice.not-configured-here"
	req := httptest.NewRequest("POST", "/admin/v1/consumers/"+group+"/pause", strings.NewReader(`{"reason":"kafka is out"}`))
	req.Header.Set("Authorization", "Bearer "+opToken)
	req.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	srv.ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		t.Fatalf("pause while Kafka is out: %d %s, want 200", w.Code, w.Body)
	}
	if st, err := reg.GroupPaused(ctx, group); err != nil || !st.Paused {
		t.Errorf("group paused %v (%v), want true", st.Paused, err)
	}
}

func mustConfig(t *testing.T) *sluiceconfig.Config {
	t.Helper()
	c, err := sluiceconfig.Load(map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Every endpoint on a running pipeline: 401 without or with a wrong token,
// reads with either token, 403 for the read token on every action (and
// the refusal audited), each action's dry run changing nothing and its act
// doing what the CLI does, problem+json errors, and an audit record for
// every action with who, what and whether it was a dry run.
func TestAdminAPI(t *testing.T) {
	e := start(t)
	var head int64 // the store head the overview saw

	testenv.Step(t, "pipeline ready", func(t *testing.T) {
		e := e.on(t)
		e.create("1")
		// Lag 0 alone is also true before the relay has published the command
		// (an empty topic): wait until the worker has appended the domain
		// event (head 2) and its registry row is there too, and until the
		// relay's durable checkpoint covers the head (it is written within
		// EVENT_PUBLISHER_CHECKPOINT_INTERVAL of the last acknowledgement;
		// the checkpoint step below moves it back from there).
		pipelinetest.WaitFor(t, 30*time.Second, "the instance document and the relay checkpoint at the head", func() bool {
			_, ov, _ := e.call("GET", "/admin/v1/overview", readToken, nil)
			store, _ := ov["store"].(map[string]any)
			reg, _ := ov["registry"].(map[string]any)
			rl, _ := ov["relay"].(map[string]any)
			h, _ := store["head"].(float64)
			if cp, _ := rl["checkpoint"].(float64); h < 2 || cp < h {
				return false
			}
			if hs, _ := reg["handlers"].([]any); len(hs) == 0 {
				return false
			}
			for _, g := range ov["groups"].([]any) {
				g := g.(map[string]any)
				if name, _ := g["group"].(string); strings.HasSuffix(name, "instance-worker") && g["lag"] == 0.0 && len(g["partitions"].([]any)) > 0 {
					return true
				}
			}
			return false
		})
	})

	testenv.Step(t, "authentication", func(t *testing.T) {
		e := e.on(t)
		// Authentication.
		for _, tok := range []string{"", "wrong"} {
			if st, body, _ := e.call("GET", "/admin/v1/overview", tok, nil); st != http.StatusUnauthorized || body["code"] != "unauthorized" {
				t.Fatalf("overview with token %q: %d %v, want 401", tok, st, body)
			}
		}
	})

	testenv.Step(t, "overview", func(t *testing.T) {
		e := e.on(t)
		// Overview.
		st, ov, _ := e.call("GET", "/admin/v1/overview", readToken, nil)
		if st != 200 {
			t.Fatalf("overview: %d %v", st, ov)
		}
		store := ov["store"].(map[string]any)
		rl := ov["relay"].(map[string]any)
		if store["head"].(float64) < 2 || rl["lease_state"] != "held" || rl["leader"] == "" || rl["found"] != true {
			t.Errorf("overview store/relay: %v %v", store, rl)
		}
		reg := ov["registry"].(map[string]any)
		if len(reg["handlers"].([]any)) == 0 {
			t.Errorf("overview registry: %v", reg)
		}
		if n := len(ov["dlq"].([]any)); n != 2 {
			t.Errorf("overview dlq: %v", ov["dlq"])
		}
		if ps := ov["projections"].([]any); len(ps) == 0 {
			t.Errorf("overview projections: %v", ps)
		}
		if _, ok := ov["parked"].(map[string]any)["parked"]; !ok {
			t.Errorf("overview parked: %v", ov["parked"])
		}
		if st, _, _ := e.call("GET", "/admin/v1/overview", opToken, nil); st != 200 {
			t.Errorf("overview with the operator token: %d", st)
		}
		head = int64(store["head"].(float64))
	})

	// The instance worker's group id carries the group prefix.
	iwGroup := e.Config.Kafka.Group("instance-worker")

	testenv.Step(t, "read token may not act", func(t *testing.T) {
		e := e.on(t)
		// The read token may not act: 403 on every action.
		actions := []struct{ path string }{
			{"/admin/v1/relay/checkpoint"}, {"/admin/v1/relay/parked/1/republish"}, {"/admin/v1/relay/parked/1/drop"},
			{"/admin/v1/consumers/instance-worker/reset"}, {"/admin/v1/dlq/redrive"}, {"/admin/v1/dlq/drop"},
			{"/admin/v1/projections/history/rebuild"}, {"/admin/v1/projections/history/rollback"}, {"/admin/v1/verify"},
		}
		for _, a := range actions {
			if st, body, h := e.call("POST", a.path, readToken, map[string]any{"dry_run": true}); st != http.StatusForbidden ||
				body["code"] != "forbidden" || body["permission"] != "admin_act on *" || h.Get("Content-Type") != "application/problem+json" {
				t.Errorf("POST %s with the read token: %d %v, want 403", a.path, st, body)
			}
			if st, _, _ := e.call("POST", a.path, "", map[string]any{"dry_run": true}); st != http.StatusUnauthorized {
				t.Errorf("POST %s without a token: %d, want 401", a.path, st)
			}
		}
	})

	testenv.Step(t, "relay checkpoint", func(t *testing.T) {
		e := e.on(t)
		// Relay checkpoint: a dry run plans, the act moves.
		st, body, _ := e.call("POST", "/admin/v1/relay/checkpoint", opToken, map[string]any{"position": 0, "dry_run": true})
		if st != 200 || body["moved"] != false || body["plan"].(map[string]any)["republish"].(float64) < 1 {
			t.Fatalf("checkpoint dry run: %d %v", st, body)
		}
		if st, body, _ := e.call("POST", "/admin/v1/relay/checkpoint", opToken, map[string]any{"position": head + 100}); st != http.StatusUnprocessableEntity || body["code"] != "unsafe" || body["field"] != "position" {
			t.Errorf("checkpoint past the head: %d %v, want 422 naming position", st, body)
		}
		if st, body, _ := e.call("POST", "/admin/v1/relay/checkpoint", opToken, map[string]any{}); st != 400 || body["code"] != "invalid" || body["field"] != "position" {
			t.Errorf("checkpoint without a target: %d %v, want 400 naming position", st, body)
		}
		if st, body, _ := e.call("POST", "/admin/v1/relay/checkpoint", opToken, map[string]any{"position": head}); st != 200 || body["moved"] != true {
			t.Errorf("checkpoint set: %d %v", st, body)
		}
	})

	testenv.Step(t, "parked records", func(t *testing.T) {
		e := e.on(t)
		// Parked records: none; resolving a missing one is 404.
		if st, body, _ := e.call("GET", "/admin/v1/relay/parked", readToken, nil); st != 200 {
			t.Errorf("parked list: %d %v", st, body)
		}
		if st, body, _ := e.call("POST", "/admin/v1/relay/parked/999/drop", opToken, map[string]any{"dry_run": true}); st != 404 || body["code"] != "not_found" {
			t.Errorf("drop of a missing parked record: %d %v", st, body)
		}
		// An empty list is [] (it was null); a state that does not exist
		// is 400 naming it (it was 503, as if the store were down).
		for _, c := range []struct {
			name, query string
			status      int
			field, raw  string
		}{
			{"empty list", "", 200, "", "[]"},
			{"every state", "?state=all", 200, "", "[]"},
			{"unknown state", "?state=bogus", 400, "state", ""},
		} {
			t.Run(c.name, func(t *testing.T) {
				st, body, _ := e.on(t).call("GET", "/admin/v1/relay/parked"+c.query, readToken, nil)
				raw, _ := body["_raw"].(string)
				if st != c.status || (c.field != "" && body["field"] != c.field) || strings.TrimSpace(raw) != c.raw {
					t.Errorf("%d %v, want %d field %q body %q", st, body, c.status, c.field, c.raw)
				}
			})
		}
	})

	testenv.Step(t, "consumer reset", func(t *testing.T) {
		e := e.on(t)
		// Consumer reset: a dry run lists the offsets; the act is refused
		// while the worker is a live member (409).
		st, body, _ := e.call("POST", "/admin/v1/consumers/"+iwGroup+"/reset", opToken, map[string]any{"to": "earliest", "dry_run": true})
		if st != 200 || len(body["partitions"].([]any)) == 0 || len(body["members"].([]any)) != 1 || body["committed"] != false {
			t.Fatalf("reset dry run: %d %v", st, body)
		}
		if st, body, _ := e.call("POST", "/admin/v1/consumers/"+iwGroup+"/reset", opToken, map[string]any{"to": "earliest"}); st != 409 || !strings.Contains(body["detail"].(string), "live members") {
			t.Errorf("reset of a live group: %d %v, want 409", st, body)
		}
		if st, _, _ := e.call("POST", "/admin/v1/consumers/"+iwGroup+"/reset", opToken, map[string]any{"to": "yesterday"}); st != 400 {
			t.Errorf("reset to yesterday: %d, want 400", st)
		}
		if st, body, _ := e.call("GET", "/admin/v1/consumers/"+iwGroup, readToken, nil); st != 200 || body["total"] != 0.0 {
			t.Errorf("group lag: %d %v", st, body)
		}
		// A topic that does not exist: 404 naming the nearest (it was 503).
		cmds := e.Config.Kafka.CommandsTopic
		if st, body, _ := e.call("GET", "/admin/v1/consumers/"+iwGroup+"?topic="+strings.TrimSuffix(cmds, "s"), readToken, nil); st != 404 ||
			body["field"] != "topic" || !strings.Contains(body["detail"].(string), cmds) {
			t.Errorf("group lag of a mistyped topic: %d %v, want 404 naming %s", st, body, cmds)
		}
	})

	testenv.Step(t, "dead letters", func(t *testing.T) {
		e := e.on(t)
		// Dead letters: one letter that is not a DLQ record and one that is.
		dlqTopic := e.Config.Kafka.CommandsDLQTopic
		cl, err := kgo.NewClient(kgo.SeedBrokers(e.Kafka.Brokers...), kgo.AllowAutoTopicCreation())
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), 1, 1, nil, "admin-test.originals"); err != nil {
			t.Fatal(err)
		}
		letter, _ := json.Marshal(worker.DLQRecord{OriginalTopic: "admin-test.originals", // no worker consumes it
			OriginalKey: "k", OriginalValue: `{"x":1}`,
			OriginalHeaders: map[string]string{}, Error: "permanent: boom", ErrorClass: "permanent", AttemptCount: 1, Handler: "instanceworker",
			FirstFailedAt: time.Now(), FailedAt: time.Now()})
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: dlqTopic, Value: []byte("not a letter")}, &kgo.Record{Topic: dlqTopic, Value: letter}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		st, body, _ := e.call("GET", "/admin/v1/dlq?topic="+dlqTopic, readToken, nil)
		if st != 200 || body["total"] != 2.0 || len(body["letters"].([]any)) != 2 {
			t.Fatalf("dlq list: %d %v", st, body)
		}
		ids := []string{}
		for _, l := range body["letters"].([]any) {
			ids = append(ids, l.(map[string]any)["letter"].(string))
		}
		if st, body, _ := e.call("GET", "/admin/v1/dlq/letter?topic="+dlqTopic+"&letter="+ids[1], readToken, nil); st != 200 || body["original"].(map[string]any)["value"] != `{"x":1}` {
			t.Errorf("dlq show: %d %v", st, body)
		}
		if st, _, _ := e.call("GET", "/admin/v1/dlq/letter?topic="+dlqTopic+"&letter=0:99", readToken, nil); st != 404 {
			t.Errorf("dlq show of a missing letter: %d, want 404", st)
		}
		if st, _, _ := e.call("GET", "/admin/v1/dlq", readToken, nil); st != 400 {
			t.Errorf("dlq list without a topic: %d, want 400", st)
		}
		st, body, _ = e.call("POST", "/admin/v1/dlq/redrive", opToken, map[string]any{"topic": dlqTopic, "letter": ids[1], "dry_run": true})
		if st != 200 || body["redriven"] != 1.0 || body["dry_run"] != true {
			t.Fatalf("redrive dry run: %d %v", st, body)
		}
		st, body, _ = e.call("POST", "/admin/v1/dlq/redrive", opToken, map[string]any{"topic": dlqTopic, "letter": ids[1]})
		if st != 200 || body["redriven"] != 1.0 {
			t.Fatalf("redrive: %d %v", st, body)
		}
		if st, body, _ := e.call("POST", "/admin/v1/dlq/redrive", opToken, map[string]any{"topic": dlqTopic, "letter": ids[1]}); st != 200 || body["skipped"] != 1.0 {
			t.Errorf("second redrive: %d %v, want skipped", st, body)
		}
		st, body, _ = e.call("POST", "/admin/v1/dlq/drop", opToken, map[string]any{"topic": dlqTopic, "letter": ids[0], "reason": "junk", "dry_run": true})
		if st != 200 || body["dropped"] != false {
			t.Fatalf("drop dry run: %d %v", st, body)
		}
		if st, body, _ := e.call("POST", "/admin/v1/dlq/drop", opToken, map[string]any{"topic": dlqTopic, "letter": ids[0], "reason": "junk"}); st != 200 || body["dropped"] != true {
			t.Errorf("drop: %d %v", st, body)
		}
		if st, body, _ := e.call("GET", "/admin/v1/dlq?topic="+dlqTopic, readToken, nil); st != 200 || len(body["letters"].([]any)) != 0 || body["handled"] != 2.0 {
			t.Errorf("dlq list after redrive and drop: %d %v", st, body)
		}
		if st, _, _ := e.call("POST", "/admin/v1/dlq/drop", opToken, map[string]any{"topic": dlqTopic, "letter": "x:y"}); st != 400 {
			t.Errorf("drop of letter x:y: %d, want 400", st)
		}
		// Names that do not exist and incomplete ones are the caller's
		// mistakes, as in sluice dlq: 404 naming the nearest topic, 400
		// naming the letter — not 503, which says "retry later".
		twoParts := "admin-test.dlq2"
		if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), 2, 1, nil, twoParts); err != nil {
			t.Fatal(err)
		}
		mistyped := strings.TrimSuffix(dlqTopic, ".dlq") + "s.dlq"
		cases := []struct {
			name, method, path string
			body               map[string]any
			status             int
			field, mentions    string
		}{
			{"list of a mistyped topic", "GET", "/admin/v1/dlq?topic=" + mistyped, nil, 404, "topic", dlqTopic},
			{"show on a mistyped topic", "GET", "/admin/v1/dlq/letter?letter=0:0&topic=" + mistyped, nil, 404, "topic", dlqTopic},
			{"redrive on a mistyped topic", "POST", "/admin/v1/dlq/redrive", map[string]any{"topic": mistyped, "all": true, "dry_run": true}, 404, "topic", dlqTopic},
			{"drop on a mistyped topic", "POST", "/admin/v1/dlq/drop", map[string]any{"topic": mistyped, "letter": "0:0", "dry_run": true}, 404, "topic", dlqTopic},
			{"list without a topic", "GET", "/admin/v1/dlq", nil, 400, "topic", "topic is required"},
			{"show of a bad letter", "GET", "/admin/v1/dlq/letter?letter=x&topic=" + dlqTopic, nil, 400, "letter", "partition:offset"},
			{"show without the partition of a topic of two", "GET", "/admin/v1/dlq/letter?letter=0&topic=" + twoParts, nil, 400, "letter", "2 partitions"},
			{"drop without the partition of a topic of two", "POST", "/admin/v1/dlq/drop", map[string]any{"topic": twoParts, "letter": "0", "dry_run": true}, 400, "letter", "2 partitions"},
			{"show of a missing letter", "GET", "/admin/v1/dlq/letter?letter=0:99&topic=" + dlqTopic, nil, 404, "letter", "no dead letter"},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				tok := readToken
				if c.method == "POST" {
					tok = opToken
				}
				st, body, h := e.on(t).call(c.method, c.path, tok, c.body)
				if st != c.status || body["field"] != c.field || h.Get("Content-Type") != "application/problem+json" {
					t.Fatalf("%d %v, want %d with field %q", st, body, c.status, c.field)
				}
				if d, _ := body["detail"].(string); !strings.Contains(d, c.mentions) {
					t.Errorf("detail %q does not mention %q", d, c.mentions)
				}
			})
		}
	})

	testenv.Step(t, "projections", func(t *testing.T) {
		e := e.on(t)
		// Projections: rebuilding the live version is unsafe; a dry run of a
		// new version plans; acting starts a job that the overview follows to
		// its end; rollback's dry run lists the indices.
		if st, body, _ := e.call("POST", "/admin/v1/projections/history/rebuild", opToken, map[string]any{"version": 1, "dry_run": true}); st != 422 {
			t.Errorf("rebuild of the live version: %d %v, want 422", st, body)
		}
		st, body, _ := e.call("POST", "/admin/v1/projections/history/rebuild", opToken, map[string]any{"version": 2, "dry_run": true})
		if st != 200 || body["plan"] == nil {
			t.Fatalf("rebuild dry run: %d %v", st, body)
		}
		if st, _, _ := e.call("POST", "/admin/v1/projections/nosuch/rollback", opToken, map[string]any{"dry_run": true}); st != 404 {
			t.Errorf("rollback of an unknown projection: %d, want 404", st)
		}
		// Only v1 exists: nothing to roll back to. The dry run says so
		// (it said "would roll back"), and the act starts no job (it
		// answered 202 for a job that could only fail).
		for _, dry := range []bool{true, false} {
			t.Run(fmt.Sprintf("rollback without an older version, dry run %t", dry), func(t *testing.T) {
				st, body, _ := e.on(t).call("POST", "/admin/v1/projections/history/rollback", opToken, map[string]any{"dry_run": dry})
				if d, _ := body["detail"].(string); st != 422 || body["code"] != "unsafe" || !strings.Contains(d, "no older version") {
					t.Errorf("%d %v, want 422 unsafe: no older version", st, body)
				}
				if _, ov, _ := e.on(t).call("GET", "/admin/v1/overview", readToken, nil); len(ov["jobs"].([]any)) != 0 {
					t.Errorf("jobs after a refused rollback: %v", ov["jobs"])
				}
			})
		}
		st, body, _ = e.call("POST", "/admin/v1/projections/history/rebuild", opToken, map[string]any{"version": 2, "settle": "0s"})
		if st != http.StatusAccepted || body["job"] == nil {
			t.Fatalf("rebuild: %d %v", st, body)
		}
		pipelinetest.WaitFor(t, 60*time.Second, "the rebuild job to end", func() bool {
			_, ov, _ := e.call("GET", "/admin/v1/overview", readToken, nil)
			for _, j := range ov["jobs"].([]any) {
				j := j.(map[string]any)
				if j["id"] == body["job"] && j["ended_at"] != nil {
					if j["error"] != nil {
						t.Fatalf("rebuild job failed: %v", j)
					}
					return true
				}
			}
			return false
		})
		rebuild := body
		if st, body, _ = e.call("POST", "/admin/v1/projections/history/rollback", opToken, map[string]any{"dry_run": true}); st != 200 || body["indices"] == nil ||
			body["from"] != 2.0 || body["to"] != 1.0 {
			t.Errorf("rollback dry run: %d %v, want from 2 to 1 and the indices", st, body)
		}
		_, ov, _ := e.call("GET", "/admin/v1/overview", readToken, nil)
		checkProjectionJSONNames(t, body, ov, rebuild["job"])
	})

	testenv.Step(t, "verify", func(t *testing.T) {
		e := e.on(t)
		// Verify: a dry run names what it would compare without reading it;
		// the act compares the store with Elasticsearch.
		st, body, _ := e.call("POST", "/admin/v1/verify", opToken, map[string]any{"db": "shop", "class": "orders", "dry_run": true})
		if st != 200 || body["dry_run"] != true || body["write_alias"] != e.Config.Elasticsearch.IndexPrefix+"shop_instances_write" ||
			body["instances"] != nil || !strings.Contains(body["compares"].(string), "shop/orders") {
			t.Errorf("verify dry run: %d %v", st, body)
		}
		if st, body, _ := e.call("POST", "/admin/v1/verify", opToken, map[string]any{"db": "Shop!", "class": "orders", "dry_run": true}); st != 400 || body["code"] != "invalid" || body["field"] != "db" {
			t.Errorf("verify dry run of a bad db name: %d %v, want 400 on field db", st, body)
		}
		if st, body, _ := e.call("POST", "/admin/v1/verify", opToken, map[string]any{"db": "shop", "dry_run": false}); st != 400 || body["field"] != "class" {
			t.Errorf("verify without a class: %d %v, want 400 on field class", st, body)
		}
		st, body, _ = e.call("POST", "/admin/v1/verify", opToken, map[string]any{"db": "shop", "class": "orders"})
		if st != 200 || body["instances"] != 1.0 || body["ok"] != 1.0 {
			t.Errorf("verify: %d %v", st, body)
		}
		if st, _, _ := e.call("POST", "/admin/v1/verify", opToken, map[string]any{"db": "Shop!", "class": "orders"}); st != 400 {
			t.Errorf("verify of a bad db name: %d, want 400", st)
		}
		if st, _, _ := e.call("POST", "/admin/v1/verify", opToken, map[string]any{"db": "shop", "nope": 1}); st != 400 {
			t.Errorf("verify with an unknown field: %d, want 400", st)
		}
	})

	testenv.Step(t, "unknown endpoint", func(t *testing.T) {
		e := e.on(t)
		if st, body, _ := e.call("GET", "/admin/v1/nosuch", readToken, nil); st != 404 || body["code"] != "not_found" {
			t.Errorf("unknown endpoint: %d %v", st, body)
		}
		// A known endpoint under another method: 405 with Allow (it was
		// 404 "no admin endpoint", which sends the operator to the docs
		// for a path that exists).
		for _, c := range []struct{ method, path, allow string }{
			{"GET", "/admin/v1/verify", "POST"},
			{"POST", "/admin/v1/overview", "GET, HEAD"},
			{"DELETE", "/admin/v1/consumers/" + iwGroup + "/pause", "GET, POST, HEAD"},
		} {
			t.Run(c.method+" "+c.path, func(t *testing.T) {
				st, body, h := e.on(t).call(c.method, c.path, opToken, nil)
				if st != http.StatusMethodNotAllowed || body["code"] != "method_not_allowed" || h.Get("Allow") != c.allow {
					t.Errorf("%d %v Allow %q, want 405 with Allow %q", st, body, h.Get("Allow"), c.allow)
				}
			})
		}
	})

	testenv.Step(t, "names that do not exist", func(t *testing.T) {
		e := e.on(t)
		// As the CLI: a group or topic that does not exist is 404 naming
		// the nearest that does, and nothing is set for it.
		// (Before: a pause of any name was set, and a reset answered 503.)
		cmds := e.Config.Kafka.CommandsTopic
		cases := []struct {
			name, path      string
			body            map[string]any
			status          int
			field, mentions string
		}{
			{"pause of an unknown group", "/admin/v1/consumers/nosuch-group/pause", map[string]any{"reason": "typo"}, 404, "group", "allow_new"},
			{"pause of the unprefixed group", "/admin/v1/consumers/instance-worker/pause", map[string]any{"dry_run": true}, 404, "group", iwGroup},
			{"resume of an unknown group", "/admin/v1/consumers/nosuch-group/resume", map[string]any{}, 404, "group", "nosuch-group"},
			{"reset of the unprefixed group", "/admin/v1/consumers/instance-worker/reset", map[string]any{"to": "earliest", "dry_run": true}, 404, "group", iwGroup},
			{"reset of a mistyped topic", "/admin/v1/consumers/" + iwGroup + "/reset", map[string]any{"to": "earliest", "topic": strings.TrimSuffix(cmds, "s"), "dry_run": true}, 404, "topic", cmds},
			{"reset to a bad target", "/admin/v1/consumers/" + iwGroup + "/reset", map[string]any{"to": "yesterday", "dry_run": true}, 400, "to", "yesterday"},
			{"pause of a new group with allow_new", "/admin/v1/consumers/new-group/pause", map[string]any{"allow_new": true}, 200, "", ""},
			{"pause again of a flagged group, without allow_new", "/admin/v1/consumers/new-group/pause", map[string]any{}, 200, "", ""},
			{"resume of a flagged group", "/admin/v1/consumers/new-group/resume", map[string]any{}, 200, "", ""},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				st, body, h := e.on(t).call("POST", c.path, opToken, c.body)
				if st != c.status {
					t.Fatalf("%d %v, want %d", st, body, c.status)
				}
				if st == 200 {
					return
				}
				if h.Get("Content-Type") != "application/problem+json" || body["field"] != c.field {
					t.Errorf("%v (%s), want field %q", body, h.Get("Content-Type"), c.field)
				}
				if d, _ := body["detail"].(string); !strings.Contains(d, c.mentions) {
					t.Errorf("detail %q does not mention %q", d, c.mentions)
				}
			})
		}
		if st, body, _ := e.call("GET", "/admin/v1/consumers/nosuch-group/pause", readToken, nil); st != 200 || body["paused"] != false || body["changed_at"] != nil {
			t.Errorf("a refused pause left a flag: %d %v", st, body)
		}
	})

	testenv.Step(t, "audit log", func(t *testing.T) {
		e := e.on(t)
		// The audit log: every action above, newest first, with role and dry run.
		recs := e.audit(t)
		checkAudit(t, recs, []auditWant{
			{"relay.checkpoint.set", "read", "forbidden", true, 1},
			{"verify", "read", "forbidden", true, 1},
			{"relay.checkpoint.set", "operator", "ok", true, 1},
			{"relay.checkpoint.set", "operator", "ok", false, 1},
			{"relay.checkpoint.set", "operator", "unsafe", false, 1},
			{"relay.checkpoint.set", "operator", "invalid", false, 1},
			{"relay.parked.drop", "operator", "not_found", true, 1},
			{"consumer.reset", "operator", "ok", true, 1},
			{"consumer.reset", "operator", "conflict", false, 1},
			{"dlq.redrive", "operator", "ok", true, 1},
			{"dlq.redrive", "operator", "ok", false, 2},
			{"dlq.drop", "operator", "ok", true, 1},
			{"dlq.drop", "operator", "ok", false, 1},
			{"projection.rebuild", "operator", "ok", false, 1},
			{"projection.rebuild", "operator", "unsafe", true, 1},
			{"verify", "operator", "ok", true, 2},
			{"verify", "operator", "invalid", true, 3},
		})
		if len(recs) > 0 && !strings.Contains(string(recs[0].Detail), "request") {
			t.Errorf("audit detail: %s", recs[0].Detail)
		}
	})
}

// audit reads the audit log through the API.
func (e *env) audit(t *testing.T) []admin.AuditRecord {
	req, _ := http.NewRequest("GET", e.APIURL+"/admin/v1/audit?limit=1000", nil)
	req.Header.Set("Authorization", "Bearer "+readToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var recs []admin.AuditRecord
	if err := json.NewDecoder(resp.Body).Decode(&recs); err != nil {
		t.Fatal(err)
	}
	return recs
}

// on is e for the step t of a test script: its calls fail t.
func (e *env) on(t *testing.T) *env { return &env{Env: e.Env, t: t} }

// auditWant is how many audit records an action leaves, by role, outcome
// and dry run (who is admin:<role>).
type auditWant struct {
	action, role, outcome string
	dryRun                bool
	want                  int
}

// checkAudit checks the audit records recs against each want.
func checkAudit(t *testing.T, recs []admin.AuditRecord, wants []auditWant) {
	t.Helper()
	for _, c := range wants {
		n := 0
		for _, r := range recs {
			if r.Action == c.action && r.Role == c.role && r.Outcome == c.outcome && r.DryRun == c.dryRun && r.Who == "admin:"+c.role {
				n++
			}
		}
		if n != c.want {
			t.Errorf("audit records %s by %s, outcome %s, dry run %t: %d, want %d", c.action, c.role, c.outcome, c.dryRun, n, c.want)
		}
	}
}
