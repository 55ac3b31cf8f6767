package pipeline_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/internal/archtest"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/migrations"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/registry/registrytest"
	"github.com/sluicehq/sluice/schema"
	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/config"
)

// The Postgres roles on two servers (docs/scale-out.md): the main role
// (DATABASE_URL) and the store role (EVENT_STORE_DATABASE_URL) in two
// databases of server A, the registry role (REGISTRY_DATABASE_URL) on
// server B. Migrating puts each role's tables on its database; the whole
// pipeline (api, relay, instance worker, projection worker) turns commands
// into read-model documents with every row in its role's database and
// nowhere else; and an outage of server B pauses the workers — nothing in a
// dead-letter topic, nothing lost — while the API keeps accepting appends
// and the relay keeps publishing them, and everything catches up, exactly
// once, when B returns.
func TestRolesOnTwoServers(t *testing.T) {
	ctx := context.Background()
	serverB := testenv.NewPGServer(t)
	urls := map[migrations.Role]string{
		migrations.RoleMain:     testenv.NewDatabase(t),
		migrations.RoleStore:    testenv.NewDatabase(t),
		migrations.RoleRegistry: serverB.NewDatabase(t),
	}
	pg := migrations.PostgresConfig{URL: config.Secret(urls[migrations.RoleMain]),
		StoreURL: config.Secret(urls[migrations.RoleStore]), RegistryURL: config.Secret(urls[migrations.RoleRegistry])}
	// The test's own pools, one per database, to look at each from outside.
	pools := map[migrations.Role]*pgxpool.Pool{}
	for r, u := range urls {
		p, err := pgxpool.New(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		pools[r] = p
	}
	objects, err := archtest.SchemaObjects("../migrations")
	if err != nil {
		t.Fatal(err)
	}
	// The rows the migrations themselves write (log_head's one row), per
	// database: what a database holds beyond them is the pipeline's.
	migrated := map[migrations.Role]map[string]int64{}

	testenv.Step(t, "migrate up creates each role's tables on its database", func(t *testing.T) {
		res, err := migrations.UpDatabases(ctx, pg, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != 3 {
			t.Fatalf("migrated %d databases, want 3 (one per role)", len(res))
		}
		for _, db := range res {
			if len(db.Roles) != 1 || db.URL != urls[db.Roles[0]] || len(db.Applied) == 0 {
				t.Fatalf("database of %s: roles %v, %d migrations applied", db.Vars(), db.Roles, len(db.Applied))
			}
		}
		// Every object the migrations leave (some early ones are dropped by
		// later migrations) is on its role's database.
		found := 0
		for _, o := range objects {
			role := archtest.RoleOf(o)
			anywhere := false
			for _, pool := range pools {
				anywhere = anywhere || exists(t, pool, o)
			}
			if !anywhere {
				continue
			}
			found++
			if !exists(t, pools[role], o) {
				t.Errorf("sluice.%s (role %s) is missing on the %s database", o, role, role)
			}
		}
		if found < 8 {
			t.Fatalf("found %d of the migrations' objects in the databases: not migrated", found)
		}
		for r, pool := range pools {
			migrated[r] = rowCounts(t, pool)
		}
		again, err := migrations.UpDatabases(ctx, pg, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, db := range again {
			if len(db.Applied) != 0 {
				t.Errorf("a second migrate up applied %d on %s", len(db.Applied), db.Vars())
			}
		}
	})

	// A schema registered on the main database: the API must read it there.
	const ceType = "com.example.order.placed"
	if _, err := schema.New(pools[migrations.RoleMain], schema.Config{}, nil).Register(ctx, ceType,
		[]byte(`{"type":"object","properties":{"total":{"type":"number"}},"required":["total"]}`), schema.RegisterOptions{}); err != nil {
		t.Fatal(err)
	}
	e := pipelinetest.Start(t, pipelinetest.Options{Env: map[string]string{
		"DATABASE_URL": urls[migrations.RoleMain], "EVENT_STORE_DATABASE_URL": urls[migrations.RoleStore],
		"REGISTRY_DATABASE_URL": urls[migrations.RoleRegistry], "EVENT_SCHEMA_REFRESH_INTERVAL": "50ms",
	}})
	p := &split{t: t, e: e, client: &http.Client{Timeout: 10 * time.Second}, pools: pools, objects: objects, migrated: migrated}
	historyHandler := projectionworker.HandlerName(projectionworker.History{}.Name(), projectionworker.History{}.Version())

	testenv.Step(t, "commands become documents, every row in its role's database", func(t *testing.T) {
		// The API validates against the schema of the main database.
		pipelinetest.WaitFor(t, 20*time.Second, "the API to refuse data its schema refuses", func() bool {
			st, body := p.post("/v1/streams/Order/ce-1/events", "application/cloudevents+json",
				`{"specversion":"1.0","id":"x0","source":"/shop","type":"`+ceType+`","data":{"total":"ten"}}`)
			return st == http.StatusUnprocessableEntity && strings.Contains(body, "/total")
		})
		if st, body := p.post("/v1/streams/Order/ce-1/events", "application/cloudevents+json",
			`{"specversion":"1.0","id":"x1","source":"/shop","type":"`+ceType+`","data":{"total":10}}`); st != http.StatusCreated {
			t.Fatalf("a valid CloudEvent: %d %s", st, body)
		}
		for i := range 3 {
			p.create(fmt.Sprintf("before-%d", i))
		}
		p.waitDocuments(3)
		p.checkPlacement()
		for role, tables := range map[migrations.Role][]string{
			migrations.RoleStore:    {"sequences", "appends", "relay_leases"},
			migrations.RoleRegistry: {"processed_events"},
			migrations.RoleMain:     {"event_schemas", "event_schema_types"},
		} {
			rows := rowCounts(t, pools[role])
			for _, tb := range tables {
				if rows[tb] <= migrated[role][tb] {
					t.Errorf("sluice.%s is empty on the %s database, which holds it", tb, role)
				}
			}
		}
	})

	testenv.Step(t, "registry server down: workers pause, the API and the relay go on", func(t *testing.T) {
		commandsBefore := p.endOffset(e.Config.Kafka.CommandsTopic)
		serverB.Stop()
		for i := range 3 {
			p.create(fmt.Sprintf("during-%d", i)) // accepted: the store is on server A
		}
		// A redelivered domain event gives the projection worker a record
		// to (not) process during the outage.
		p.redeliverOneEvent()
		pipelinetest.WaitFor(t, 60*time.Second, "the relay to publish the new commands", func() bool {
			return p.endOffset(e.Config.Kafka.CommandsTopic) >= commandsBefore+3
		})
		for _, h := range []string{instanceworker.HandlerName, historyHandler} {
			pipelinetest.WaitFor(t, 60*time.Second, h+" paused on the registry outage", func() bool {
				return p.metric("sluice_worker_registry_outage", h) == 1
			})
		}
		// Readiness per pool: the workers' registry checks are red, the
		// checks of the main and store databases are not.
		rep, ok := e.Deps.Health.Readiness(ctx)
		if ok {
			t.Fatalf("ready during the registry outage: %v", rep.Checks)
		}
		t.Logf("readiness during the outage: %v", rep.Checks)
		for name, state := range rep.Checks {
			wantRed := strings.HasSuffix(name, ":registry") || strings.HasSuffix(name, ":postgres")
			if wantRed != (state != "ok") {
				t.Errorf("readiness %q = %q during the registry outage", name, state)
			}
		}
		// The pause had its chance (the gauges above) and held: nothing
		// applied, nothing dead-lettered.
		if n := p.count("sluice_shop_instances"); n != 3 {
			t.Errorf("%d instance documents during the outage, want the 3 from before", n)
		}
		if n := p.endOffset(e.Config.Kafka.CommandsDLQTopic) + p.endOffset(e.Config.Kafka.EventsDLQTopic); n != 0 {
			t.Errorf("%d dead letters during the outage", n)
		}
	})

	testenv.Step(t, "registry server back: everything catches up, exactly once", func(t *testing.T) {
		serverB.Start()
		pools[migrations.RoleRegistry].Reset() // the test's own connections died with the server
		p.waitDocuments(6)
		for _, h := range []string{instanceworker.HandlerName, historyHandler} {
			pipelinetest.WaitFor(t, 60*time.Second, h+" resumed", func() bool {
				return p.metric("sluice_worker_registry_outage", h) == 0
			})
		}
		if n := p.endOffset(e.Config.Kafka.CommandsDLQTopic) + p.endOffset(e.Config.Kafka.EventsDLQTopic); n != 0 {
			t.Errorf("%d dead letters", n)
		}
		// Exactly one finished registry row per command and per event the
		// projection worker received (6 domain events and the CloudEvent),
		// on server B; the API reads command statuses there.
		for h, want := range map[string]int{instanceworker.HandlerName: 6, historyHandler: 7} {
			rows, err := registrytest.Rows(ctx, pools[migrations.RoleRegistry], h)
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != want || slices.ContainsFunc(rows, func(r claim.Row) bool { return r.Status != claim.StatusDone }) {
				t.Errorf("%s: %d rows %v, want %d done", h, len(rows), rows, want)
			}
		}
		if st := p.commandStatus(p.commands[len(p.commands)-1]); st != api.StatusApplied {
			t.Errorf("status of a command sent during the outage: %q, want %q", st, api.StatusApplied)
		}
		p.checkPlacement()
	})
}

// split drives the pipeline of TestRolesOnTwoServers.
type split struct {
	t        *testing.T
	e        *pipelinetest.Env
	client   *http.Client
	commands []string // command ids, in order
	// pools are the test's own, one per role's database; objects the
	// migrations' objects; migrated the rows each table held right after
	// migrating.
	pools    map[migrations.Role]*pgxpool.Pool
	objects  []string
	migrated map[migrations.Role]map[string]int64
}

func (p *split) post(path, contentType, body string) (int, string) {
	p.t.Helper()
	resp, err := p.client.Post(p.e.APIURL+path, contentType, strings.NewReader(body))
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// create creates instance id through the API; it must be accepted.
func (p *split) create(id string) {
	p.t.Helper()
	st, body := p.post("/v1/dbs/shop/classes/orders/instances", "application/json", `{"instance_id":"`+id+`","data":{"total":1}}`)
	if st != http.StatusAccepted {
		p.t.Fatalf("create %s: %d %s", id, st, body)
	}
	var ack struct {
		CommandID string `json:"command_id"`
	}
	if err := json.Unmarshal([]byte(body), &ack); err != nil || ack.CommandID == "" {
		p.t.Fatalf("create %s: no command_id in %s (%v)", id, body, err)
	}
	p.commands = append(p.commands, ack.CommandID)
}

func (p *split) commandStatus(id string) string {
	p.t.Helper()
	resp, err := p.client.Get(p.e.APIURL + "/v1/commands/" + id)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Status string `json:"status"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		p.t.Fatalf("status of %s: %d %v", id, resp.StatusCode, err)
	}
	return st.Status
}

// waitDocuments waits for n instance documents and n history documents
// (one domain event per create).
func (p *split) waitDocuments(n int) {
	p.t.Helper()
	for _, index := range []string{"sluice_shop_instances", "sluice_shop_history"} {
		pipelinetest.WaitFor(p.t, 90*time.Second, fmt.Sprintf("%d documents in %s", n, index), func() bool { return p.count(index) == n })
	}
}

// count is the number of documents of index (0 when it does not exist).
func (p *split) count(index string) int {
	p.t.Helper()
	resp, err := p.client.Get(p.e.ESURL + "/" + index + "/_search?size=0")
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return 0
	}
	var r struct {
		Hits struct {
			Total struct {
				Value int `json:"value"`
			} `json:"total"`
		} `json:"hits"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		p.t.Fatalf("search %s: %d %v", index, resp.StatusCode, err)
	}
	return r.Hits.Total.Value
}

// metric is the value of gauge name for handler (-1 when absent).
func (p *split) metric(name, handler string) float64 {
	p.t.Helper()
	mfs, err := p.e.Deps.Metrics.Gather()
	if err != nil {
		p.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "handler" && l.GetValue() == handler {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

// endOffset is the number of records ever written to topic (0 when it
// does not exist).
func (p *split) endOffset(topic string) int64 {
	p.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.e.Kafka.Brokers...))
	if err != nil {
		p.t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		p.t.Fatal(err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil {
			n += o.Offset
		}
	})
	return n
}

// redeliverOneEvent produces a copy of the record of an instance's domain
// event again, as a redelivery would (the record's key is the aggregate's).
func (p *split) redeliverOneEvent() {
	p.t.Helper()
	recs := testenv.ReadTopic(p.t, p.e.Kafka.Brokers, p.e.Config.Kafka.EventsTopic)
	i := slices.IndexFunc(recs, func(r *kgo.Record) bool { return strings.Contains(string(r.Key), "before-") })
	if i < 0 {
		p.t.Fatal("no instance domain event to redeliver")
	}
	r := recs[i]
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.e.Kafka.Brokers...))
	if err != nil {
		p.t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: r.Headers}).FirstErr(); err != nil {
		p.t.Fatal(err)
	}
}

// checkPlacement fails the test for every table that gained rows since
// the migrations in a database that does not hold its role.
func (p *split) checkPlacement() {
	p.t.Helper()
	for dbRole, pool := range p.pools {
		for table, n := range rowCounts(p.t, pool) {
			if n <= p.migrated[dbRole][table] {
				continue
			}
			if !slices.Contains(p.objects, table) {
				p.t.Errorf("the %s database has a table sluice.%s that no migration creates", dbRole, table)
				continue
			}
			if role := archtest.RoleOf(table); role != dbRole {
				p.t.Errorf("sluice.%s (role %s) has %d rows on the %s database (%d after migrating)", table, role, n, dbRole, p.migrated[dbRole][table])
			}
		}
	}
}

// rowCounts counts the rows of every table of schema sluice, without
// naming one (the owners' tables are theirs to name: docs/architecture.md,
// "Table ownership").
func rowCounts(t *testing.T, pool *pgxpool.Pool) map[string]int64 {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
SELECT c.relname, (xpath('/row/n/text()', query_to_xml(format('SELECT count(*) AS n FROM %I.%I', n.nspname, c.relname), false, true, '')))[1]::text::bigint
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'sluice' AND c.relkind IN ('r', 'p')`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		out[name] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// exists reports whether schema object name (a table, sequence or
// function) exists in pool's database.
func exists(t *testing.T, pool *pgxpool.Pool, name string) bool {
	t.Helper()
	var ok bool
	err := pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'sluice' AND c.relname = $1)
		OR EXISTS (SELECT 1 FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'sluice' AND p.proname = $1)`, name).Scan(&ok)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}
