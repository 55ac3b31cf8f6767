// Package migrations provides sluice's Postgres schema as SQL migrations
// embedded in the binary (`sluice migrate up|status`), applied with goose.
//
// The schema starts with a baseline, one file per area (00012_schema,
// 00013_eventstore, 00014_registry, 00015_relay); new migrations follow
// it. The pre-release chain it replaced (versions 1 to 11) is kept under
// testdata/prerelease, not in the binary: a database that ran that whole
// chain takes the baseline like a new one (its statements are idempotent
// and converge on the same schema), and one that stopped part-way is
// refused with a *PrereleaseError. docs/migrations.md has the rules.
//
// It keeps the start-up half of "no lost work" (docs/architecture.md#no-lost-work): every process
// runs against a known schema. Up is idempotent and safe to run from many
// processes at once — a Postgres session advisory lock serialises runners, so
// each migration is applied exactly once — and every table lives in schema
// `sluice`, including goose's own version table.
//
// It also configures and opens the connections (PostgresConfig): sluice's
// state is split into roles — main (DATABASE_URL), store
// (EVENT_STORE_DATABASE_URL) and registry (REGISTRY_DATABASE_URL), the last
// two defaulting to the first — which may live in different databases
// (docs/scale-out.md). OpenPools opens one pool per distinct database of the
// roles a process uses, and UpDatabases migrates every distinct database
// with the whole schema (docs/migrations.md#one-schema-on-every-database-decision).
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
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
// with a holder's CREATE INDEX CONCURRENTLY (a NO TRANSACTION migration),
// which waits for every open transaction to end.
const schemaLockID int64 = lockID + 1

// prereleaseLast is the last version of the pre-release chain that the
// baseline replaced; versions 1..prereleaseLast are never used again.
const prereleaseLast = 11

// PrereleaseError reports a database that ran only part of the pre-release
// migration chain (versions 1 to 11): the baseline cannot take it over,
// because the chain's missing steps changed tables the baseline leaves in
// place when they exist. Migrate it with the release that still shipped the
// chain, or recreate it.
type PrereleaseError struct {
	Version int64 // the highest pre-release version applied
}

func (e *PrereleaseError) Error() string {
	return fmt.Sprintf("migrations: the database is at pre-release schema version %d of %d; "+
		"the baseline takes over only a database that ran the whole pre-release chain "+
		"(migrate it with the previous sluice build first, or recreate it; docs/migrations.md)", e.Version, prereleaseLast)
}

// checkPrerelease refuses a database that stopped part-way through the
// pre-release chain. It runs under the schema lock, before goose.
func checkPrerelease(ctx context.Context, tx *sql.Tx) error {
	var exists bool
	if err := tx.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, versionTable).Scan(&exists); err != nil {
		return fmt.Errorf("migrations: look for %s: %w", versionTable, err)
	}
	if !exists {
		return nil // a new database
	}
	var old, later sql.NullInt64
	err := tx.QueryRowContext(ctx, `
SELECT max(version_id) FILTER (WHERE version_id BETWEEN 1 AND $1),
       max(version_id) FILTER (WHERE version_id > $1)
FROM `+versionTable, prereleaseLast).Scan(&old, &later)
	if err != nil {
		return fmt.Errorf("migrations: read %s: %w", versionTable, err)
	}
	if old.Valid && old.Int64 < prereleaseLast && !later.Valid {
		return &PrereleaseError{Version: old.Int64}
	}
	return nil
}

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
	if err := checkPrerelease(ctx, tx); err != nil {
		_ = tx.Rollback()
		return nil, err
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

// DatabaseResult is what UpDatabases did to one database.
type DatabaseResult struct {
	Database
	Applied []Result
}

// UpDatabases applies every pending migration to each distinct database of
// c (Databases), in role order, and returns what it applied to each. Every
// database gets the whole schema, whatever roles it holds
// (docs/migrations.md#one-schema-on-every-database-decision); with one URL
// it is Up on that database. It stops at the first failure, naming the
// variables of the database (never its URL).
func UpDatabases(ctx context.Context, c PostgresConfig, logger *slog.Logger) ([]DatabaseResult, error) {
	dbs := c.Databases()
	if len(dbs) == 0 {
		return nil, errors.New("DATABASE_URL is not set")
	}
	out := make([]DatabaseResult, 0, len(dbs))
	for _, d := range dbs {
		res, err := upOne(ctx, d.URL, logger)
		if err != nil {
			return out, fmt.Errorf("postgres of %s: %w", d.Vars(), err)
		}
		out = append(out, DatabaseResult{Database: d, Applied: res})
	}
	return out, nil
}

func upOne(ctx context.Context, url string, logger *slog.Logger) ([]Result, error) {
	db, err := Open(url)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	return Up(ctx, db, logger)
}
