package instanceworker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore/backend"
	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/readmodel"
)

// esRequests counts the requests an Elasticsearch server answers, by
// method and endpoint (the path's last _segment).
type esRequests struct {
	h  http.Handler
	mu sync.Mutex
	n  map[string]int
}

func (c *esRequests) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	if i := strings.LastIndex(p, "/_"); i >= 0 {
		p = p[i:]
	}
	c.mu.Lock()
	c.n[r.Method+" "+p]++
	c.mu.Unlock()
	c.h.ServeHTTP(w, r)
}

func (c *esRequests) total() (n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, v := range c.n {
		n += v
	}
	return n
}

// TestWorkPerCommand pins what the instance worker's commands cost (issue
// 32: counted, not timed): its Postgres round trips (registry and store on
// one pool) and Elasticsearch requests are per round — one claim, one
// _mget, the group commits of the round's appends, one _bulk, one mark
// done — never per command. 400 commands (100 instances, a create and
// three updates each, which the sequence guard spreads over at least four
// rounds) cost a few dozen of each at d2453f7 and now; one query or
// request more per command would cost 400.
func TestWorkPerCommand(t *testing.T) {
	e := newEnv(t, 4)
	var all []cmd
	for i := range 100 {
		id := fmt.Sprintf("w%d", i)
		all = append(all, e.appendCmd(instanceworker.CreateInstance, "work", "items", id, create("work", "items", strp(id), map[string]any{"v": 0})))
		for v := 1; v <= 3; v++ {
			all = append(all, e.appendCmd(instanceworker.UpdateInstance, "work", "items", id, map[string]any{"data": map[string]any{"v": v}}))
		}
	}
	e.publish(all...)
	es := &esRequests{h: e.es, n: map[string]int{}}
	ests := httptest.NewServer(es)
	t.Cleanup(ests.Close)
	cfg := e.config(map[string]string{"ELASTICSEARCH_URLS": ests.URL})
	var trips testenv.RoundTrips
	pool := testenv.TracedPool(t, cfg.Postgres.URL.Value(), &trips)
	bucket, err := backend.Open(context.Background(), cfg.EventStore)
	if err != nil {
		t.Fatal(err)
	}
	store, err := eventstore.New(cfg.EventStore, eventstore.Deps{Pool: pool, Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	esc, err := readmodel.NewClient(cfg.Elasticsearch)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := instanceworker.New(cfg.InstanceWorker(), instanceworker.Deps{Pool: pool, Store: store, ES: esc,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	stop := testenv.RunInBackground(t, "worker", svc.Run, func() { _ = store.Close() })
	testenv.WaitFor(t, 2*time.Minute, "every command done", func() bool { return e.allDone(all...) })
	stop()
	n := len(all)
	pg, req := trips.N(), es.total()
	es.mu.Lock()
	t.Logf("%d commands: %d Postgres round trips, %d Elasticsearch requests %v", n, pg, req, es.n)
	bulks, mgets := es.n["POST /_bulk"], es.n["POST /_mget"]
	es.mu.Unlock()
	if bulks < 4 || mgets != bulks {
		t.Errorf("%d _bulk and %d _mget requests, want one of each per round (at least 4 rounds)", bulks, mgets)
	}
	// A round costs a claim, a mark done and the store's group commits of
	// its appends (two round trips each); the start-up, the pause flag
	// and the topics a few more. n/4 leaves room for rounds of a few
	// commands each and fails at one query per command.
	if pg < int64(bulks) {
		// at least a claim per round: a counter that counts nothing would
		// pass the bound below
		t.Errorf("%d rounds counted %d Postgres round trips: the tracer does not count", bulks, pg)
	}
	if limit := int64(n / 4); pg > limit {
		t.Errorf("%d commands took %d Postgres round trips, want at most %d: a query per command", n, pg, limit)
	}
	if limit := n / 4; req > limit {
		t.Errorf("%d commands took %d Elasticsearch requests, want at most %d: a request per command", n, req, limit)
	}
}
