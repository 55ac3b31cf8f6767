// Command sluice is the single binary of the sluice event-sourcing pipeline:
// every service (api, relay, instance-worker, projection-worker, dev) and
// every operator action (migrate, store, relay, registry, …) is a
// subcommand (docs/architecture.md#the-parts, docs/operator-commands.md).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/auth"
	"github.com/sluicehq/sluice/relay"
	"github.com/sluicehq/sluice/shared/suggest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRootCmd(os.Stdout, os.Stderr)
	if cmd, err := root.ExecuteContextC(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "sluice:", errorMessage(err))
		if errors.Is(err, errStopped) {
			return // told to stop before it was up: a clean exit
		}
		os.Exit(commandExitCode(cmd, err))
	}
}

// errorMessage is what sluice prints for a command's error: the error,
// and for Postgres's "relation does not exist" or "schema does not exist"
// (a database the migrations were not applied to, or the wrong
// DATABASE_URL) what to do about it; the raw SQLSTATE 42P01 said nothing
// of the migrations.
func errorMessage(err error) string {
	msg := err.Error()
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == pgUndefinedTable || pgErr.Code == pgInvalidSchemaName) && !strings.Contains(msg, "sluice migrate up") {
		msg += " (the migrations are not applied to this command's database: check DATABASE_URL, or run `sluice migrate up`)"
	}
	return msg
}

// Postgres's SQLSTATEs of a missing table and a missing schema.
const (
	pgUndefinedTable    = "42P01"
	pgInvalidSchemaName = "3F000"
)

// commandExitCode is exitCode, except for `sluice healthcheck`: it is
// run as a Docker HEALTHCHECK, whose exit codes are 0 (healthy) and 1
// (unhealthy), 2 being reserved; a usage error of it exits 1.
func commandExitCode(cmd *cobra.Command, err error) int {
	code := exitCode(err)
	if cmd != nil && cmd.Name() == "healthcheck" && cmd.HasParent() && !cmd.Parent().HasParent() && code == exitUsage {
		return 1
	}
	return code
}

// exitCode is the process's exit code for a command's error.
func exitCode(err error) int {
	var ex *exitError
	switch {
	case errors.As(err, &ex):
		return ex.code
	case suggest.IsNotFound(err), errors.Is(err, relay.ErrParkedNotFound), errors.Is(err, auth.ErrKeyNotFound):
		// A name that does not exist: as a group, a letter or a registry
		// row, also a parked record or an API key (they were 1).
		return exitNotFound
	}
	return 1
}

// exitNotFound is the exit code of a command given a name (a consumer
// group, a topic, a projection, a letter, an event) that does not exist.
const exitNotFound = 3

// exitUsage is the exit code of a command given flags it cannot honour:
// a value out of range, or a flag that does not apply to the read asked
// for (it was ignored without a word).
const exitUsage = 2

// usage is a usage error (exit code 2) saying what is wrong.
func usage(format string, a ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, a...)}
}

// exitError carries a specific exit code out of a command.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }
