package eventstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/eventstore/objstore/filestore"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/shared/envelope"
)

// logReader pages Store.Log the way a client of GET /v1/log or of a
// subscription does: it keeps only the cursor's text between pages, and
// now and then it keeps only the first part of a page and resumes from
// the cursor after the last event it kept (a subscriber cut off
// mid-stream that resumes with its Last-Event-ID).
type logReader struct {
	s      *Store
	cursor string
	limit  int
	pages  int
	seen   []Event
}

// page reads one page; it returns the events kept and the cursor it
// resumes from.
func (r *logReader) page(ctx context.Context) ([]Event, Cursor, error) {
	from, err := ParseCursor(r.cursor)
	if err != nil {
		return nil, Cursor{}, err
	}
	p, err := r.s.Log(ctx, LogQuery{Cursor: from, Limit: r.limit})
	if err != nil {
		return nil, Cursor{}, err
	}
	r.pages++
	kept, next := p.Events, p.Next
	if r.pages%3 == 0 && len(p.Events) > 1 {
		kept = p.Events[:len(p.Events)/2]
		next = from
		for _, ev := range kept {
			next = next.With(ev.Shard, ev.Envelope.Position)
		}
	}
	r.seen = append(r.seen, kept...)
	r.cursor = next.String()
	return kept, next, nil
}

// drain reads pages until one brings nothing and leaves the cursor where
// it was.
func (r *logReader) drain(t *testing.T, ctx context.Context) Cursor {
	t.Helper()
	for {
		before := r.cursor
		kept, next, err := r.page(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(kept) == 0 && next.String() == before {
			return next
		}
	}
}

// A reader of a store of four shards pages the log by cursor while
// writers append to every shard and one shard holds a late block (a
// writer stopped between its reservation and its commit): no cursor it is
// given passes the late position, the other shards are not held up by it,
// and once it commits the reader gets it. Everything committed is read
// exactly once, each shard in position order and each aggregate in its
// order, whichever cursor the reader resumes from (the page's next one or
// the one after an event in the middle of a page). On MinIO and on the
// file backend.
func TestLogAcrossShardsResume(t *testing.T) {
	const shards, late = 4, 2
	for _, backend := range []string{"minio", "file"} {
		t.Run(backend, func(t *testing.T) {
			var pool *pgxpool.Pool
			var bucket objstore.Bucket
			if backend == "minio" {
				e := newEnv(t)
				pool, bucket = e.pool, e.bucket
			} else {
				_, pool = testenv.NewMigratedDatabase(t)
				b, err := filestore.New(t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = b.Close() })
				bucket = b
			}
			open := func(cfg Config, opts ...Option) *Store {
				s, err := New(cfg, Deps{Pool: pool, Bucket: bucket}, opts...)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.Close() })
				return s
			}
			testLogAcrossShards(t, pool, open, shards, late)
		})
	}
}

func testLogAcrossShards(t *testing.T, pool *pgxpool.Pool, open func(Config, ...Option) *Store, shards, late int) {
	ctx := ctxT(t)
	s := open(shardedConfig(shards))
	release := make(chan struct{})
	blocked := make(chan struct{})
	var once sync.Once
	hooks := &crashAt{afterReserve: func(ctx context.Context, _ string) error {
		once.Do(func() { close(blocked); <-release })
		return nil
	}}
	slow := open(named(shardedConfig(shards), "late-writer"), hooks.option())
	var relOnce sync.Once
	unblock := func() { relOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before slow closes, should the test end early

	ids := idsByShard("Order", "agg", shards, 3)
	var all []string
	for _, sh := range ids {
		all = append(all, sh...)
	}
	lateID := ids[late][0]
	busy := slices.DeleteFunc(slices.Clone(all), func(id string) bool { return id == lateID })
	mustAppend(t, s, command("Order", lateID, "before"), command("Order", busy[0], "before"))

	lateDone := make(chan Result, 1)
	go func() {
		rs, err := slow.Append(ctx, command("Order", lateID, "late"))
		if err != nil {
			t.Error(err)
			lateDone <- Result{Err: err}
			return
		}
		lateDone <- rs[0]
	}()
	<-blocked
	var latePos int64
	if err := pool.QueryRow(ctx, `SELECT position FROM sluice.appends WHERE shard = $1 AND state = 'reserved'`, late).Scan(&latePos); err != nil {
		t.Fatalf("the late reservation: %v", err)
	}

	r := &logReader{s: s, cursor: StartCursor(shards).String(), limit: 7}
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	const writers, rounds = 4, 20
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range rounds {
				envs := []envelope.Envelope{command("Order", busy[(w+n)%len(busy)], map[string]any{"w": w, "n": n})}
				if n%4 == 0 {
					envs = append(envs, command("Order", busy[(w+n+5)%len(busy)], map[string]any{"w": w, "n": n}))
				}
				if _, err := s.Append(ctx, envs...); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	writing := make(chan struct{})
	go func() { wg.Wait(); close(writing) }()

	// Read while the writers write: no cursor passes the late position.
	check := func(c Cursor) {
		t.Helper()
		if c.Position(late) >= latePos {
			t.Fatalf("cursor %s passes shard %d's position %d, still reserved", c, late, latePos)
		}
	}
	for done := false; !done; {
		select {
		case <-writing:
			done = true
		default:
		}
		_, next, err := r.page(ctx)
		if err != nil {
			t.Fatal(err)
		}
		check(next)
	}
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	stuck := r.drain(t, ctx)
	check(stuck)
	heads, err := s.Heads(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range heads {
		want := h.Position
		if h.Shard == late {
			want = latePos - 1
		}
		if stuck.Position(h.Shard) != want {
			t.Fatalf("with shard %d late at %d, the reader stopped at %s; want shard %d at %d (heads %+v)",
				late, latePos, stuck, h.Shard, want, heads)
		}
	}

	unblock()
	select {
	case lr := <-lateDone:
		if lr.Err != nil || lr.Event.Envelope.Position != latePos || lr.Event.Shard != late {
			t.Fatalf("the late append: %s", describe(lr))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the late append did not finish")
	}
	final := r.drain(t, ctx)
	if heads, err = s.Heads(ctx); err != nil {
		t.Fatal(err)
	}
	for _, h := range heads {
		if final.Position(h.Shard) != h.Position {
			t.Fatalf("the reader ended at %s, heads %+v", final, heads)
		}
	}

	// Exactly what is committed, once; each shard and aggregate in order.
	var want []string
	rows, err := pool.Query(ctx, `SELECT event_id::text FROM sluice.appends WHERE state = 'committed' ORDER BY event_id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		want = append(want, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var got []string
	lastPos := map[int]int64{}
	lastSeq := map[string]int64{}
	for _, ev := range r.seen {
		got = append(got, ev.Envelope.EventID)
		if p := ev.Envelope.Position; p <= lastPos[ev.Shard] {
			t.Fatalf("shard %d: position %d read after %d", ev.Shard, p, lastPos[ev.Shard])
		}
		lastPos[ev.Shard] = ev.Envelope.Position
		if q := ev.Envelope.SequenceNumber; q <= lastSeq[ev.Envelope.AggregateID] {
			t.Fatalf("aggregate %s: sequence %d read after %d", ev.Envelope.AggregateID, q, lastSeq[ev.Envelope.AggregateID])
		}
		lastSeq[ev.Envelope.AggregateID] = ev.Envelope.SequenceNumber
		if ev.Shard != ShardOf("Order", ev.Envelope.AggregateID, shards) {
			t.Fatalf("event %s in shard %d", ev.Envelope.EventID, ev.Shard)
		}
	}
	slices.Sort(got)
	if dup := len(got) - len(slices.Compact(slices.Clone(got))); dup > 0 {
		t.Fatalf("%d events read twice", dup)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("read %d events, %d are committed", len(got), len(want))
	}
	if want := 2 + 1 + writers*rounds + writers*rounds/4; len(got) != want {
		t.Fatalf("read %d events, appended %d", len(got), want)
	}
	t.Logf("%d events over %d pages", len(got), r.pages)
}

// The page's order: each shard's events in position order, the shards
// merged by when each event became readable; a shard whose candidates all
// made the page advances to its bound, one cut off to its last event.
func TestMergeCandidates(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	cands := []logCandidate{
		{shard: 0, position: 5, ready: at(3)},
		{shard: 0, position: 6, ready: at(1)}, // committed first, readable after 5
		{shard: 1, position: 1, ready: at(2)},
		{shard: 1, position: 2, ready: at(4)},
	}
	for _, tc := range []struct {
		name  string
		limit int
		order []string
		next  Cursor
	}{
		{"whole", 10, []string{"1:1", "0:5", "0:6", "1:2"}, CursorOf(9, 8)},
		{"cut", 3, []string{"1:1", "0:5", "0:6"}, CursorOf(9, 1)},
		{"cut inside a shard", 2, []string{"1:1", "0:5"}, CursorOf(5, 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := slices.Clone(cands)
			page := mergeCandidates(cs, tc.limit)
			var order []string
			for _, c := range page {
				order = append(order, fmt.Sprintf("%d:%d", c.shard, c.position))
			}
			if fmt.Sprint(order) != fmt.Sprint(tc.order) {
				t.Fatalf("order %v, want %v", order, tc.order)
			}
			if next := nextCursor(CursorOf(4, 0), []int64{9, 8}, cs, page, tc.limit); !next.Equal(tc.next) {
				t.Fatalf("next %s, want %s", next, tc.next)
			}
		})
	}
	t.Run("a shard that offered limit events may have more", func(t *testing.T) {
		cs := []logCandidate{{shard: 0, position: 1, ready: at(1)}, {shard: 0, position: 2, ready: at(2)}}
		page := mergeCandidates(cs, 2)
		if next := nextCursor(CursorOf(0, 0), []int64{50, 0}, cs, page, 2); !next.Equal(CursorOf(2, 0)) {
			t.Fatalf("next %s", next)
		}
	})
}
