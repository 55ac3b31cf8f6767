package registry_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/shared/claim"
)

// TestBatchStatementsReplanAsTablesGrow: a worker's connections are opened
// while a new deployment's tables are empty. Plans made then must not stay
// in use once the tables are large: every batch statement (claim on its
// fast and general path, heartbeat, mark done) probes the primary keys
// instead of reading processed_events or aggregate_versions whole, by a
// sequential scan or along an index (migrations/00014_registry.sql;
// replan).
func TestBatchStatementsReplanAsTablesGrow(t *testing.T) {
	url, _ := testenv.NewMigratedDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns, cfg.MinConns = 1, 1 // one session: the one whose plans were made on empty tables
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	r := newRegistry(t, pool, "w1", registry.Config{})
	const h = "plan"
	round := func(name string, from int) {
		t.Helper()
		reqs := make([]claim.Request, 5)
		for i := range reqs {
			k := from + i
			reqs[i] = req(h, fmt.Sprintf("%s-%d", name, k), fmt.Sprintf("%s-agg-%d", name, k), 1, wait)
		}
		res, err := r.ClaimBatch(ctx, reqs) // fast path: no row yet
		if err != nil {
			t.Fatal(err)
		}
		leases := make([]claim.Lease, len(res))
		items := make([]claim.Done, len(res))
		for i, c := range res {
			if c.Kind != claim.Claimed {
				t.Fatalf("%s: %s", reqs[i].EventID, c.Kind)
			}
			leases[i], items[i] = c.Lease, claim.Done{Lease: c.Lease, Outcome: claim.Applied()}
		}
		if errs, err := r.HeartbeatBatch(ctx, leases); err != nil || errors.Join(errs...) != nil {
			t.Fatal(err, errs)
		}
		if errs, err := r.MarkDoneBatch(ctx, items); err != nil || errors.Join(errs...) != nil {
			t.Fatal(err, errs)
		}
		res, err = r.ClaimBatch(ctx, reqs) // general path: every row exists
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range res {
			if c.Kind != claim.DuplicateDone {
				t.Fatalf("%s redelivered: %s", reqs[i].EventID, c.Kind)
			}
		}
	}
	// Plans are made and cached while the tables are empty (Postgres
	// switches a prepared statement to a generic plan after five
	// executions; the claim function plans once per session).
	for i := range 8 {
		round("prime", 10*i)
	}
	const n = 20000
	if _, err := pool.Exec(ctx, `INSERT INTO sluice.processed_events
		    (handler, event_id, aggregate_id, sequence_number, status, owner, started_at, processed_at, attempt_count)
		SELECT $1, 'old-' || g, 'old-agg-' || g, 1, 'done', 'w0', now(), now(), 1 FROM generate_series(1, $2::int) AS g`, h, n); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO sluice.aggregate_versions (handler, aggregate_id, last_sequence)
		SELECT $1, 'old-agg-' || g, 1 FROM generate_series(1, $2::int) AS g`, h, n); err != nil {
		t.Fatal(err)
	}
	// reads returns, per table, the rows read by sequential scans and the
	// rows fetched through indexes, once this session's pending statistics
	// are flushed.
	reads := func() map[string][2]int64 {
		t.Helper()
		if _, err := pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
			t.Fatal(err)
		}
		rows, err := pool.Query(ctx, `SELECT relname, seq_tup_read, coalesce(idx_tup_fetch, 0) FROM pg_stat_user_tables
			WHERE schemaname = 'sluice' AND relname IN ('processed_events', 'aggregate_versions')`)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][2]int64{}
		for rows.Next() {
			var name string
			var seq, idx int64
			if err := rows.Scan(&name, &seq, &idx); err != nil {
				t.Fatal(err)
			}
			out[name] = [2]int64{seq, idx}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	before := reads()
	round("grown", 0)
	after := reads()
	// A round touches 5 events of 5 aggregates: a few dozen index fetches.
	// A scan of a whole table, sequential or along an index, reads 20,000.
	for _, tbl := range []string{"processed_events", "aggregate_versions"} {
		seq, idx := after[tbl][0]-before[tbl][0], after[tbl][1]-before[tbl][1]
		if seq != 0 || idx > 500 {
			t.Errorf("%s (%d rows): one round of batch statements read %d rows sequentially and fetched %d through indexes, want 0 and a few dozen",
				tbl, n, seq, idx)
		}
	}
}
