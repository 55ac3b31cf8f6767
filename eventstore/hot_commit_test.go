package eventstore

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/shared/envelope"
)

// tableWork is what Postgres counted for one table (pg_stat_user_tables).
type tableWork struct {
	ins, upd, hotUpd, del int64
}

func (w tableWork) minus(o tableWork) tableWork {
	return tableWork{w.ins - o.ins, w.upd - o.upd, w.hotUpd - o.hotUpd, w.del - o.del}
}

// readTableWork returns the counters of the tables of the store's schema
// by name, as Postgres flushed them.
func readTableWork(t *testing.T, pool *pgxpool.Pool) map[string]tableWork {
	t.Helper()
	ctx := ctxT(t)
	if _, err := pool.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del FROM pg_stat_user_tables WHERE schemaname = 'sluice'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]tableWork{}
	for rows.Next() {
		var name string
		var w tableWork
		if err := rows.Scan(&name, &w.ins, &w.upd, &w.hotUpd, &w.del); err != nil {
			t.Fatal(err)
		}
		out[name] = w
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// commitChanges are the columns of appends that the commit step sets
// (sqlCommitRows): an index that covers one of them, in its key, its
// expressions or its predicate, makes every commit a non-HOT update.
var commitChanges = regexp.MustCompile(`\b(state|segment_key|byte_offset|byte_length|committed_at)\b`)

// TestCommitIsHOT counts the Postgres work of appends by the rows it
// touches (docs/eventstore.md#open-blocks-and-hot-commits): the commit
// step's update of each appends row is a HOT update — it writes no index
// entry — and the bookkeeping of the reservations in flight is one
// appends_open row per group, inserted by the reservation and deleted by
// the commit. Before migration 26 every commit wrote a new entry in each
// of the three unique indexes of appends, and every reservation two more
// in the partial indexes of uncommitted rows. Postgres counts HOT updates
// (n_tup_hot_upd); the counters are read once the store's connections are
// closed (a backend flushes its counters when it exits).
func TestCommitIsHOT(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)

	t.Run("no index of appends covers a column the commit changes", func(t *testing.T) {
		rows, err := e.pool.Query(ctx, `SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid)
			FROM pg_index i WHERE i.indrelid = 'sluice.appends'::regclass`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		n := 0
		for rows.Next() {
			var name, def string
			if err := rows.Scan(&name, &def); err != nil {
				t.Fatal(err)
			}
			n++
			if m := commitChanges.FindString(def); m != "" {
				t.Errorf("index %s covers %s, which the commit changes: %s", name, m, def)
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if n != 3 {
			t.Errorf("appends has %d indexes, want 3 (primary key, event_id, slot)", n)
		}
	})

	// The store's own pool, named, so that the test can tell when its
	// backends are gone (and their counters flushed).
	app := "hot-" + uuid.NewString()[:8]
	cfg, err := pgxpool.ParseConfig(e.url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s, err := New(testConfig(), Deps{Pool: pool, Bucket: e.bucket,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	before := readTableWork(t, e.pool)

	// The pipeline's shape, one group per call: commands (new aggregates
	// and one that exists), then their domain events into their slots.
	const rounds, perGroup = 10, 6
	events, groups := 0, 0
	for r := range rounds {
		cmds := make([]envelope.Envelope, perGroup)
		for j := range cmds {
			id := fmt.Sprintf("hot-%d-%d", r, j)
			if j == 0 {
				id = "hot-long-lived"
			}
			cmds[j] = command("Order", id, r)
		}
		rs := mustAppend(t, s, cmds...)
		doms := make([]envelope.Envelope, perGroup)
		for j, res := range rs {
			c := res.Event.Envelope
			d := domainEvent(c.AggregateType, c.AggregateID, "done")
			d.SequenceNumber = c.SequenceNumber
			d.Metadata.SetString(envelope.MetaCausationID, c.EventID)
			doms[j] = d
		}
		mustAppend(t, s, doms...)
		events += 2 * perGroup
		groups += 2
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	pool.Close()
	waitBackendsGone(t, e.pool, app)
	after := readTableWork(t, e.pool)
	work := map[string]tableWork{}
	for name, w := range after {
		work[name] = w.minus(before[name])
	}
	ap, open := work["appends"], work["appends_open"]
	// Index entries written: three per appends row inserted and per
	// non-HOT update, one per appends_open row inserted.
	entries := 3*(ap.ins+ap.upd-ap.hotUpd) + open.ins
	t.Logf("%d events in %d groups: appends %+v, appends_open %+v, sequences %+v, log_head %+v; index entries per event %.2f",
		events, groups, ap, open, work["sequences"], work["log_head"], float64(entries)/float64(events))

	t.Run("every commit update is HOT", func(t *testing.T) {
		if ap.ins != int64(events) || ap.upd != int64(events) || ap.del != 0 {
			t.Errorf("appends: %+v, want %d rows inserted and %d updated, none deleted", ap, events, events)
		}
		if ap.hotUpd != ap.upd {
			t.Errorf("appends: %d of %d commit updates were HOT, want all", ap.hotUpd, ap.upd)
		}
	})
	t.Run("one appends_open row per group, gone at its commit", func(t *testing.T) {
		if open.ins != int64(groups) || open.del != int64(groups) || open.upd != 0 {
			t.Errorf("appends_open: %+v, want %d rows inserted and deleted, none updated", open, groups)
		}
		var left int64
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM sluice.appends_open`).Scan(&left); err != nil || left != 0 {
			t.Errorf("%d appends_open rows left (%v), want none", left, err)
		}
	})
}

// waitBackendsGone waits until no backend of application app is left.
func waitBackendsGone(t *testing.T, pool *pgxpool.Pool, app string) {
	t.Helper()
	ctx := ctxT(t)
	for {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if _, err := pool.Exec(ctx, `SELECT pg_sleep(0.01)`); err != nil {
			t.Fatal(fmt.Errorf("waiting for %d backends of %s: %w", n, app, context.Cause(ctx)))
		}
	}
}

// openBlocks returns appends_open as "shard:first-last", in key order.
func openBlocks(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	return queryStrings(t, pool, `SELECT shard || ':' || first || '-' || last FROM sluice.appends_open ORDER BY shard, first`)
}

// A commit deletes a block only when it leaves every row of it committed:
// a block whose row a relay abandoned while its writer stalled stays
// open. Repair prunes the blocks whose rows are all committed (that one,
// once the retry of the abandoned envelope removed its row) and keeps a
// block with a row that is not committed, which Index(UncommittedOnly)
// finds (docs/eventstore.md#open-blocks-and-hot-commits).
func TestOpenBlockOutlivesItsCommitWhileARowIsNotCommitted(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	var abandonedID string
	hooks := &crashAt{afterReserve: func(ctx context.Context, key string) error {
		if key != SegmentKey(1, 3) {
			return nil // the abandoned envelope appended again
		}
		// a relay abandons the block's second row while the writer is
		// between its reservation and its PUT
		return e.pool.QueryRow(ctx, `UPDATE sluice.appends SET state = 'abandoned'
			WHERE segment_key = $1 AND position = 2 RETURNING event_id::text`, key).Scan(&abandonedID)
	}}
	s := e.store(t, testConfig(), hooks.option())
	envs := []envelope.Envelope{command("Order", "ob-1", 1), command("Order", "ob-2", 2), command("Order", "ob-3", 3)}
	rs := mustAppend(t, s, envs...)

	t.Run("the commit keeps the block of the abandoned row", func(t *testing.T) {
		if abandonedID != envs[1].EventID || rs[1].Event.Envelope.Position != 4 {
			t.Fatalf("abandoned %q, stored at %d; want the second envelope %s, appended again at 4",
				abandonedID, rs[1].Event.Envelope.Position, envs[1].EventID)
		}
		if got := openBlocks(t, e.pool); !slices.Equal(got, []string{"0:1-3"}) {
			t.Fatalf("open blocks %q, want [0:1-3] (row 2 was abandoned at its commit; block 4-4 committed)", got)
		}
	})
	t.Run("repair prunes only blocks whose rows are all committed", func(t *testing.T) {
		// a row put back from committed (by hand): the trigger opens a block
		if _, err := e.pool.Exec(ctx, `UPDATE sluice.appends SET state = 'abandoned' WHERE position = 4`); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Repair(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if got := openBlocks(t, e.pool); !slices.Equal(got, []string{"0:4-4"}) {
			t.Fatalf("open blocks after repair %q, want [0:4-4]", got)
		}
		rows, err := s.Index(ctx, IndexQuery{FromPosition: 1, UncommittedOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 1 || rows[0].Position != 4 || rows[0].State != StateAbandoned {
			t.Fatalf("uncommitted rows %+v, want position 4, abandoned", rows)
		}
	})
}
