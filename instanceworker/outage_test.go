package instanceworker_test

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/instanceworker"
)

// pgProxy is a TCP proxy in front of the test Postgres server that can be
// cut (an outage) and restored on the same address.
type pgProxy struct {
	t              testing.TB
	network, upstr string
	addr           string
	mu             sync.Mutex
	ln             net.Listener
	conns          map[net.Conn]struct{}
}

// newPGProxy starts a proxy for the server of dbURL and returns it with a
// connection string through it.
func newPGProxy(t testing.TB, dbURL string) (*pgProxy, string) {
	t.Helper()
	cc, err := pgx.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	p := &pgProxy{t: t, conns: map[net.Conn]struct{}{}}
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
	u := url.URL{Scheme: "postgres", Host: p.addr, Path: "/" + cc.Database, RawQuery: "sslmode=disable&connect_timeout=2"}
	if cc.Password != "" {
		u.User = url.UserPassword(cc.User, cc.Password)
	} else {
		u.User = url.User(cc.User)
	}
	return p, u.String()
}

func (p *pgProxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
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
			if p.ln != ln {
				p.mu.Unlock()
				c.Close()
				u.Close()
				return
			}
			p.conns[c], p.conns[u] = struct{}{}, struct{}{}
			p.mu.Unlock()
			pipe := func(dst, src net.Conn) {
				buf := make([]byte, 64<<10)
				for {
					n, err := src.Read(buf)
					if n > 0 {
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
			go pipe(u, c)
			go pipe(c, u)
		}
	}()
}

// Stop cuts every connection and refuses new ones.
func (p *pgProxy) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// Start listens again on the same address.
func (p *pgProxy) Start() {
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

// TestPostgresOutage cuts Postgres mid-run: the worker pauses (readiness
// red, no commits, no DLQ) and completes without duplicates once it is back.
func TestPostgresOutage(t *testing.T) {
	e := newEnv(t, 2)
	proxy, proxied := newPGProxy(t, e.url)
	first := []cmd{e.appendCmd(instanceworker.CreateInstance, "out", "things", "a", create("out", "things", strp("a"), map[string]any{"v": 0}))}
	e.publish(first...)
	svc, _ := e.startInProcess(map[string]string{"DATABASE_URL": proxied})
	waitFor(t, 30*time.Second, "first command done", func() bool { return e.allDone(first...) })
	waitFor(t, 10*time.Second, "first commit", func() bool { c, end := e.committed(); return c == end })

	var second []cmd
	for i := range 3 {
		second = append(second, e.appendCmd(instanceworker.UpdateInstance, "out", "things", "a", map[string]any{"data": map[string]any{"v": i + 1}}))
		id := fmt.Sprintf("n%d", i)
		second = append(second, e.appendCmd(instanceworker.CreateInstance, "out", "things", id, create("out", "things", strp(id), map[string]any{"v": 0})))
	}
	committedBefore, _ := e.committed()
	proxy.Stop()
	e.publish(second...)
	waitFor(t, 30*time.Second, "outage detected", svc.Consumer().InOutage)
	time.Sleep(2 * time.Second)
	if c, _ := e.committed(); c != committedBefore {
		t.Errorf("committed %d during the outage, before %d", c, committedBefore)
	}
	if n := len(e.dlqRecords()); n != 0 {
		t.Errorf("DLQ holds %d records during the outage", n)
	}

	proxy.Start()
	waitFor(t, 60*time.Second, "all done after restore", func() bool { return e.allDone(append(first, second...)...) })
	waitFor(t, 20*time.Second, "committed after restore", func() bool { c, end := e.committed(); return c == end })
	if svc.Consumer().InOutage() {
		t.Error("still in outage after restore")
	}
	ev := e.domainEvents()
	if got := fmt.Sprint(ev["out:things:a"]); got != "[1×1 2×1 3×1 4×1]" {
		t.Errorf("out:things:a domain events %s", got)
	}
	for i := range 3 {
		if got := fmt.Sprint(ev[fmt.Sprintf("out:things:n%d", i)]); got != "[1×1]" {
			t.Errorf("n%d domain events %s", i, got)
		}
	}
	if v, src, _ := e.doc("out", "things", "a"); v != 4 || src["v"] != float64(3) {
		t.Errorf("a: version %d doc %v", v, src)
	}
	if n := len(e.dlqRecords()); n != 0 {
		t.Errorf("DLQ holds %d records", n)
	}
}
