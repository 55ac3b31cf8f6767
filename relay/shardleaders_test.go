package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/eventstoretest"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/observability"
)

// probe answers what /livez or /readyz of h says about check.
func probe(t *testing.T, h *observability.Health, path, check string) string {
	t.Helper()
	rec := httptest.NewRecorder()
	observability.Handler(prometheus.NewRegistry(), h).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	var rep observability.Report
	if err := json.Unmarshal(rec.Body.Bytes(), &rep); err != nil {
		t.Fatalf("%s: %v (%s)", path, err, rec.Body.String())
	}
	if rep.Checks[check] != "ok" && rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("%s answered %d with a failing check: %+v", path, rec.Code, rep)
	}
	return rep.Checks[check]
}

// A shard's leader that is stuck makes liveness and readiness say so, by
// its shard, while the replica's other leaders keep turning: over a store
// of four shards one replica leads every shard; shard 2's leader is held
// before a cycle; the heartbeats' clock moves past their limit; /livez's
// relay-loop check then names shard 2 alone (the other leaders beat again
// at their next cycle) and /readyz's relay check says shard 2 is stuck.
// Released, it is live again. (All the leaders of a replica beat one
// heartbeat before: any busy shard kept liveness green.)
func TestStuckShardLeaderNamedByLiveness(t *testing.T) {
	const shards, stuck = 4, 2
	e := newShardedEnv(t, shards, 30*time.Second)
	var skew atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	var hold atomic.Bool
	held := make(chan struct{}, 1)
	release := make(chan struct{})
	a := startReplica(t, e, "replica-a", withHeartbeatClock(clock), withBeforeCycle(func(ctx context.Context, shard int) {
		if shard != stuck || !hold.Load() {
			return
		}
		select {
		case held <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
	}))
	testenv.WaitFor(t, time.Minute, "one replica leading every shard", func() bool { ok, _ := balanced(t, e, shards, a); return ok })
	if got := probe(t, a.health, "/livez", "relay-loop"); got != "ok" {
		t.Fatalf("relay-loop before anything is stuck: %s", got)
	}
	hold.Store(true)
	select {
	case <-held:
	case <-time.After(time.Minute):
		t.Fatal("shard 2's leader did not reach a cycle within a minute")
	}
	skew.Store(int64(a.r.liveAge + time.Minute))
	var live string
	testenv.WaitFor(t, time.Minute, "liveness naming shard 2 alone", func() bool {
		live = probe(t, a.health, "/livez", "relay-loop")
		return strings.HasPrefix(live, fmt.Sprintf("shard %d: loop heartbeat is", stuck)) && !strings.Contains(live, "\n")
	})
	t.Logf("relay-loop: %s", live)
	if ready := probe(t, a.health, "/readyz", "relay"); !strings.Contains(ready, fmt.Sprintf("shard %d: stuck: loop heartbeat", stuck)) {
		t.Errorf("readiness %q does not say shard %d is stuck", ready, stuck)
	}
	close(release)
	testenv.WaitFor(t, time.Minute, "liveness green once shard 2's leader turns again", func() bool {
		return probe(t, a.health, "/livez", "relay-loop") == "ok"
	})
}

// openClients counts the Kafka clients a relay opened and has not closed.
type openClients struct {
	mu   sync.Mutex
	open map[*kgo.Client]bool
}

func (c *openClients) OnNewClient(cl *kgo.Client) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.open[cl] = true
}

func (c *openClients) OnClientClosed(cl *kgo.Client) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.open, cl)
}

func (c *openClients) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.open)
}

// A replica keeps open only the Kafka producers of the shards it leads: a
// shard's two producers (the pipeline's and the one for retries alone) are
// opened when its leadership starts and closed when it ends, after the
// handover (batches acknowledged, final checkpoint, lease released).
// Replica A leads all four shards (eight producers), B joins and A releases
// two of them (four left open), B stops and A takes them again (eight),
// publishing throughout. (A shard's producers stayed open once a replica
// had led it: eight after the release.)
func TestShardProducersClosedWithTheLeadership(t *testing.T) {
	const shards = 4
	e := newShardedEnv(t, shards, 30*time.Second)
	clients := &openClients{open: map[*kgo.Client]bool{}}
	a := startReplica(t, e, "replica-a", WithKafkaOpts(kgo.WithHooks(clients)))
	testenv.WaitFor(t, time.Minute, "one replica leading every shard", func() bool { ok, _ := balanced(t, e, shards, a); return ok })
	stored := appendAll(t, e.store, 8, mixedEnvelopes(200, 40, ""))
	testenv.WaitFor(t, time.Minute, "every shard published to its head", func() bool { return e.allPublished(t) })
	if n := clients.count(); n != 2*shards {
		t.Fatalf("%d producers open while leading %d shards, want %d", n, shards, 2*shards)
	}

	b := startReplica(t, e, "replica-b")
	testenv.WaitFor(t, 2*time.Minute, "two replicas sharing the shards", func() bool { ok, _ := balanced(t, e, shards, a, b); return ok })
	testenv.WaitFor(t, time.Minute, "replica-a's producers of the released shards closed", func() bool {
		return clients.count() == 2*len(a.r.Held())
	})
	for k, v := range appendAll(t, e.store, 8, mixedEnvelopes(200, 40, "")) {
		stored[k] = v
	}
	testenv.WaitFor(t, time.Minute, "every shard published to its head", func() bool { return e.allPublished(t) })

	b.stop()
	testenv.WaitFor(t, 2*time.Minute, "replica-a leading every shard again", func() bool { ok, _ := balanced(t, e, shards, a); return ok })
	for k, v := range appendAll(t, e.store, 8, mixedEnvelopes(200, 40, "")) {
		stored[k] = v
	}
	testenv.WaitFor(t, time.Minute, "every shard published to its head", func() bool { return e.allPublished(t) })
	if n := clients.count(); n != 2*shards {
		t.Errorf("%d producers open while leading %d shards again, want %d", n, shards, 2*shards)
	}
	exactlyOnce(t, stored, verify(t, e, stored, e.consumeAll(t, e.commandsTopic(), e.eventsTopic()), ""))
}

// The store-wide repair of hole rule 3 runs once for the leaders of a
// process, not once per shard: a reservation older than the append
// timeout (a writer that died before its segment) in each of four shards,
// events committed after them, one replica leading every shard. Each
// shard's leader needs a repair; the first one run is held until all four
// asked, so they ask at once; one Store.Repair runs, abandons the four
// reservations, and every shard publishes past its gap. (Each leader ran
// its own: four.)
func TestRepairOncePerProcess(t *testing.T) {
	const shards = 4
	e := newShardedEnv(t, shards, 30*time.Second)
	ctx := ctxT(t, 2*time.Minute)
	ids := make([]string, shards)
	for i, found := 0, 0; found < shards; i++ {
		id := fmt.Sprintf("stale-%d", i)
		if sh := eventstore.ShardOf("Order", id, shards); ids[sh] == "" {
			ids[sh] = id
			found++
		}
	}
	for _, id := range ids {
		p, err := envelope.Prepare(command(id, 0), envelope.DefaultLimits(), time.Now)
		if err != nil {
			t.Fatal(err)
		}
		h, err := envelope.CanonicalHash(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := eventstoretest.Forge(ctx, e.pool, eventstoretest.Forged{EventID: p.EventID, Kind: p.Kind, AggregateType: p.AggregateType,
			AggregateID: p.AggregateID, State: eventstore.StateReserved, CanonicalHash: h[:], OccurredAt: p.OccurredAt.Time(), Shards: shards}); err != nil {
			t.Fatal(err)
		}
	}
	if err := eventstoretest.AgeReservations(ctx, e.pool, time.Hour); err != nil {
		t.Fatal(err)
	}
	stored := appendAll(t, e.store, 8, mixedEnvelopes(200, 40, ""))

	var mu sync.Mutex
	wanted := map[int]bool{}
	all := make(chan struct{})
	runs := 0
	startReplica(t, e, "replica-a", withRepairHook(func(shard int, running bool) {
		mu.Lock()
		if !running {
			if !wanted[shard] {
				wanted[shard] = true
				if len(wanted) == shards {
					close(all)
				}
			}
			mu.Unlock()
			return
		}
		runs++
		mu.Unlock()
		select { // every shard's leader asks while the first repair is held
		case <-all:
		case <-time.After(time.Minute):
			t.Error("not every shard's leader asked for a repair within a minute")
		}
	}))
	testenv.WaitFor(t, time.Minute, "every shard published past its gap to its head", func() bool { return e.allPublished(t) })
	mu.Lock()
	defer mu.Unlock()
	if len(wanted) != shards || runs != 1 {
		t.Errorf("%d shards' leaders needed a repair, %d repairs ran; want %d and 1", len(wanted), runs, shards)
	}
	for _, id := range ids {
		rows, err := eventstoretest.Select(ctx, e.pool, eventstoretest.Filter{AggregateIDs: []string{id}})
		if err != nil || len(rows) != 1 || rows[0].State != eventstore.StateAbandoned {
			t.Errorf("%s's forged reservation: %+v, %v; want abandoned", id, rows, err)
		}
	}
	exactlyOnce(t, stored, verify(t, e, stored, e.consumeAll(t, e.commandsTopic(), e.eventsTopic()), ""))
}
