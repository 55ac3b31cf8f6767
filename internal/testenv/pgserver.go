package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/localpg"
)

// PGServer is a second Postgres server, for the tests that put sluice's
// roles on two servers (docs/scale-out.md). SLUICE_TEST_DATABASE_URL_B
// names an existing one (an admin connection string); otherwise
// NewPGServer initialises one in a temporary directory with
// internal/localpg (initdb, pg_ctl) and starts it on a free loopback
// port. It is stopped and removed when the test ends.
//
// Stop and Start make an outage: a server of its own is really shut down
// (pg_ctl stop, every connection cut) and started again on the same port
// with its data; an external one is reached through a Proxy, which is
// stopped and started instead.
type PGServer struct {
	t     testing.TB
	admin string // admin connection string, through the proxy if any
	srv   *localpg.Server
	proxy *Proxy
}

// NewPGServer returns the second server, running.
func NewPGServer(t testing.TB) *PGServer {
	t.Helper()
	if u := os.Getenv("SLUICE_TEST_DATABASE_URL_B"); u != "" {
		p := NewPGProxy(t, u)
		return &PGServer{t: t, admin: p.URL(), proxy: p}
	}
	dir := filepath.Join(t.TempDir(), "pg")
	var (
		srv *localpg.Server
		err error
	)
	// A free port can be taken between choosing and binding it: try again.
	for range 3 {
		var port int
		if port, err = freePort(); err != nil {
			break
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		srv, err = localpg.Start(ctx, dir, port)
		cancel()
		if err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("testenv: start a second Postgres server: %v", err)
	}
	s := &PGServer{t: t, srv: srv, admin: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", srv.Port)}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = srv.Stop(ctx) // already stopped by a failed outage test: nothing to do
	})
	return s
}

// AdminURL is a superuser connection string of the server's database
// "postgres".
func (s *PGServer) AdminURL() string { return s.admin }

// NewDatabase creates an empty database on this server and returns its
// connection string; it is dropped when the test ends.
func (s *PGServer) NewDatabase(t testing.TB) string {
	t.Helper()
	return NewDatabaseOn(t, s.admin)
}

// NewMigratedDatabase creates a database on this server with every sluice
// migration applied and returns its connection string and a pool closed
// when the test ends.
func (s *PGServer) NewMigratedDatabase(t testing.TB) (string, *pgxpool.Pool) {
	t.Helper()
	return migratedPool(t, s.NewDatabase(t))
}

// Stop takes the server down: every connection is cut and new ones are
// refused until Start.
func (s *PGServer) Stop() {
	s.t.Helper()
	if s.proxy != nil {
		s.proxy.Stop()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.srv.Stop(ctx); err != nil {
		s.t.Fatalf("testenv: stop the second Postgres server: %v", err)
	}
}

// Start brings the server back on the same address, with its data.
func (s *PGServer) Start() {
	s.t.Helper()
	if s.proxy != nil {
		s.proxy.Start()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := localpg.Start(ctx, s.srv.Dir, s.srv.Port)
	if err != nil {
		s.t.Fatalf("testenv: restart the second Postgres server: %v", err)
	}
	s.srv = srv
}
