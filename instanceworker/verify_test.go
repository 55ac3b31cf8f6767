package instanceworker_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/elastic/go-elasticsearch/v8"
	"github.com/google/uuid"

	"github.com/sluicehq/sluice/esserver"
	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/instanceworker/instanceworkertest"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/pipeline/sluiceconfig"
	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/shared/envelope"
)

// verifyFixture is a file-backend event store on a fresh database and an
// in-process Elasticsearch with the shop instances index
// (instanceworkertest.Verify).
type verifyFixture struct {
	v  *instanceworkertest.Verify
	st *eventstore.Store
	es *elasticsearch.Client
	n  readmodel.Names
	// prefix is ELASTICSEARCH_INDEX_PREFIX.
	prefix string
}

func newVerifyFixture(t *testing.T) *verifyFixture {
	t.Helper()
	return newVerifyFixtureShards(t, 1)
}

// newVerifyFixtureShards is newVerifyFixture on a store of shards shards.
func newVerifyFixtureShards(t *testing.T, shards int) *verifyFixture {
	t.Helper()
	_, pool := testenv.NewMigratedDatabase(t)
	ts := httptest.NewServer(esserver.New())
	t.Cleanup(ts.Close)
	cfg, err := sluiceconfig.Load(map[string]string{"EVENT_STORE_BACKEND": "file", "EVENT_STORE_FILE_DIR": t.TempDir(), "ELASTICSEARCH_URLS": ts.URL,
		"EVENT_STORE_SHARDS": strconv.Itoa(shards)})
	if err != nil {
		t.Fatal(err)
	}
	v := instanceworkertest.OpenVerify(t, pool, cfg.EventStore, cfg.Elasticsearch)
	return &verifyFixture{v: v, st: v.Store, es: v.ES, n: v.Names, prefix: cfg.Elasticsearch.IndexPrefix}
}

func (f *verifyFixture) event(t *testing.T, kind envelope.Kind, typ, aggID, data string) envelope.Envelope {
	t.Helper()
	return f.v.Event(t, kind, typ, aggID, data)
}

func (f *verifyFixture) doc(t *testing.T, class, id string, e envelope.Envelope, deleted bool, state string) {
	t.Helper()
	f.v.Doc(t, class, id, e, deleted, state)
}

// Verify classifies every kind of difference between the event store and
// the instance documents, counts them, reports progress over the class's
// aggregates, and keeps other classes and dbs (and LIKE metacharacters in
// the class name) out of the report.
func TestVerify(t *testing.T) {
	f := newVerifyFixture(t)
	ctx := context.Background()
	dom := envelope.KindDomain
	e := f.event(t, dom, "INSTANCE_CREATED", "shop:orders:ok1", `{"n":1,"tags":["a"]}`)
	f.doc(t, "orders", "ok1", e, false, `{"tags":["a"],"n":1}`) // ok: key order does not matter
	f.event(t, dom, "INSTANCE_CREATED", "shop:orders:gone", `{"n":1}`)
	e = f.event(t, dom, "INSTANCE_DELETED", "shop:orders:gone", `{}`)
	f.doc(t, "orders", "gone", e, true, `{}`)                              // ok: tombstone
	f.event(t, dom, "INSTANCE_CREATED", "shop:orders:missing1", `{"n":1}`) // missing
	e = f.event(t, dom, "INSTANCE_CREATED", "shop:orders:stale1", `{"n":1}`)
	f.doc(t, "orders", "stale1", e, false, `{"n":1}`)
	f.event(t, dom, "INSTANCE_UPDATED", "shop:orders:stale1", `{"n":2}`) // stale
	e = f.event(t, dom, "INSTANCE_CREATED", "shop:orders:statediff", `{"n":1}`)
	f.doc(t, "orders", "statediff", e, false, `{"n":2}`) // mismatch
	e = f.event(t, dom, "INSTANCE_CREATED", "shop:orders:ahead", `{"n":1}`)
	e.SequenceNumber = 5
	f.doc(t, "orders", "ahead", e, false, `{"n":1}`)                                                                       // mismatch: ahead
	f.event(t, envelope.KindCommand, "CREATE_INSTANCE", "shop:orders:cmdonly", `{"db":"shop","class":"orders","data":{}}`) // no instance
	f.doc(t, "orders", "extra1", envelope.Envelope{SequenceNumber: 3, EventID: uuid.NewString()}, false, `{}`)             // extra
	e = f.event(t, dom, "INSTANCE_CREATED", "shop:users:u1", `{"name":"x"}`)
	f.doc(t, "users", "u1", e, false, `{"name":"x"}`)
	f.event(t, dom, "INSTANCE_CREATED", "shopx:orders:1", `{"n":1}`)

	var lastDone, lastTotal int64
	rep, err := instanceworker.Verify(ctx, instanceworker.VerifyOptions{Store: f.st, ES: f.es, IndexPrefix: f.prefix, DB: "shop", Class: "orders",
		Progress: func(done, total int64) { lastDone, lastTotal = done, total }})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"missing1": instanceworker.VerifyMissing, "stale1": instanceworker.VerifyStale,
		"statediff": instanceworker.VerifyMismatch, "ahead": instanceworker.VerifyMismatch, "extra1": instanceworker.VerifyExtra}
	got := map[string]string{}
	for _, p := range rep.Problems {
		got[p.InstanceID] = p.Status
	}
	if rep.Instances != 7 || rep.OK != 2 || rep.Missing != 1 || rep.Stale != 1 || rep.Extra != 1 || rep.Mismatch != 2 || len(got) != len(want) {
		t.Fatalf("report %+v", rep)
	}
	for id, st := range want {
		if got[id] != st {
			t.Errorf("%s: %q, want %q", id, got[id], st)
		}
	}
	if lastTotal != 7 || lastDone != 7 { // 7 aggregates of shop:orders: (cmdonly too, not extra1)
		t.Errorf("progress ended at %d of %d, want 7 of 7", lastDone, lastTotal)
	}
	if rep.Summary() != "verify: 7 instances, 2 ok, 1 missing, 1 stale, 1 extra, 2 mismatched" {
		t.Errorf("summary %q", rep.Summary())
	}

	for _, tc := range []struct {
		class     string
		instances int
	}{{"users", 1}, {"ord_rs", 0}} {
		rep, err := instanceworker.Verify(ctx, instanceworker.VerifyOptions{Store: f.st, ES: f.es, IndexPrefix: f.prefix, DB: "shop", Class: tc.class})
		if err != nil || rep.Instances != tc.instances || len(rep.Problems) != 0 {
			t.Errorf("verify %s: %+v %v, want %d instances, no problems", tc.class, rep, err, tc.instances)
		}
	}
	if _, err := instanceworker.Verify(ctx, instanceworker.VerifyOptions{Store: f.st, ES: f.es, DB: "Shop!", Class: "orders"}); err == nil {
		t.Error("a bad db name: no error")
	}
}

// The index version selects what verify compares: 0 the write alias (the
// live version), N the concrete index of version N, a negative one is
// refused. (Before, any version was accepted and the write alias read.)
func TestVerifyIndexVersion(t *testing.T) {
	f := newVerifyFixture(t)
	ctx := context.Background()
	e := f.event(t, envelope.KindDomain, "INSTANCE_CREATED", "shop:orders:a", `{"n":1}`)
	f.doc(t, "orders", "a", e, false, `{"n":1}`)
	v2 := readmodel.InstanceNames(f.prefix, "shop", 2).Index
	res, err := f.es.Indices.Create(v2, f.es.Indices.Create.WithContext(ctx))
	if err != nil || res.IsError() {
		t.Fatalf("create %s: %v %v", v2, res, err)
	}
	res.Body.Close()
	cases := []struct {
		name          string
		version       int
		index         string
		ok, missing   int
		wantErrFields string
	}{
		{"the live version through the write alias", 0, f.n.WriteAlias, 1, 0, ""},
		{"version 1, the live one", 1, readmodel.InstanceNames(f.prefix, "shop", 1).Index, 1, 0, ""},
		{"version 2, an empty index", 2, v2, 0, 1, ""},
		{"a negative version", -1, "", 0, 0, "index_version"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep, err := instanceworker.Verify(ctx, instanceworker.VerifyOptions{Store: f.st, ES: f.es, IndexPrefix: f.prefix, DB: "shop", Class: "orders", IndexVersion: c.version})
			if c.wantErrFields != "" {
				if err == nil || !strings.HasPrefix(err.Error(), c.wantErrFields+":") {
					t.Fatalf("err %v, want one naming %s", err, c.wantErrFields)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if rep.Index != c.index || rep.OK != c.ok || rep.Missing != c.missing {
				t.Errorf("index %s, %d ok, %d missing; want %s, %d, %d", rep.Index, rep.OK, rep.Missing, c.index, c.ok, c.missing)
			}
		})
	}
}

// On a store of four shards verify reads every shard: the instances of a
// class spread over all of them, and a difference in any shard is found.
func TestVerifyEveryShard(t *testing.T) {
	f := newVerifyFixtureShards(t, 4)
	if f.st.Shards() != 4 {
		t.Fatalf("the store has %d shards", f.st.Shards())
	}
	dom := envelope.KindDomain
	shards := map[int]bool{}
	missing := map[int]string{}
	for i := range 16 {
		id := fmt.Sprintf("i%d", i)
		agg := "shop:orders:" + id
		sh := eventstore.ShardOf(envelope.AggregateTypeInstance, agg, 4)
		shards[sh] = true
		e := f.event(t, dom, "INSTANCE_CREATED", agg, `{"n":1}`)
		if _, ok := missing[sh]; !ok {
			missing[sh] = id // one instance of each shard has no document
			continue
		}
		f.doc(t, "orders", id, e, false, `{"n":1}`)
	}
	if len(shards) != 4 {
		t.Fatalf("16 instances in %d shards", len(shards))
	}
	rep, err := instanceworker.Verify(context.Background(), instanceworker.VerifyOptions{Store: f.st, ES: f.es, IndexPrefix: f.prefix, DB: "shop", Class: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Instances != 16 || rep.OK != 12 || rep.Missing != 4 {
		t.Fatalf("report %+v", rep)
	}
	for _, p := range rep.Problems {
		if p.Status != instanceworker.VerifyMissing || missing[eventstore.ShardOf(envelope.AggregateTypeInstance, "shop:orders:"+p.InstanceID, 4)] != p.InstanceID {
			t.Fatalf("problem %+v", p)
		}
	}
}
