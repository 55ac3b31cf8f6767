package eventstore

import (
	"fmt"
	"log/slog"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/shared/envelope"
)

// blockWork is what Postgres counted for the store's tables
// (pg_statio_user_tables: blocks of the table, its indexes and TOAST,
// found in shared buffers or read), summed over schema sluice.
type blockWork struct {
	heap, idx int64
	tables    map[string]int64 // heap + index blocks by table
}

func (w blockWork) total() int64 { return w.heap + w.idx }

func (w blockWork) minus(o blockWork) blockWork {
	d := blockWork{heap: w.heap - o.heap, idx: w.idx - o.idx, tables: map[string]int64{}}
	for k, v := range w.tables {
		if v -= o.tables[k]; v != 0 {
			d.tables[k] = v
		}
	}
	return d
}

func readBlockWork(t *testing.T, pool *pgxpool.Pool) blockWork {
	t.Helper()
	ctx := ctxT(t)
	if _, err := pool.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT relname,
		coalesce(heap_blks_read, 0) + coalesce(heap_blks_hit, 0) + coalesce(toast_blks_read, 0) + coalesce(toast_blks_hit, 0),
		coalesce(idx_blks_read, 0) + coalesce(idx_blks_hit, 0) + coalesce(tidx_blks_read, 0) + coalesce(tidx_blks_hit, 0)
		FROM pg_statio_user_tables WHERE schemaname = 'sluice'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	w := blockWork{tables: map[string]int64{}}
	for rows.Next() {
		var name string
		var heap, idx int64
		if err := rows.Scan(&name, &heap, &idx); err != nil {
			t.Fatal(err)
		}
		w.heap, w.idx, w.tables[name] = w.heap+heap, w.idx+idx, heap+idx
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return w
}

// namedStore opens a Store on a pool of its own whose backends carry a
// fresh application_name; the func returned closes both and waits until those
// backends are gone, so that their counters are flushed (a backend
// flushes them at the latest when it exits).
func (e *env) namedStore(t *testing.T) (*Store, func()) {
	t.Helper()
	app := "work-" + uuid.NewString()[:8]
	pool := e.namedPool(t, app)
	s, err := New(testConfig(), Deps{Pool: pool, Bucket: e.bucket,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		pool.Close()
		t.Fatal(err)
	}
	return s, func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
		pool.Close()
		waitBackendsGone(t, e.pool, app)
	}
}

// namedPool opens a pool whose backends carry application_name app, so
// that their statistics can be told from others'.
func (e *env) namedPool(t *testing.T, app string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(e.url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	pool, err := pgxpool.NewWithConfig(ctxT(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return pool
}

// patchRound appends one command to the aggregate, as the API does for a
// PATCH, then its domain event into the command's slot, as the instance
// worker does (a group each).
func patchRound(t *testing.T, s *Store, aggID string, n int) {
	t.Helper()
	c := mustAppend(t, s, command(envelope.AggregateTypeInstance, aggID, map[string]any{"total": n}))[0].Event.Envelope
	d := domainEvent(c.AggregateType, c.AggregateID, map[string]any{"total": n})
	d.SequenceNumber = c.SequenceNumber
	d.Metadata.SetString(envelope.MetaCausationID, c.EventID)
	mustAppend(t, s, d)
}

// roundWork is the work of rounds patch rounds on aggregate aggID by a
// store opened for them (its start and close included): Postgres blocks
// and object-store requests.
type roundWork struct {
	blocks                       blockWork
	creates, gets, ranges, lists int64
}

// vacuum vacuums the store's tables on a pool of its own, closed before
// it returns (its counters flushed), so that each measurement starts
// from tables without dead rows, as autovacuum keeps them.
func (e *env) vacuum(t *testing.T) {
	t.Helper()
	app := "vacuum-" + uuid.NewString()[:8]
	pool := e.namedPool(t, app)
	_, err := pool.Exec(ctxT(t), `VACUUM (ANALYZE) sluice.appends, sluice.appends_open, sluice.sequences, sluice.log_head, sluice.eventstore_flush`)
	pool.Close()
	if err != nil {
		t.Fatal(err)
	}
	waitBackendsGone(t, e.pool, app)
}

func (e *env) measureRounds(t *testing.T, aggID string, rounds int) roundWork {
	t.Helper()
	e.vacuum(t)
	b := e.bucket
	before := readBlockWork(t, e.pool)
	c0, g0, r0, l0 := b.creates.Load(), b.gets.Load(), b.ranges.Load(), b.lists.Load()
	s, closeAll := e.namedStore(t)
	for n := range rounds {
		patchRound(t, s, aggID, n)
	}
	closeAll()
	return roundWork{blocks: readBlockWork(t, e.pool).minus(before),
		creates: b.creates.Load() - c0, gets: b.gets.Load() - g0, ranges: b.ranges.Load() - r0, lists: b.lists.Load() - l0}
}

// perRoundWork is the work of one patch round on aggregate aggID: (work
// of 2k rounds − work of k rounds) / k, which cancels the store's start
// and close; the tables are vacuumed before each measurement.
func (e *env) perRoundWork(t *testing.T, aggID string, k int) roundWork {
	t.Helper()
	once := e.measureRounds(t, aggID, k)
	twice := e.measureRounds(t, aggID, 2*k)
	return roundWork{blocks: twice.blocks.minus(once.blocks), creates: twice.creates - once.creates, gets: twice.gets - once.gets,
		ranges: twice.ranges - once.ranges, lists: twice.lists - once.lists}
}

// TestPatchWorkDoesNotGrowWithTheAggregate counts the store's work for a
// patch of an instance — the API's append of the command, then the
// instance worker's append of its domain event into the command's slot —
// in Postgres blocks touched (pg_statio_user_tables: table, index and
// TOAST blocks, hit or read) and object-store requests, not in time: on
// an aggregate of 1 event in a new store, then, once one aggregate holds
// 10,000 events (5,000 commands, each with its domain event), on that
// aggregate and on a new one beside it. No statement of an append reads
// the aggregate's history or scans the store
// (docs/eventstore.md#cost-per-append-as-the-store-grows): the sequence
// comes from the aggregate's sequences row, the slot and event_id checks
// are probes of unique indexes, the commit updates the group's rows by
// position. So a patch of the long aggregate costs what a patch of the new
// one beside it costs, and what a patch cost in the new store give or take
// the B-trees' one more level; a statement reading the aggregate's rows (a
// count, a scan of its slots, a fold of its stream) or scanning appends
// would cost hundreds of blocks more per patch. Autovacuum is off for the
// store's tables in this database (its reads would be counted); the test
// vacuums them before each measurement instead.
func TestPatchWorkDoesNotGrowWithTheAggregate(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	const (
		grown  = 10_000 // events of the long aggregate
		rounds = 30     // k of perRoundWork
	)
	small, long, fresh := "patch:orders:small", "patch:orders:long-lived", "patch:orders:fresh"
	if _, err := e.pool.Exec(ctx, `DO $$ DECLARE r record; BEGIN
		FOR r IN SELECT tablename FROM pg_tables WHERE schemaname = 'sluice' LOOP
			EXECUTE format('ALTER TABLE sluice.%I SET (autovacuum_enabled = off)', r.tablename);
		END LOOP; END $$`); err != nil {
		t.Fatal(err)
	}
	type measured struct {
		name string
		w    roundWork
	}
	var cases []measured
	measure := func(name, aggID string) roundWork {
		w := e.perRoundWork(t, aggID, rounds)
		cases = append(cases, measured{name, w})
		t.Logf("%s: per patch %.1f blocks (%.1f heap, %.1f index); by table over %d patches %v; object requests per patch: %.1f creates, %.1f gets, %.1f ranges, %.1f lists",
			name, float64(w.blocks.total())/rounds, float64(w.blocks.heap)/rounds, float64(w.blocks.idx)/rounds, rounds, w.blocks.tables,
			float64(w.creates)/rounds, float64(w.gets)/rounds, float64(w.ranges)/rounds, float64(w.lists)/rounds)
		return w
	}

	seed, closeSeed := e.namedStore(t)
	mustAppend(t, seed, command(envelope.AggregateTypeInstance, small, map[string]any{"total": 0}))
	closeSeed()
	inNew := measure("1 event, new store", small)

	// Seed the long aggregate: 250 commands and their 250 domain events
	// per round. Then the fresh one beside it (1 event: its command).
	seed, closeSeed = e.namedStore(t)
	for n := 0; n < grown; n += 500 {
		cmds := make([]envelope.Envelope, 250)
		for j := range cmds {
			cmds[j] = command(envelope.AggregateTypeInstance, long, map[string]any{"total": n + j})
		}
		rs := mustAppend(t, seed, cmds...)
		doms := make([]envelope.Envelope, len(rs))
		for j, r := range rs {
			c := r.Event.Envelope
			doms[j] = domainEvent(c.AggregateType, c.AggregateID, map[string]any{"total": n + j})
			doms[j].SequenceNumber = c.SequenceNumber
			doms[j].Metadata.SetString(envelope.MetaCausationID, c.EventID)
		}
		mustAppend(t, seed, doms...)
	}
	mustAppend(t, seed, command(envelope.AggregateTypeInstance, fresh, map[string]any{"total": 0}))
	// Counted on the seed's pool: its backends' counters are flushed when
	// it closes, not in the middle of a measurement.
	var events int64
	if err := seed.pool.QueryRow(ctx, `SELECT count(*) FROM sluice.appends WHERE aggregate_id = $1`, long).Scan(&events); err != nil || events != grown {
		t.Fatalf("long aggregate holds %d events (%v), want %d", events, err, grown)
	}
	closeSeed()
	longW := measure(fmt.Sprintf("%d events", grown), long)
	beside := measure("1 event, beside it", fresh)

	perPatch := func(w roundWork) float64 { return float64(w.blocks.total()) / rounds }
	t.Run("Postgres blocks per patch do not grow with the aggregate", func(t *testing.T) {
		// Slack for what varies from run to run (a B-tree page split, a
		// heap page filled): 2 blocks per patch. Reading the long
		// aggregate's rows would add hundreds.
		const slack = 2
		if perPatch(longW) > perPatch(beside)+slack {
			t.Errorf("a patch of the %d-event aggregate touched %.1f blocks, of the 1-event one beside it %.1f (more than %d apart)",
				grown, perPatch(longW), perPatch(beside), slack)
		}
	})
	t.Run("Postgres blocks per patch do not grow with the store", func(t *testing.T) {
		// The store grew from a few rows to 10,000: its B-trees by a
		// level, one more block per probe (about a dozen probes per
		// patch). A scan of appends would add hundreds.
		const slack = 16
		if perPatch(longW) > perPatch(inNew)+slack {
			t.Errorf("a patch of the %d-event aggregate touched %.1f blocks, of a 1-event one in the new store %.1f (more than %d apart)",
				grown, perPatch(longW), perPatch(inNew), slack)
		}
	})
	t.Run("object-store requests per patch do not grow", func(t *testing.T) {
		// One segment written per group (the command's, the domain
		// event's), nothing read or listed.
		for _, c := range cases {
			if w := c.w; w.creates != 2*rounds || w.gets != 0 || w.ranges != 0 || w.lists != 0 {
				t.Errorf("%s: %d creates, %d gets, %d ranges, %d lists in %d patches; want %d creates and nothing else",
					c.name, w.creates, w.gets, w.ranges, w.lists, rounds, 2*rounds)
			}
		}
	})
}
