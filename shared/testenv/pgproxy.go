package testenv

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PGProxy is a TCP proxy in front of the test Postgres server (its Unix
// socket or TCP address), for outage tests: Stop cuts every connection and
// refuses new ones; Start restores it on the same address. It also counts
// round trips (client-to-server bursts that follow server-to-client data)
// and can drop replies to simulate a reply lost in transit.
type PGProxy struct {
	t              testing.TB
	network, upstr string
	addr           string
	conn           *pgx.ConnConfig

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	turns atomic.Int64
	wg    sync.WaitGroup
	drop  atomic.Bool
}

// NewPGProxy starts a proxy to the server of dbURL; it is stopped when the
// test ends.
func NewPGProxy(t testing.TB, dbURL string) *PGProxy {
	t.Helper()
	cc, err := pgx.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	p := &PGProxy{t: t, conn: cc, conns: map[net.Conn]struct{}{}}
	if len(cc.Host) > 0 && cc.Host[0] == '/' {
		p.network, p.upstr = "unix", fmt.Sprintf("%s/.s.PGSQL.%d", cc.Host, cc.Port)
	} else {
		p.network, p.upstr = "tcp", net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port)))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(p.Stop)
	return p
}

// URL is a connection string to the same database through the proxy.
func (p *PGProxy) URL() string {
	u := url.URL{Scheme: "postgres", Host: p.addr, Path: "/" + p.conn.Database, RawQuery: "sslmode=disable&connect_timeout=2"}
	if p.conn.Password != "" {
		u.User = url.UserPassword(p.conn.User, p.conn.Password)
	} else {
		u.User = url.User(p.conn.User)
	}
	return u.String()
}

// PoolConfig is a pool configuration connecting through the proxy.
func (p *PGProxy) PoolConfig() *pgxpool.Config {
	p.t.Helper()
	cfg, err := pgxpool.ParseConfig(p.URL())
	if err != nil {
		p.t.Fatal(err)
	}
	return cfg
}

// DropReplies makes the proxy forward requests but cut the connection
// instead of forwarding the server's reply (while on).
func (p *PGProxy) DropReplies(on bool) { p.drop.Store(on) }

// Turns returns the round trips seen so far.
func (p *PGProxy) Turns() int64 { return p.turns.Load() }

func (p *PGProxy) serve(ln net.Listener) {
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
					if n > 0 && dir == 2 && p.drop.Load() {
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

// Stop cuts all connections and closes the listener (an outage).
func (p *PGProxy) Stop() {
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

// Start listens again on the same address (the outage ends).
func (p *PGProxy) Start() {
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
		p.t.Fatalf("testenv: proxy restart: %v", err)
	}
	p.serve(ln)
}
