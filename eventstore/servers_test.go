package eventstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/shared/config"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/failure"
)

// twoServers is a store of four shards over two real Postgres servers:
// shards 0-1 on the package's server (e.pool), 2-3 on a second one.
type twoServers struct {
	e      *env
	srvB   *testenv.PGServer
	urlB   string
	poolB  *pgxpool.Pool
	cfg    Config
	shards [][]string // aggregate ids of type Order per shard
}

func newTwoServers(t *testing.T) *twoServers {
	t.Helper()
	e := newEnv(t)
	srvB := testenv.NewPGServer(t)
	urlB, poolB := srvB.NewMigratedDatabase(t)
	cfg := shardedConfig(4)
	cfg.ShardMap = config.Secret("0-1=" + e.url + ",2-3=" + urlB)
	return &twoServers{e: e, srvB: srvB, urlB: urlB, poolB: poolB, cfg: cfg, shards: idsByShard("Order", "srv", 4, 3)}
}

func (ts *twoServers) deps() Deps {
	return Deps{ShardPools: map[string]*pgxpool.Pool{ts.e.url: ts.e.pool, ts.urlB: ts.poolB}, Bucket: ts.e.bucket}
}

func (ts *twoServers) open(t *testing.T) *Store {
	t.Helper()
	s, err := New(ts.cfg, ts.deps())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Every shard's rows, sequences and head live on the server the map gives
// it, and the store reads, pages, notifies, repairs and rebuilds over both
// as over one: appends (alone, mixed, atomic batches, optimistic
// concurrency) of aggregates on both servers, stream reads, the log by
// cursor across both, Heads, the notifications of both, Reindex per
// server; each group commit's segment holds one server's shards only.
func TestStoreOnTwoServers(t *testing.T) {
	ts := newTwoServers(t)
	s := ts.open(t)
	ctx := ctxT(t)
	sub, stop := context.WithCancel(ctx)
	defer stop()
	notes := s.Subscribe(sub)
	var envs []envelope.Envelope
	for sh, ids := range ts.shards {
		for _, id := range ids {
			envs = append(envs, command("Order", id, sh), command("Order", id, sh+10))
		}
	}
	rs := mustAppend(t, s, envs...) // one call: envelopes of both servers

	t.Run("rows on their shard's server", func(t *testing.T) {
		for _, c := range []struct {
			pool   *pgxpool.Pool
			shards []int
		}{{ts.e.pool, []int{0, 1}}, {ts.poolB, []int{2, 3}}} {
			rows := shardRows(t, c.pool)
			if len(rows) != 12 {
				t.Errorf("server of shards %v holds %d rows, want 12", c.shards, len(rows))
			}
			for _, r := range rows {
				if !slices.Contains(c.shards, r.shard) || ShardOf(r.aggType, r.aggID, 4) != r.shard || r.state != StateCommitted {
					t.Errorf("server of shards %v holds %+v", c.shards, r)
				}
				_, n, _, _, err := ParseShardedSegmentKey(r.key)
				if err != nil || !slices.Contains(c.shards, n) {
					t.Errorf("row %+v: segment of shard %d (%v): a segment of another server", r, n, err)
				}
			}
			heads := nextPositions(t, c.pool)
			if len(heads) != 2 || heads[c.shards[0]] != 7 || heads[c.shards[1]] != 7 {
				t.Errorf("server of shards %v: head rows %v, want its two shards at 7", c.shards, heads)
			}
		}
		if got := ts.e.bucket.creates.Load(); got != 2 {
			t.Errorf("%d segments written for one call over two servers, want one per server", got)
		}
	})

	t.Run("stream reads route by aggregate", func(t *testing.T) {
		for sh, ids := range ts.shards {
			evs, err := s.Stream(ctx, "Order", ids[0], 1, 0, "")
			if err != nil || len(evs) != 2 || evs[0].Shard != sh || evs[1].Envelope.SequenceNumber != 2 {
				t.Fatalf("stream of shard %d: %d events, %v", sh, len(evs), err)
			}
			if n, err := s.LastSequence(ctx, "Order", ids[0]); err != nil || n != 2 {
				t.Fatalf("last sequence of shard %d: %d, %v", sh, n, err)
			}
			if ev, err := s.Command(ctx, "Order", ids[0], 2); err != nil || ev.Shard != sh {
				t.Fatalf("command of shard %d: %v", sh, err)
			}
		}
		for _, r := range []Result{rs[0], rs[len(rs)-1]} {
			ev, err := s.ByEventID(ctx, r.Event.Envelope.EventID)
			if err != nil || ev.Envelope.AggregateID != r.Event.Envelope.AggregateID {
				t.Fatalf("by event id: %v", err)
			}
		}
		if _, err := s.ByEventID(ctx, "00000000-0000-4000-8000-000000000000"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("unknown event id: %v, want ErrNotFound", err)
		}
		ids := []string{ts.shards[3][0], ts.shards[0][0], "nobody", ts.shards[2][1]}
		streams, err := s.Streams(ctx, "Order", ids, "")
		if err != nil || len(streams[0]) != 2 || len(streams[1]) != 2 || len(streams[2]) != 0 || len(streams[3]) != 2 || streams[0][0].Shard != 3 {
			t.Fatalf("streams: %v %v", streams, err)
		}
		aggs, err := s.Aggregates(ctx, AggregateQuery{Type: "Order", Limit: 5})
		if err != nil || len(aggs) != 5 || !slices.IsSortedFunc(aggs, func(a, b AggregateInfo) int { return strings.Compare(a.ID, b.ID) }) {
			t.Fatalf("aggregates: %v %v", aggs, err)
		}
		if n, err := s.CountAggregates(ctx, "Order", "srv-"); err != nil || n != 12 {
			t.Fatalf("count: %d %v", n, err)
		}
		if err := s.FindStream(ctx, "Order", ts.shards[2][0]); err != nil {
			t.Fatalf("find stream on server B: %v", err)
		}
	})

	t.Run("batches and concurrency on each server", func(t *testing.T) {
		for _, sh := range []int{1, 2} {
			id := ts.shards[sh][1]
			b1 := command("Order", id, "b1")
			brs, err := s.AppendBatch(ctx, Expectation{Kind: ExpectSequence, Seq: 2}, b1, command("Order", id, "b2"))
			if err != nil || brs[0].Err != nil || brs[1].Err != nil || brs[1].Event.Envelope.SequenceNumber != 4 {
				t.Fatalf("batch on shard %d: %v %s", sh, err, describe(brs[0]))
			}
			stale := command("Order", id, "stale")
			stale.ExpectedSeq = expect(2)
			r, err := s.AppendOne(ctx, stale)
			var ce *ConflictError
			if !errors.As(err, &ce) || ce.ActualSeq != 4 {
				t.Fatalf("stale expected_seq on shard %d: %s, want a *ConflictError at 4", sh, describe(r))
			}
			again, err := s.AppendOne(ctx, b1)
			if err != nil || !again.Duplicate {
				t.Fatalf("idempotent retry on shard %d: %s", sh, describe(again))
			}
		}
	})

	t.Run("the log by cursor across both servers", func(t *testing.T) {
		heads, err := s.Heads(ctx)
		if err != nil || len(heads) != 4 {
			t.Fatalf("heads %v %v", heads, err)
		}
		for i, h := range heads {
			want := int64(6)
			if i == 1 || i == 2 {
				want = 8
			}
			if h.Shard != i || h.Position != want {
				t.Fatalf("heads %v", heads)
			}
		}
		tail, err := s.LogTail(ctx)
		if err != nil || tail.String() != "v1.4.6.8.8.6" {
			t.Fatalf("tail %v %v", tail, err)
		}
		seen := map[string]int{}
		last := map[string]int64{}
		cur := Cursor{}
		for {
			page, err := s.Log(ctx, LogQuery{Cursor: cur, Limit: 5})
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range page.Events {
				seen[ev.Envelope.EventID]++
				k := ev.Envelope.AggregateID
				if ev.Envelope.SequenceNumber <= last[k] {
					t.Fatalf("%s: sequence %d after %d", k, ev.Envelope.SequenceNumber, last[k])
				}
				last[k] = ev.Envelope.SequenceNumber
			}
			if len(page.Events) == 0 {
				if !page.Next.Equal(tail) {
					t.Fatalf("the walk ended at %s, want %s", page.Next, tail)
				}
				break
			}
			cur = page.Next
		}
		if len(seen) != 28 {
			t.Fatalf("the log gave %d distinct events, want 28", len(seen))
		}
		for id, n := range seen {
			if n != 1 {
				t.Fatalf("event %s read %d times", id, n)
			}
		}
	})

	t.Run("reindex per server", func(t *testing.T) {
		before := []tableSnapshot{snapshot(t, ts.e.pool), snapshot(t, ts.poolB)}
		for _, p := range []*pgxpool.Pool{ts.e.pool, ts.poolB} {
			testenv.MustExec(t, p, `TRUNCATE sluice.appends, sluice.sequences`)
		}
		rep, err := s.Reindex(ctx)
		if err != nil || rep.Events != 28 || fmt.Sprint(rep.NextPositions) != "[7 9 9 7]" {
			t.Fatalf("reindex: %+v %v", rep, err)
		}
		for i, p := range []*pgxpool.Pool{ts.e.pool, ts.poolB} {
			if after := snapshot(t, p); fmt.Sprint(after.appends, after.sequences, after.heads) != fmt.Sprint(before[i].appends, before[i].sequences, before[i].heads) {
				t.Fatalf("server %d after reindex:\n%v\nwant\n%v", i, after, before[i])
			}
		}
	})
	t.Run("notifications of both servers", func(t *testing.T) {
		// Both servers LISTEN once each has sent its first Resync.
		resyncs, got := 0, map[int]bool{}
		for resyncs < 2 {
			select {
			case n := <-notes:
				if n.Kind == Resync {
					resyncs++
				}
			case <-ctx.Done():
				t.Fatalf("%d of 2 servers listening", resyncs)
			}
		}
		var more []envelope.Envelope
		for sh := range 4 {
			more = append(more, command("Order", idsByShard("Order", "note", 4, 1)[sh][0], sh))
		}
		mustAppend(t, s, more...)
		for len(got) < 4 {
			select {
			case n := <-notes:
				if n.Kind == Committed {
					got[n.Shard] = true
				}
			case <-ctx.Done():
				t.Fatalf("committed notifications of shards %v only", got)
			}
		}
	})
}

// The map is fixed when the store is created: each server records the
// shards it holds, and a map that gives a server other shards, no map on
// a server of a map, or another number of shards is refused by name.
func TestShardMapFixedAtCreation(t *testing.T) {
	ts := newTwoServers(t)
	s := ts.open(t)
	mustAppend(t, s, command("Order", ts.shards[0][0], 1), command("Order", ts.shards[3][0], 1))
	for _, c := range []struct {
		name string
		cfg  func() (Config, Deps)
		want string
	}{
		{"servers swapped", func() (Config, Deps) {
			cfg := ts.cfg
			cfg.ShardMap = config.Secret("0-1=" + ts.urlB + ",2-3=" + ts.e.url)
			return cfg, ts.deps()
		}, "holds shards 2-3 of this store, but the map gives it shards 0-1"},
		{"ranges moved", func() (Config, Deps) {
			cfg := ts.cfg
			cfg.ShardMap = config.Secret("0-2=" + ts.e.url + ",3=" + ts.urlB)
			return cfg, ts.deps()
		}, "holds shards 0-1 of this store, but the map gives it shards 0-2"},
		{"no map on a server of the map", func() (Config, Deps) {
			return shardedConfig(4), Deps{Pool: ts.e.pool, Bucket: ts.e.bucket}
		}, "holds shards 0-1 of this store, but the map gives it shards 0-3"},
		{"another number of shards", func() (Config, Deps) {
			cfg := shardedConfig(8)
			cfg.ShardMap = config.Secret("0-3=" + ts.e.url + ",4-7=" + ts.urlB)
			return cfg, ts.deps()
		}, "EVENT_STORE_SHARDS is 8"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, deps := c.cfg()
			st, err := New(cfg, deps)
			if err == nil {
				_ = st.Close()
			}
			if !layoutRefused(err) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "postgres://") {
				t.Fatalf("New: %v, want a refusal containing %q (and no URL)", err, c.want)
			}
			var me *ShardMapMismatchError
			if errors.As(err, &me) && me.HTTPStatus() != 503 {
				t.Fatalf("status %d", me.HTTPStatus())
			}
		})
	}
	// A map server missing from Deps is refused by name, not by URL.
	if _, err := New(ts.cfg, Deps{ShardPools: map[string]*pgxpool.Pool{ts.e.url: ts.e.pool}, Bucket: ts.e.bucket}); err == nil ||
		!strings.Contains(err.Error(), "shards 2-3") || strings.Contains(err.Error(), "postgres://") {
		t.Fatalf("New without the pool of shards 2-3: %v", err)
	}
}

// A server that is down holds up only its shards: appends to its
// aggregates fail as a Postgres outage naming the server (503, what a
// worker pauses on), the other server's aggregates are appended and read
// meanwhile, and once it is back everything works and nothing was lost.
func TestServerDownPausesOnlyItsShards(t *testing.T) {
	ts := newTwoServers(t)
	s := ts.open(t)
	ctx := ctxT(t)
	a, b := ts.shards[1][0], ts.shards[2][0]
	mustAppend(t, s, command("Order", a, 1), command("Order", b, 1))
	ts.srvB.Stop()

	rs, err := s.Append(ctx, command("Order", a, 2), command("Order", b, 2))
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].Err != nil {
		t.Fatalf("append on the server that is up: %v", rs[0].Err)
	}
	var se *ServerError
	if !errors.As(rs[1].Err, &se) || se.Server != "shards 2-3" || !failure.IsOutage(ctx, rs[1].Err) {
		t.Fatalf("append on the server that is down: %v, want a *ServerError of shards 2-3 that is an outage", rs[1].Err)
	}
	if evs, err := s.Stream(ctx, "Order", a, 1, 0, ""); err != nil || len(evs) != 2 {
		t.Fatalf("stream on the server that is up: %d, %v", len(evs), err)
	}
	if _, err := s.Heads(ctx); !errors.As(err, &se) || se.Server != "shards 2-3" {
		t.Fatalf("heads with a server down: %v, want the server named", err)
	}
	if _, err := s.ShardLog(0).Head(ctx); err != nil {
		t.Fatalf("shard 0's head with the other server down: %v", err)
	}
	if err := s.AppendReady(ctx); err != nil {
		t.Fatalf("AppendReady with one of two servers down: %v, want ready (the other takes appends)", err)
	}

	ts.srvB.Start()
	var r Result
	again := command("Order", b, 3) // retried as is: idempotent
	testenv.WaitFor(t, time.Minute, "appends on the restarted server", func() bool {
		r, err = s.AppendOne(ctx, again)
		return err == nil
	})
	if n, err := s.LastSequence(ctx, "Order", b); err != nil || n != r.Event.Envelope.SequenceNumber {
		t.Fatalf("last sequence on the restarted server: %d %v (%s)", n, err, describe(r))
	}
	heads, err := s.Heads(ctx)
	if err != nil || len(heads) != 4 {
		t.Fatalf("heads after the restart: %v %v", heads, err)
	}
}

// AppendReady, the API's readiness check of the store, stays green while
// any server takes appends and turns red, naming every server, when none
// answers: an API that reported ready then would take requests it can only
// answer 503.
func TestAppendReadyUntilNoServerAnswers(t *testing.T) {
	ts := newTwoServers(t)
	s := ts.open(t)
	ctx := ctxT(t)
	for _, step := range []struct {
		name  string
		down  func()
		ready bool
	}{
		{"both servers up", func() {}, true},
		{"shards 2-3 down", ts.srvB.Stop, true},
		{"no server answers", ts.e.pool.Close, false},
	} {
		t.Run(step.name, func(t *testing.T) {
			step.down()
			err := s.AppendReady(ctx)
			switch {
			case step.ready && err != nil:
				t.Fatalf("AppendReady: %v, want ready", err)
			case !step.ready && err == nil:
				t.Fatal("AppendReady: ready, want an error")
			case !step.ready && (!strings.Contains(err.Error(), "shards 0-1") || !strings.Contains(err.Error(), "shards 2-3")):
				t.Fatalf("AppendReady: %v, want both servers named", err)
			}
		})
	}
}
