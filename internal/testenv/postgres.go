// Package testenv provides the real components sluice's tests run against
// (docs/architecture.md#how-it-is-tested): a fresh Postgres database per test on a real server, a MinIO
// server process per test package on a free loopback port (built once from a
// pinned module version and cached), and in-process kfake Kafka clusters.
//
// It exists so that the guarantees of docs/architecture.md#the-guarantees are tested against the real
// thing: a test that needs Postgres or MinIO fails when they are down, it
// never skips silently. Environment overrides point the same tests at
// external services:
//
//	SLUICE_TEST_DATABASE_URL   admin connection string of a Postgres server
//	                           (default: the local server's Unix socket)
//	SLUICE_TEST_DATABASE_URL_B admin connection string of a second server,
//	                           for the tests that need two (default: one
//	                           started in a temporary directory; PGServer)
//	SLUICE_TEST_S3_ENDPOINT    S3 endpoint, with SLUICE_TEST_S3_ACCESS_KEY and
//	                           SLUICE_TEST_S3_SECRET_KEY
//	SLUICE_TEST_KAFKA_BROKERS  comma-separated brokers of a real Kafka
//	SLUICE_MINIO_BIN           a MinIO binary to use instead of the cached build
//	SLUICE_MINIO_DATA_DIR      where MinIO servers keep their data (default
//	                           /dev/shm when it is a tmpfs; MinIODataParent)
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/migrations"
)

// DefaultDatabaseURL is the local PostgreSQL server over its Unix socket, as
// `.ci/run` and the README's setup leave it (a superuser role named after the
// OS user).
const DefaultDatabaseURL = "postgres:///postgres?host=/var/run/postgresql&sslmode=disable"

// AdminDatabaseURL returns SLUICE_TEST_DATABASE_URL or DefaultDatabaseURL.
func AdminDatabaseURL() string {
	if u := os.Getenv("SLUICE_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultDatabaseURL
}

// RandomSuffix returns n random hex characters for unique names.
func RandomSuffix(n int) string {
	b := make([]byte, (n+1)/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)[:n]
}

// NewDatabase creates an empty database on the test server and returns its
// connection string; the database is dropped when the test ends. It fails the
// test when the server cannot be reached.
func NewDatabase(t testing.TB) string {
	t.Helper()
	return NewDatabaseOn(t, AdminDatabaseURL())
}

// NewDatabaseOn is NewDatabase on the server of the admin connection
// string admin (a second server: PGServer).
func NewDatabaseOn(t testing.TB, admin string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("testenv: Postgres is not reachable at SLUICE_TEST_DATABASE_URL or the local socket (start it: pg_ctlcluster 15 main start): %v", err)
	}
	defer conn.Close(ctx)
	name := "sluice_test_" + RandomSuffix(12)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("testenv: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Logf("testenv: drop database %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Logf("testenv: drop database %s: %v", name, err)
		}
	})
	return withDatabase(admin, name)
}

// withDatabase swaps the database name in a URL or key/value connection string.
func withDatabase(connString, newDB string) string {
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		scheme, rest, _ := strings.Cut(connString, "://")
		hostPart, query, hasQuery := strings.Cut(rest, "?")
		if i := strings.Index(hostPart, "/"); i >= 0 {
			hostPart = hostPart[:i]
		}
		out := scheme + "://" + hostPart + "/" + newDB
		if hasQuery {
			out += "?" + query
		}
		return out
	}
	// key=value form
	fields := strings.Fields(connString)
	replaced := false
	for i, f := range fields {
		if strings.HasPrefix(f, "dbname=") {
			fields[i] = "dbname=" + newDB
			replaced = true
		}
	}
	if !replaced {
		fields = append(fields, "dbname="+newDB)
	}
	return strings.Join(fields, " ")
}

// NewMigratedDatabase creates a database with every sluice migration applied
// and returns its connection string and a pool closed when the test ends.
func NewMigratedDatabase(t testing.TB) (string, *pgxpool.Pool) {
	t.Helper()
	return migratedPool(t, NewDatabase(t))
}

// migratedPool applies every sluice migration to the database at url and
// returns url and a pool on it closed when the test ends.
func migratedPool(t testing.TB, url string) (string, *pgxpool.Pool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db, err := migrations.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := migrations.Up(ctx, db, nil); err != nil {
		t.Fatalf("testenv: migrate: %v", err)
	}
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatalf("testenv: pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return url, pool
}

// MustExec runs SQL on a pool and fails the test on error.
func MustExec(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("testenv: %s: %v", fmt.Sprintf("%.80s", sql), err)
	}
}
