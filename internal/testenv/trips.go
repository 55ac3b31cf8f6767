package testenv

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// RoundTrips is a pgx tracer that counts the Postgres round trips of the
// connections it is set on: each statement sent on its own, each batch
// (one round trip, whatever it holds) and each COPY. Tests pin the work of
// a request or a command with it: counts, not timings.
type RoundTrips struct{ n atomic.Int64 }

// N is the round trips counted so far.
func (c *RoundTrips) N() int64 { return c.n.Load() }

func (c *RoundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *RoundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *RoundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *RoundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (c *RoundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (c *RoundTrips) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *RoundTrips) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

// TracedPool opens a pool on url whose round trips c counts; it is closed
// when the test ends.
func TracedPool(t testing.TB, url string, c *RoundTrips) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	cfg.ConnConfig.Tracer = c
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("testenv: pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}
