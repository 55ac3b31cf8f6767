// Package migrations provides sluice's Postgres schema as SQL migrations
// embedded in the binary (`sluice migrate up|status`), applied with goose.
//
// It keeps the start-up half of "no lost work" (docs/architecture.md#no-lost-work): every process
// runs against a known schema. Up is idempotent and safe to run from many
// processes at once — a Postgres session advisory lock serialises runners, so
// each migration is applied exactly once — and every table lives in schema
// `sluice`, including goose's own version table.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed *.sql
var files embed.FS

// versionTable is goose's bookkeeping table.
const versionTable = "sluice.schema_migrations"

// lockID is the advisory lock key serialising concurrent runners
// (crc of "sluice.migrations"; any fixed value unique to sluice works).
const lockID int64 = 0x51_75_1C_E0_00_01

// schemaLockID serialises CREATE SCHEMA among runners. It must differ from
// lockID: a runner waiting for lockID inside a transaction would deadlock
// with the holder's CREATE INDEX CONCURRENTLY (migration 00005), which
// waits for every open transaction to end.
const schemaLockID int64 = lockID + 1

// Result describes one migration applied by Up.
type Result struct {
	Version  int64
	Name     string
	Duration string
}

// Status describes one known migration.
type Status struct {
	Version   int64
	Name      string
	Applied   bool
	AppliedAt string
}

// Open returns a database/sql handle over pgx for the connection string.
// The caller closes it.
func Open(databaseURL string) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("migrations: parse database URL: %w", err) // pgx redacts the password
	}
	return stdlib.OpenDB(*cfg), nil
}

func provider(ctx context.Context, db *sql.DB, logger *slog.Logger) (*goose.Provider, error) {
	// goose's version table lives in schema sluice, so the schema must exist
	// first; a transaction-scoped advisory lock (not the migrations' lock)
	// keeps concurrent runners from racing on CREATE SCHEMA.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("migrations: begin: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, schemaLockID); err != nil {
		_ = tx.Rollback()
		return nil, fmt.Errorf("migrations: lock: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `CREATE SCHEMA IF NOT EXISTS sluice`); err != nil {
		_ = tx.Rollback()
		return nil, fmt.Errorf("migrations: create schema: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("migrations: commit: %w", err)
	}
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(lockID), lock.WithLockTimeout(1, 300))
	if err != nil {
		return nil, fmt.Errorf("migrations: locker: %w", err)
	}
	opts := []goose.ProviderOption{goose.WithSessionLocker(locker), goose.WithTableName(versionTable), goose.WithDisableGlobalRegistry(true)}
	if logger != nil {
		opts = append(opts, goose.WithSlog(logger))
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, files, opts...)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return p, nil
}

// Up applies every pending migration and returns the ones it applied (none
// when the schema is current). Safe to call concurrently and repeatedly.
func Up(ctx context.Context, db *sql.DB, logger *slog.Logger) ([]Result, error) {
	p, err := provider(ctx, db, logger)
	if err != nil {
		return nil, err
	}
	res, err := p.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrations: up: %w", err)
	}
	out := make([]Result, 0, len(res))
	for _, r := range res {
		out = append(out, Result{Version: r.Source.Version, Name: r.Source.Path, Duration: r.Duration.String()})
	}
	return out, nil
}

// StatusOf lists every embedded migration and whether it is applied.
func StatusOf(ctx context.Context, db *sql.DB) ([]Status, error) {
	p, err := provider(ctx, db, nil)
	if err != nil {
		return nil, err
	}
	st, err := p.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrations: status: %w", err)
	}
	out := make([]Status, 0, len(st))
	for _, s := range st {
		row := Status{Version: s.Source.Version, Name: s.Source.Path, Applied: s.State == goose.StateApplied}
		if row.Applied {
			row.AppliedAt = s.AppliedAt.UTC().Format("2006-01-02T15:04:05Z")
		}
		out = append(out, row)
	}
	return out, nil
}
