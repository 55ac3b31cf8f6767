// Package localpg provides a throw-away local PostgreSQL server in a data
// directory of the caller's choosing, for `sluice dev` when DATABASE_URL is
// unset (docs/architecture.md#how-it-is-tested). It finds the server binaries (PATH, then the Debian and
// RPM layouts), initialises the directory once, and starts the server on a
// loopback port with its socket inside the data directory, so it never
// touches a system cluster. PostgreSQL refuses to run as root; when sluice
// runs as root the server runs as the `postgres` system user.
//
// It keeps sluice dev honest (explicit failure, docs/architecture.md#explicit-failure): when no
// PostgreSQL binaries are installed the error says what to install.
package localpg

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNoBinaries means PostgreSQL's server programs are not installed.
var ErrNoBinaries = errors.New("localpg: PostgreSQL server binaries (initdb, pg_ctl) not found; install them (Debian/Ubuntu: apt-get install postgresql; macOS: brew install postgresql@15) or set DATABASE_URL to an existing server")

// Server is a running local PostgreSQL server.
type Server struct {
	Dir  string
	Port int
	URL  string // connection string of database "sluice"

	binDir string
	cred   *syscall.Credential
}

// FindBinDir returns the directory holding initdb and pg_ctl.
func FindBinDir() (string, error) {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if _, err := exec.LookPath("initdb"); err == nil {
			return filepath.Dir(p), nil
		}
	}
	candidates, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	more, _ := filepath.Glob("/usr/pgsql-*/bin")
	candidates = append(candidates, more...)
	sort.Sort(sort.Reverse(sort.StringSlice(candidates))) // newest major first
	for _, d := range candidates {
		if fileExists(filepath.Join(d, "initdb")) && fileExists(filepath.Join(d, "pg_ctl")) {
			return d, nil
		}
	}
	return "", ErrNoBinaries
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// Start initialises dir (once) and starts a server listening on
// 127.0.0.1:port. It returns when the server accepts connections and
// database "sluice" exists. Stop shuts it down; the data stays in dir.
func Start(ctx context.Context, dir string, port int) (*Server, error) {
	binDir, err := FindBinDir()
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("localpg: %w", err)
	}
	s := &Server{Dir: abs, Port: port, binDir: binDir}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("localpg: running as root, and PostgreSQL refuses root: no 'postgres' user to run it as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("localpg: data dir: %w", err)
	}
	if s.cred != nil {
		if err := os.Chown(abs, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return nil, fmt.Errorf("localpg: chown data dir: %w", err)
		}
		// The server user must be able to reach the directory.
		for p := filepath.Dir(abs); p != "/" && p != "."; p = filepath.Dir(p) {
			if fi, err := os.Stat(p); err == nil && fi.Mode().Perm()&0o001 == 0 {
				_ = os.Chmod(p, fi.Mode().Perm()|0o011)
			}
		}
	}
	if !fileExists(filepath.Join(abs, "PG_VERSION")) {
		if out, err := s.run(ctx, "initdb", "-D", abs, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C"); err != nil {
			return nil, fmt.Errorf("localpg: initdb: %w\n%s", err, out)
		}
	}
	opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -c port=%d -c unix_socket_directories=%s -c fsync=off", port, abs)
	if out, err := s.run(ctx, "pg_ctl", "-D", abs, "-l", filepath.Join(abs, "server.log"), "-o", opts, "-w", "-t", "60", "start"); err != nil {
		if !strings.Contains(string(out), "another server might be running") {
			return nil, fmt.Errorf("localpg: pg_ctl start: %w\n%s", err, out)
		}
	}
	s.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/sluice?sslmode=disable", port)
	if err := s.ensureDatabase(ctx); err != nil {
		_ = s.Stop(context.Background())
		return nil, err
	}
	return s, nil
}

func (s *Server) ensureDatabase(ctx context.Context) error {
	admin := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.Port)
	var conn *pgx.Conn
	var err error
	for i := 0; i < 50; i++ {
		if conn, err = pgx.Connect(ctx, admin); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("localpg: connect: %w", err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'sluice')`).Scan(&exists); err != nil {
		return fmt.Errorf("localpg: %w", err)
	}
	if !exists {
		if _, err := conn.Exec(ctx, `CREATE DATABASE sluice`); err != nil {
			return fmt.Errorf("localpg: create database: %w", err)
		}
	}
	return nil
}

func (s *Server) run(ctx context.Context, prog string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(s.binDir, prog), args...)
	cmd.Dir = s.Dir
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	return cmd.CombinedOutput()
}

// Stop shuts the server down (fast mode).
func (s *Server) Stop(ctx context.Context) error {
	if out, err := s.run(ctx, "pg_ctl", "-D", s.Dir, "-m", "fast", "-w", "stop"); err != nil {
		return fmt.Errorf("localpg: pg_ctl stop: %w\n%s", err, out)
	}
	return nil
}
