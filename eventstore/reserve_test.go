package eventstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicehq/sluice/shared/envelope"
)

// A group with an event_id already stored is reserved on read facts (the
// assumed attempt fails on the unique index and leaves nothing): the
// retry gets the stored event, the others are reserved, with and without
// expected_seq (idempotency comes before optimistic concurrency).
func TestReservationOfRetries(t *testing.T) {
	cases := []struct {
		name string
		prep func(t *testing.T, e *env, s *Store) (envs []envelope.Envelope, check func([]Result))
	}{
		{"retry of a stored event in the group", func(t *testing.T, e *env, s *Store) ([]envelope.Envelope, func([]Result)) {
			old := command("Order", "o", "old")
			first := mustAppend(t, s, old)[0]
			return []envelope.Envelope{command("Order", "o", "new"), old}, func(rs []Result) {
				if rs[0].Err != nil || rs[0].Event.Envelope.SequenceNumber != 2 || rs[0].Event.Envelope.Position != 2 {
					t.Errorf("new envelope: %s, want seq 2 pos 2", describe(rs[0]))
				}
				if rs[1].Err != nil || !rs[1].Duplicate || rs[1].Event.Envelope.Position != first.Event.Envelope.Position {
					t.Errorf("retry: %s, want the stored event", describe(rs[1]))
				}
			}
		}},
		{"retry of a stored event with expected_seq", func(t *testing.T, e *env, s *Store) ([]envelope.Envelope, func([]Result)) {
			// OCC would reject the retry (the aggregate is at 1 now) before
			// its insert could hit the unique index: idempotency first.
			old := command("Order", "o", "old")
			old.ExpectedSeq = expect(0)
			first := mustAppend(t, s, old)[0]
			return []envelope.Envelope{old}, func(rs []Result) {
				if rs[0].Err != nil || !rs[0].Duplicate || rs[0].Event.Envelope.Position != first.Event.Envelope.Position {
					t.Errorf("retry: %s, want the stored event", describe(rs[0]))
				}
			}
		}},
		{"retry with expected_seq next to a fresh envelope", func(t *testing.T, e *env, s *Store) ([]envelope.Envelope, func([]Result)) {
			old := command("Order", "o", "old")
			old.ExpectedSeq = expect(0)
			first := mustAppend(t, s, old)[0]
			fresh := command("Order", "p", "fresh")
			fresh.ExpectedSeq = expect(0)
			return []envelope.Envelope{fresh, old}, func(rs []Result) {
				if rs[0].Err != nil || rs[0].Event.Envelope.SequenceNumber != 1 {
					t.Errorf("fresh: %s, want seq 1", describe(rs[0]))
				}
				if rs[1].Err != nil || !rs[1].Duplicate || rs[1].Event.Envelope.Position != first.Event.Envelope.Position {
					t.Errorf("retry: %s, want the stored event", describe(rs[1]))
				}
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			s := e.store(t, testConfig())
			envs, check := c.prep(t, e, s)
			rs, err := s.Append(ctxT(t), envs...)
			if err != nil {
				t.Fatal(err)
			}
			check(rs)
			if rs, err := s.Append(ctxT(t), command("Order", "after", 1)); err != nil || rs[0].Err != nil {
				t.Fatalf("next append: %v %v", err, rs)
			}
		})
	}
}

// The reservation commits asynchronously (its locks are released before the
// WAL flush) but is durable before the segment is written: the flush
// transaction of the same round trip has run when the PUT starts. Each
// commit sends its NOTIFY; a reservation sends none.
func TestReservationFlushedBeforePutAndCommitNotified(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	listener, err := pgx.Connect(ctx, e.url)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(context.Background())
	if _, err := listener.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		t.Fatal(err)
	}
	probe, err := pgx.Connect(ctx, e.url) // untraced: round trips are counted below
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close(context.Background())
	flushes := func(ctx context.Context) int64 {
		var n int64
		if err := probe.QueryRow(ctx, `SELECT coalesce(sum(flushes), 0) FROM sluice.eventstore_flush`).Scan(&n); err != nil {
			t.Error(err)
		}
		return n
	}
	var mu sync.Mutex
	var atPut []int64
	hooks := &crashAt{afterReserve: func(ctx context.Context, key string) error {
		n := flushes(ctx)
		mu.Lock()
		atPut = append(atPut, n)
		mu.Unlock()
		return nil
	}}
	s := e.store(t, testConfig(), hooks.option())
	q0 := e.tracer.N()
	mustAppend(t, s, command("Order", "a", 1), command("Order", "b", 2))
	mustAppend(t, s, command("Order", "a", 3))
	if n := e.tracer.N() - q0; n != 4 {
		t.Errorf("%d Postgres round trips for two groups, want 4 (reservation 1 + commit 1 each)", n)
	}
	if !slices.Equal(atPut, []int64{1, 2}) {
		t.Errorf("flush transactions seen when each segment was written: %v, want [1 2]", atPut)
	}
	// A reservation sends no NOTIFY (no reader used it); its commit does.
	// The sentinel, sent last, bounds the wait.
	if _, err := probe.Exec(ctx, `SELECT pg_notify($1, 'sentinel')`, NotifyChannel); err != nil {
		t.Fatal(err)
	}
	want := []string{"committed 1 2", "committed 3 3", "sentinel"}
	var got []string
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for len(got) < len(want) {
		n, err := listener.WaitForNotification(wctx)
		if err != nil {
			t.Fatalf("notifications %q, then %v", got, err)
		}
		got = append(got, n.Payload)
	}
	if !slices.Equal(got, want) {
		t.Errorf("notifications %q, want %q", got, want)
	}
}

// Several groups in flight at once, the middle one crashing (after its
// reservation, or after its PUT): the groups around it are acknowledged,
// positions stay contiguous per group and in reservation order, and Repair
// settles the middle block — committed from its segment, or abandoned —
// with no event lost or duplicated.
func TestGroupsInFlightWithCrashInTheMiddle(t *testing.T) {
	for _, point := range []string{"afterReserve", "afterPut"} {
		t.Run(point, func(t *testing.T) {
			e := newEnv(t)
			cfg := testConfig()
			cfg.AppendTimeout = shortTimeout
			entered := make(chan string, 3)
			release := make(chan struct{})
			middle := SegmentKey(4, 6)
			crash := errors.New("process killed")
			hooks := &crashAt{
				afterReserve: func(ctx context.Context, key string) error {
					entered <- key
					if key == middle {
						if point == "afterReserve" {
							return crash
						}
						return nil
					}
					<-release // groups 1 and 3 stay in flight until all three reserved
					return nil
				},
				afterPut: func(ctx context.Context, key string) error {
					if key == middle && point == "afterPut" {
						return crash
					}
					return nil
				},
			}
			s := e.store(t, func() Config { c := named(cfg, "crashing"); c.MaxInFlightGroups = 4; return c }(), hooks.option())
			groups := [][]envelope.Envelope{
				{command("Order", "a", 1), command("Order", "b", 1), command("Order", "a", 2)},
				{command("Order", "a", 3), command("Order", "c", 1), command("Order", "b", 2)},
				{command("Order", "b", 3), command("Order", "a", 4), command("Order", "c", 2)},
			}
			results := make([][]Result, len(groups))
			var wg sync.WaitGroup
			for g, envs := range groups {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rs, err := s.Append(context.Background(), envs...)
					if err != nil {
						t.Error(err)
					}
					results[g] = rs
				}()
				if key := <-entered; key != SegmentKey(int64(3*g+1), int64(3*g+3)) {
					t.Fatalf("group %d reserved %s", g, key)
				}
			}
			close(release)
			wg.Wait()
			for g, rs := range results {
				for i, r := range rs {
					var ce *crashError
					switch {
					case g == 1 && !errors.As(r.Err, &ce):
						t.Errorf("middle group envelope %d: %s, want the crash", i, describe(r))
					case g != 1 && (r.Err != nil || r.Event.Envelope.Position != int64(3*g+i+1)):
						t.Errorf("group %d envelope %d: %s, want position %d", g, i, describe(r), 3*g+i+1)
					}
				}
			}
			for _, ev := range groups[1] {
				if st := rowState(t, e.pool, ev.EventID); st != stateReserved {
					t.Fatalf("crashed group's row is %s, want reserved", st)
				}
			}
			if point == "afterReserve" {
				time.Sleep(shortTimeout + 50*time.Millisecond)
			}
			rep, err := s.Repair(ctxT(t), 0)
			if err != nil {
				t.Fatal(err)
			}
			wantState := stateCommitted
			if point == "afterReserve" {
				wantState = stateAbandoned
				if rep.Abandoned != 3 {
					t.Errorf("repair %+v, want 3 abandoned", rep)
				}
			} else if rep.Committed != 3 {
				t.Errorf("repair %+v, want 3 committed", rep)
			}
			for _, ev := range groups[1] {
				if st := rowState(t, e.pool, ev.EventID); st != wantState {
					t.Errorf("middle row %s after repair, want %s", st, wantState)
				}
			}
			// every acknowledged or repaired event is stored once, per
			// aggregate in sequence order without a repeated sequence
			seen := map[string]int{}
			for _, agg := range []string{"a", "b", "c"} {
				var last int64
				for _, ev := range mustStream(t, s, "Order", agg) {
					seen[ev.Envelope.EventID]++
					if ev.Envelope.SequenceNumber <= last {
						t.Errorf("aggregate %s: sequence %d after %d", agg, ev.Envelope.SequenceNumber, last)
					}
					last = ev.Envelope.SequenceNumber
				}
			}
			for g, envs := range groups {
				for _, ev := range envs {
					want := 1
					if g == 1 && point == "afterReserve" {
						want = 0
					}
					if seen[ev.EventID] != want {
						t.Errorf("group %d event %s read %d times, want %d", g, ev.EventID, seen[ev.EventID], want)
					}
				}
			}
			snap := snapshot(t, e.pool)
			if snap.head != 10 || len(snap.appends) != 9 {
				t.Errorf("log_head %d with %d rows, want 10 with 9", snap.head, len(snap.appends))
			}
			// a retry of the crashed group's envelopes: committed in place
			// when its segment was written; else reserved afresh after the
			// head, with new slots, since later slots of each aggregate were
			// filled meanwhile (an abandoned append is never committed at
			// a position the relay may have passed)
			rs, err := s.Append(ctxT(t), groups[1]...)
			if err != nil {
				t.Fatal(err)
			}
			wantPos, wantSeq := []int64{4, 5, 6}, []int64{3, 1, 2}
			if point == "afterReserve" {
				wantPos, wantSeq = []int64{10, 11, 12}, []int64{5, 3, 4}
			}
			for i, r := range rs {
				if r.Err != nil || r.Event.Envelope.Position != wantPos[i] || r.Event.Envelope.SequenceNumber != wantSeq[i] {
					t.Errorf("retry %d: %s, want position %d seq %d", i, describe(r), wantPos[i], wantSeq[i])
				}
			}
		})
	}
}

// Many appenders over few aggregates with two reservations in flight at
// once: every aggregate's sequences are 1..n without a gap or a repeat, and
// positions 1..N each hold exactly one event, in the segment its key names.
func TestConcurrentReservations(t *testing.T) {
	e := newEnv(t)
	s := e.store(t, func() Config { c := testConfig(); c.MaxReservingGroups = 2; return c }())
	if s.cfg.MaxReservingGroups < 2 {
		t.Fatalf("maxReserving %d: this test needs reservations in flight together", s.cfg.MaxReservingGroups)
	}
	const appenders, each = 32, 20
	var wg sync.WaitGroup
	for g := range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				ev := command("Order", fmt.Sprintf("o-%d", (g+i)%5), i)
				if _, err := s.AppendOne(ctxT(t), ev); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	total := 0
	for a := range 5 {
		evs := mustStream(t, s, "Order", fmt.Sprintf("o-%d", a))
		for i, ev := range evs {
			if ev.Envelope.SequenceNumber != int64(i+1) {
				t.Fatalf("aggregate o-%d: event %d has sequence %d", a, i, ev.Envelope.SequenceNumber)
			}
		}
		total += len(evs)
	}
	if total != appenders*each {
		t.Fatalf("%d events read, want %d", total, appenders*each)
	}
	segs, err := s.Segments(ctxT(t), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	next := int64(1)
	for _, sg := range segs {
		if sg.First != next {
			t.Fatalf("segment %s starts at %d, want %d", sg.Key, sg.First, next)
		}
		body, err := s.ReadSegment(ctxT(t), sg.Key)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(body)) != sg.Last-sg.First+1 {
			t.Fatalf("segment %s holds %d events", sg.Key, len(body))
		}
		next = sg.Last + 1
	}
	if next != appenders*each+1 {
		t.Fatalf("segments end at %d, want %d", next-1, appenders*each)
	}
}

// TestProbePlansProbeTheIndexes: the statements of the reservation (the
// checks of assumed facts, sqlVerify, and the lookup's) and of the commit
// (sqlCommitRows) probe appends' indexes once per envelope, with the
// generic plan each caches per connection (sqlPlanProbes before them),
// also when that plan was made while appends was empty and the table
// grew since without an ANALYZE (a fresh deployment's first minute:
// autoanalyze lags behind a table that grows by thousands of rows a
// second). A plain join of the envelopes with appends was planned as a
// sequential scan of the whole table without statistics (2 s per
// reservation at 60,000 rows in the pipeline benchmark), and a cached
// generic plan made by the statistics of an empty table stays one.
// auto_explain, at NOTICE level, hands the plans to the test's connection.
func TestProbePlansProbeTheIndexes(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	cfg, err := pgx.ParseConfig(e.url)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var plans []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		plans = append(plans, n.Message)
		mu.Unlock()
	}
	conn, err := pgx.ConnectConfig(ctx, cfg) // caches prepared statements, as the store's pool does
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, q := range []string{`LOAD 'auto_explain'`, `SET auto_explain.log_min_duration = 0`, `SET auto_explain.log_level = notice`} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// 400 domain events into the slots of commands 100..499 (a large
	// group makes one scan look cheaper than a probe per envelope), and
	// the commit of 400 positions.
	const n = 400
	ts, is, ks := make([]string, n), make([]string, n), make([]int64, n)
	eids, states, none := make([]string, n), make([]string, n), []string{}
	pos, offs, ids := make([]int64, n), make([]int64, n), make([]string, n)
	lens, shs := make([]int32, n), make([]int32, n)
	for j := range n {
		ts[j], is[j], ks[j], states[j] = "Order", fmt.Sprintf("o-%d", 100+j), 1, stateCommitted
		pos[j], offs[j], lens[j], ids[j] = int64(100+j), int64(j), 1, uuid.NewString()
	}
	statements := []struct {
		name  string
		sql   string
		args  []any
		index string // the index the plan must probe
		scan  func(pgx.Rows) error
	}{
		{"sqlVerify", sqlVerify, []any{none, none, none, none, []int64{}, ts, is, ks, eids, states, none}, "appends_slot_key", func(r pgx.Rows) error {
			var v verifyResult
			if !r.Next() {
				return fmt.Errorf("no row")
			}
			if err := v.scan(r); err != nil || v.why != "" {
				return fmt.Errorf("slot commands refused: %q %v", v.why, err)
			}
			return nil
		}},
		{"sqlLookupSlots", sqlLookupSlots, []any{ts, is, ks}, "appends_slot_key", func(r pgx.Rows) error {
			found := 0
			for r.Next() {
				found++
			}
			if found != n {
				return fmt.Errorf("%d slots found, want %d", found, n)
			}
			return r.Err()
		}},
		{"sqlLookupEvents", sqlLookupEvents, []any{ids, 60.0}, "appends_event_id_key", func(r pgx.Rows) error {
			for r.Next() {
				return fmt.Errorf("an event found by a fresh event_id")
			}
			return r.Err()
		}},
		{"sqlLockSequences", sqlLockSequences, []any{ts, is}, "sequences_pkey", func(r pgx.Rows) error {
			for r.Next() {
				return fmt.Errorf("a sequences row locked that was never written")
			}
			return r.Err()
		}},
		{"sqlDropMoved", sqlDropMoved, []any{ids}, "appends_event_id_key", func(r pgx.Rows) error {
			for r.Next() {
			}
			return r.Err()
		}},
		{"sqlCommitRows", sqlCommitRows, []any{"segments/x", pos, ids, offs, lens, shs}, "appends_pkey", func(r pgx.Rows) error {
			var upShards []int32
			var upPos []int64
			if !r.Next() {
				return fmt.Errorf("no row")
			}
			if err := r.Scan(&upShards, &upPos); err != nil || len(upPos) != 0 {
				return fmt.Errorf("committed %v of rows not reserved (%v)", upPos, err)
			}
			return nil
		}},
	}
	// run runs one statement after the plan settings statement settings,
	// in a transaction rolled back, and returns the plan it ran.
	run := func(t *testing.T, settings, sql string, args []any, scan func(pgx.Rows) error) string {
		t.Helper()
		mu.Lock()
		plans = nil
		mu.Unlock()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(context.Background()) }()
		if _, err := tx.Exec(ctx, settings); err != nil {
			t.Fatal(err)
		}
		rows, err := tx.Query(ctx, sql, args...)
		if err != nil {
			t.Fatal(err)
		}
		if scan == nil {
			for rows.Next() {
			}
		} else {
			err = scan(rows)
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
		if err != nil {
			t.Fatal(err)
		}
		// auto_explain reports when the portal is dropped: at the next
		// statement at the latest
		if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, p := range plans {
			if strings.Contains(p, sql) {
				return p
			}
		}
		t.Fatalf("no plan among %d notices: %q", len(plans), plans)
		return ""
	}
	t.Run("plans made on an empty appends", func(t *testing.T) {
		for _, st := range statements {
			run(t, sqlPlanProbes, st.sql, st.args, nil)
		}
	})
	t.Run("appends grows by 30,000 rows, never analyzed", func(t *testing.T) {
		if _, err := conn.Exec(ctx, `INSERT INTO sluice.appends (position, event_id, kind, aggregate_type, aggregate_id, sequence_number,
		        state, segment_key, byte_offset, byte_length, canonical_hash, occurred_at, writer_id, committed_at)
		 SELECT g, gen_random_uuid(), 'command', 'Order', 'o-' || g, 1, 'committed', 'segments/x', 0, 1,
		        decode(repeat('00', 32), 'hex'), now(), 'w', now() FROM generate_series(1, 30000) AS g`); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, `UPDATE sluice.log_head SET next_position = 30001 WHERE shard = 0`); err != nil {
			t.Fatal(err)
		}
	})
	for _, st := range statements {
		t.Run(st.name, func(t *testing.T) {
			plan := run(t, sqlPlanProbes, st.sql, st.args, st.scan)
			if strings.Contains(plan, "Seq Scan on ") || !strings.Contains(plan, st.index) {
				t.Errorf("the plan does not probe %s:\n%s", st.index, plan)
			}
		})
	}
	// A large group (writeArgs.plans): its write joins the envelopes with
	// the aggregates it advances by hashing, not by a nested loop over
	// every pair, and still probes for the rest.
	t.Run("the write of a large group", func(t *testing.T) {
		const m = 150
		w := writeArgs{n: m, writer: "w"}
		for j := range m {
			w.aggT, w.aggI = append(w.aggT, "Big"), append(w.aggI, fmt.Sprintf("b-%03d", j))
			w.delta, w.create = append(w.delta, 1), append(w.create, true)
			w.eids, w.kinds = append(w.eids, uuid.NewString()), append(w.kinds, "command")
			w.ts, w.is, w.seqs, w.rel = append(w.ts, "Big"), append(w.is, fmt.Sprintf("b-%03d", j)), append(w.seqs, 0), append(w.rel, true)
			w.hashes, w.occs = append(w.hashes, make([]byte, 32)), append(w.occs, time.Now())
		}
		if w.plans() != sqlPlanLargeGroup {
			t.Fatalf("a group of %d envelopes of %d aggregates is not planned as a large one", w.n, len(w.aggT))
		}
		plan := run(t, w.plans(), sqlWriteOne, []any{w.aggT, w.aggI, w.delta, w.create, w.n, w.eids, w.kinds, w.ts, w.is, w.seqs, w.rel,
			w.hashes, w.occs, w.writer}, func(r pgx.Rows) error {
			var res writeResult
			if !r.Next() {
				return fmt.Errorf("no row (%v)", r.Err())
			}
			if err := res.scan(r); err != nil {
				return err
			}
			if len(res.seqs) != m {
				return fmt.Errorf("%d rows written, want %d", len(res.seqs), m)
			}
			return nil
		})
		if !strings.Contains(plan, "Hash Left Join") && !strings.Contains(plan, "Hash Right Join") || strings.Contains(plan, "Seq Scan on ") {
			t.Errorf("the large group's write does not hash its envelopes with seqs:\n%s", plan)
		}
	})
}

// Optimistic concurrency across writers (two Stores, as two processes):
// appenders read an aggregate's last sequence and append a command that
// expects it, next to commands without expected_seq, over a few
// aggregates. Every acknowledged command with expected_seq has the
// sequence after the expected one, every conflict names another actual
// sequence, and every aggregate's stream is 1..n without a gap. Then both
// writers race for new aggregates with expected_seq 0: exactly one wins
// each.
func TestOptimisticConcurrencyAcrossWriters(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	stores := []*Store{e.store(t, named(testConfig(), "w1")), e.store(t, named(testConfig(), "w2"))}
	const appenders, each, aggs = 8, 20, 3
	var wg sync.WaitGroup
	var stored, conflicts atomic.Int64
	for g := range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[g%2]
			for i := range each {
				agg := fmt.Sprintf("occ-%d", (g+i)%aggs)
				ev := command("Order", agg, fmt.Sprintf("%d/%d", g, i))
				last, err := s.LastSequence(ctx, "Order", agg)
				if err != nil {
					t.Error(err)
					return
				}
				if g%4 != 3 {
					ev.ExpectedSeq = expect(last)
				}
				rs, err := s.Append(ctx, ev)
				if err != nil {
					t.Error(err)
					return
				}
				var ce *ConflictError
				switch r := rs[0]; {
				case r.Err == nil:
					stored.Add(1)
					if ev.ExpectedSeq != nil && r.Event.Envelope.SequenceNumber != last+1 {
						t.Errorf("expected_seq %d stored at sequence %d", last, r.Event.Envelope.SequenceNumber)
					}
				case errors.As(r.Err, &ce) && ev.ExpectedSeq != nil:
					conflicts.Add(1)
					if ce.ExpectedSeq != last || ce.ActualSeq <= last {
						t.Errorf("conflict %+v for expected_seq %d read before", ce, last)
					}
				default:
					t.Errorf("append: %s", describe(r))
				}
			}
		}()
	}
	wg.Wait()
	total := 0
	for a := range aggs {
		evs := mustStream(t, stores[0], "Order", fmt.Sprintf("occ-%d", a))
		for i, ev := range evs {
			if ev.Envelope.SequenceNumber != int64(i+1) {
				t.Fatalf("aggregate occ-%d: event %d has sequence %d", a, i, ev.Envelope.SequenceNumber)
			}
		}
		total += len(evs)
	}
	t.Logf("%d stored, %d conflicts, %d reservations read their facts", stored.Load(), conflicts.Load(),
		stores[0].stats.lookups.Load()+stores[1].stats.lookups.Load())
	if int64(total) != stored.Load() {
		t.Fatalf("%d events in the streams, %d acknowledged", total, stored.Load())
	}

	for k := range 10 {
		agg := fmt.Sprintf("race-%d", k)
		results := make([]Result, 2)
		start := make(chan struct{})
		for w, s := range stores {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ev := command("Order", agg, w)
				ev.ExpectedSeq = expect(0)
				<-start
				rs, err := s.Append(ctx, ev)
				if err != nil {
					t.Error(err)
					return
				}
				results[w] = rs[0]
			}()
		}
		close(start)
		wg.Wait()
		won := 0
		for _, r := range results {
			var ce *ConflictError
			switch {
			case r.Err == nil && r.Event.Envelope.SequenceNumber == 1:
				won++
			case errors.As(r.Err, &ce) && ce.ActualSeq == 1:
			default:
				t.Errorf("%s: %s", agg, describe(r))
			}
		}
		if won != 1 {
			t.Errorf("%s: %d writers stored expected_seq 0, want 1", agg, won)
		}
	}
}
