package registry_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/shared/claim"
)

// newRegistry returns a Registry on pool with cfg, its Owner set to owner.
func newRegistry(t testing.TB, pool *pgxpool.Pool, owner string, cfg registry.Config) *registry.Registry {
	t.Helper()
	cfg.Owner = owner
	r, err := registry.New(cfg, registry.Deps{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func claimOne(t testing.TB, r *registry.Registry, req claim.Request) claim.Result {
	t.Helper()
	res, err := r.Claim(context.Background(), req)
	if err != nil {
		t.Fatalf("claim %s seq %d: %v", req.EventID, req.Seq, err)
	}
	return res
}

func mustKind(t testing.TB, res claim.Result, want claim.Kind) {
	t.Helper()
	if res.Kind != want {
		t.Fatalf("got %s (%+v), want %s", res.Kind, res, want)
	}
}

func markDone(t testing.TB, r *registry.Registry, l claim.Lease) {
	t.Helper()
	if err := r.MarkDone(context.Background(), l, claim.Applied()); err != nil {
		t.Fatalf("mark done %s: %v", l.EventID, err)
	}
}

// claimDone claims and marks done one event, which must be claimable.
func claimDone(t testing.TB, r *registry.Registry, req claim.Request) {
	t.Helper()
	res := claimOne(t, r, req)
	mustKind(t, res, claim.Claimed)
	markDone(t, r, res.Lease)
}

func req(handler, eventID, agg string, seq int64, p claim.Policy) claim.Request {
	return claim.Request{Handler: handler, EventID: eventID, AggregateID: agg, Seq: seq, Policy: p}
}

func row(t testing.TB, r *registry.Registry, handler, eventID string) claim.Row {
	t.Helper()
	got, err := r.GetRow(context.Background(), handler, eventID)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// queryCounter is a pgx QueryTracer and BatchTracer counting the
// statements a pool runs, alone or queued in a batch.
type queryCounter struct{ n atomic.Int64 }

func (c *queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *queryCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (c *queryCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	c.n.Add(1)
}

func (c *queryCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// newProxy starts a proxy to the server of url and returns it with a pool
// config pointing at it.
func newProxy(t testing.TB, url string) (*testenv.Proxy, *pgxpool.Config) {
	t.Helper()
	p := testenv.NewPGProxy(t, url)
	return p, p.PoolConfig()
}

// proxiedPool returns a proxy in front of a freshly migrated database and a
// pool through it (with tr as query tracer when not nil), plus a direct pool.
func proxiedPool(t testing.TB, tr pgx.QueryTracer, maxConns int32) (*testenv.Proxy, *pgxpool.Pool, *pgxpool.Pool) {
	t.Helper()
	url, direct := testenv.NewMigratedDatabase(t)
	p, cfg := newProxy(t, url)
	if tr != nil {
		cfg.ConnConfig.Tracer = tr
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return p, pool, direct
}

func pgxpoolNew(url string) (*pgxpool.Pool, error) { return pgxpool.New(context.Background(), url) }
