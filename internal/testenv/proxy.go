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

// Proxy is a TCP proxy for outage tests, in front of the test Postgres
// server (NewPGProxy: its Unix socket or TCP address) or any TCP server
// (NewTCPProxy: MinIO, say): Stop cuts every connection and refuses new
// ones; Start restores it on the same address. It also counts round trips
// (client-to-server bursts that follow server-to-client data) and can drop
// replies to simulate a reply lost in transit.
type Proxy struct {
	t              testing.TB
	network, upstr string
	addr           string
	conn           *pgx.ConnConfig // NewPGProxy only

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	turns atomic.Int64
	wg    sync.WaitGroup
	drop  atomic.Bool
}

// NewPGProxy starts a proxy to the server of dbURL; it is stopped when the
// test ends.
func NewPGProxy(t testing.TB, dbURL string) *Proxy {
	t.Helper()
	cc, err := pgx.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	if len(cc.Host) > 0 && cc.Host[0] == '/' {
		return newProxy(t, cc, "unix", fmt.Sprintf("%s/.s.PGSQL.%d", cc.Host, cc.Port))
	}
	return newProxy(t, cc, "tcp", net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))))
}

// NewTCPProxy starts a proxy to the TCP address upstream (host:port); it is
// stopped when the test ends. Clients connect to Addr.
func NewTCPProxy(t testing.TB, upstream string) *Proxy {
	t.Helper()
	return newProxy(t, nil, "tcp", upstream)
}

func newProxy(t testing.TB, cc *pgx.ConnConfig, network, upstream string) *Proxy {
	t.Helper()
	p := &Proxy{t: t, conn: cc, network: network, upstr: upstream, conns: map[net.Conn]struct{}{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(p.Stop)
	return p
}

// Addr is the proxy's listen address (host:port).
func (p *Proxy) Addr() string { return p.addr }

// URL is a connection string to the same database through the proxy
// (NewPGProxy only).
func (p *Proxy) URL() string {
	u := url.URL{Scheme: "postgres", Host: p.addr, Path: "/" + p.conn.Database, RawQuery: "sslmode=disable&connect_timeout=2"}
	if p.conn.Password != "" {
		u.User = url.UserPassword(p.conn.User, p.conn.Password)
	} else {
		u.User = url.User(p.conn.User)
	}
	return u.String()
}

// PoolConfig is a pool configuration connecting through the proxy.
func (p *Proxy) PoolConfig() *pgxpool.Config {
	p.t.Helper()
	cfg, err := pgxpool.ParseConfig(p.URL())
	if err != nil {
		p.t.Fatal(err)
	}
	return cfg
}

// DropReplies makes the proxy forward requests but cut the connection
// instead of forwarding the server's reply (while on).
func (p *Proxy) DropReplies(on bool) { p.drop.Store(on) }

// Turns returns the round trips seen so far.
func (p *Proxy) Turns() int64 { return p.turns.Load() }

func (p *Proxy) serve(ln net.Listener) {
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
				p.mu.Lock()
				delete(p.conns, dst)
				delete(p.conns, src)
				p.mu.Unlock()
			}
			go pipe(u, c, 1)
			go pipe(c, u, 2)
		}
	}()
}

// Stop cuts all connections and closes the listener (an outage).
func (p *Proxy) Stop() {
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

// Start listens again on the same address (the outage ends). It may be
// called from any goroutine: a failure is reported with Errorf.
func (p *Proxy) Start() {
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
		p.t.Errorf("testenv: proxy restart: %v", err)
		return
	}
	p.serve(ln)
}
