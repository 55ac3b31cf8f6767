package registry_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/shared/testenv"
)

// newRegistry returns a Registry on pool; opts.Owner defaults to owner.
func newRegistry(t testing.TB, pool *pgxpool.Pool, owner string, opts registry.Options) *registry.Registry {
	t.Helper()
	opts.Owner = owner
	r, err := registry.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func claim(t testing.TB, r *registry.Registry, req registry.ClaimRequest) registry.ClaimResult {
	t.Helper()
	res, err := r.Claim(context.Background(), req)
	if err != nil {
		t.Fatalf("claim %s seq %d: %v", req.EventID, req.Seq, err)
	}
	return res
}

func mustKind(t testing.TB, res registry.ClaimResult, want registry.Kind) {
	t.Helper()
	if res.Kind != want {
		t.Fatalf("got %s (%+v), want %s", res.Kind, res, want)
	}
}

func markDone(t testing.TB, r *registry.Registry, l registry.Lease) {
	t.Helper()
	if err := r.MarkDone(context.Background(), l, registry.Applied()); err != nil {
		t.Fatalf("mark done %s: %v", l.EventID, err)
	}
}

// claimDone claims and marks done one event, which must be claimable.
func claimDone(t testing.TB, r *registry.Registry, req registry.ClaimRequest) {
	t.Helper()
	res := claim(t, r, req)
	mustKind(t, res, registry.Claimed)
	markDone(t, r, res.Lease)
}

func req(handler, eventID, agg string, seq int64, p registry.Policy) registry.ClaimRequest {
	return registry.ClaimRequest{Handler: handler, EventID: eventID, AggregateID: agg, Seq: seq, Policy: p}
}

func row(t testing.TB, r *registry.Registry, handler, eventID string) registry.Row {
	t.Helper()
	got, err := r.GetRow(context.Background(), handler, eventID)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// queryCounter is a pgx QueryTracer counting the statements a pool runs.
type queryCounter struct{ n atomic.Int64 }

func (c *queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// proxy is a TCP proxy in front of the test Postgres server (its Unix
// socket or TCP address). Stop cuts every connection and refuses new ones
// (an outage); Start restores it on the same address. It counts round
// trips: client-to-server bursts that follow server-to-client data.
type proxy struct {
	t              testing.TB
	network, upstr string
	addr           string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	turns atomic.Int64
	wg    sync.WaitGroup
	// dropReplies makes the proxy forward requests but cut the connection
	// instead of forwarding the server's reply (a reply lost in transit).
	dropReplies atomic.Bool
}

// newProxy starts a proxy to the server of url and returns it with a pool
// config pointing at it.
func newProxy(t testing.TB, url string) (*proxy, *pgxpool.Config) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, conns: map[net.Conn]struct{}{}}
	host, port := cfg.ConnConfig.Host, cfg.ConnConfig.Port
	if len(host) > 0 && host[0] == '/' {
		p.network, p.upstr = "unix", fmt.Sprintf("%s/.s.PGSQL.%d", host, port)
	} else {
		p.network, p.upstr = "tcp", net.JoinHostPort(host, strconv.Itoa(int(port)))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(p.Stop)
	pp, _ := strconv.Atoi(p.addr[len("127.0.0.1:"):])
	cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Fallbacks = "127.0.0.1", uint16(pp), nil
	cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	return p, cfg
}

func (p *proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial(p.network, p.upstr)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			if p.ln != ln { // stopped meanwhile
				p.mu.Unlock()
				c.Close()
				u.Close()
				return
			}
			p.conns[c], p.conns[u] = struct{}{}, struct{}{}
			p.mu.Unlock()
			var last atomic.Int32 // 1 = client to server, 2 = server to client
			pipe := func(dst, src net.Conn, dir int32) {
				buf := make([]byte, 64<<10)
				for {
					n, err := src.Read(buf)
					if n > 0 && dir == 2 && p.dropReplies.Load() {
						break
					}
					if n > 0 {
						if dir == 1 && last.Swap(1) != 1 {
							p.turns.Add(1)
						} else if dir == 2 {
							last.Store(2)
						}
						if _, werr := dst.Write(buf[:n]); werr != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
				dst.Close()
				src.Close()
			}
			go pipe(u, c, 1)
			go pipe(c, u, 2)
		}
	}()
}

// Stop cuts all connections and closes the listener.
func (p *proxy) Stop() {
	p.mu.Lock()
	ln := p.ln
	p.ln = nil
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
	p.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	p.wg.Wait()
}

// Start listens again on the same address.
func (p *proxy) Start() {
	p.t.Helper()
	var ln net.Listener
	var err error
	for range 50 {
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		p.t.Fatalf("proxy restart: %v", err)
	}
	p.serve(ln)
}

// Turns returns the round trips seen so far.
func (p *proxy) Turns() int64 { return p.turns.Load() }

// proxiedPool returns a proxy in front of a freshly migrated database and a
// pool through it (with tr as query tracer when not nil), plus a direct pool.
func proxiedPool(t testing.TB, tr pgx.QueryTracer, maxConns int32) (*proxy, *pgxpool.Pool, *pgxpool.Pool) {
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
