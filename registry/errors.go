package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sluicehq/sluice/shared/claim"
)

// ErrUnavailable is claim.ErrUnavailable: it matches every error caused
// by Postgres being unreachable or unable to serve. Callers pause on it.
var ErrUnavailable = claim.ErrUnavailable

// ErrLeaseLost is claim.ErrLeaseLost: the caller no longer holds the claim.
var ErrLeaseLost = claim.ErrLeaseLost

// ErrInvalidRequest is claim.ErrInvalidRequest: it matches every
// *RequestError.
var ErrInvalidRequest = claim.ErrInvalidRequest

// ErrNotFound matches the error of GetRow and Redrive when no row exists.
var ErrNotFound = errors.New("registry: no such row")

// ErrNotDead matches the error of Redrive when the row is not dead.
var ErrNotDead = errors.New("registry: row is not dead")

// UnavailableError is the error of an operation that failed because Postgres
// could not be reached or could not serve. It matches ErrUnavailable.
type UnavailableError struct {
	// Op is the registry operation ("claim", "mark done", …).
	Op string
	// Err is the underlying driver or network error.
	Err error
}

// Error describes the failed operation and its cause.
func (e *UnavailableError) Error() string {
	return fmt.Sprintf("registry: %s: Postgres unavailable: %v", e.Op, e.Err)
}

// Unwrap returns the underlying error.
func (e *UnavailableError) Unwrap() error { return e.Err }

// Is reports whether target is ErrUnavailable.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// LeaseLostError is the error of a fenced operation by a caller that no
// longer holds the claim. It matches ErrLeaseLost.
type LeaseLostError struct {
	// Op is the fenced operation ("mark done", "heartbeat", …).
	Op string
	// Handler and EventID identify the row.
	Handler string
	EventID string
}

// Error names the operation and the event.
func (e *LeaseLostError) Error() string {
	return fmt.Sprintf("registry: %s: lease lost for handler %q event %q (reclaimed by another owner, or no longer processing)", e.Op, e.Handler, e.EventID)
}

// Is reports whether target is ErrLeaseLost.
func (e *LeaseLostError) Is(target error) bool { return target == ErrLeaseLost }

// isUnavailable reports whether err means Postgres cannot serve now.
func isUnavailable(err error) bool {
	// SQLSTATEs (or classes, by two-character prefix) that mean the server
	// cannot serve now, not that the request is wrong.
	unavailableSQLStates := [...]string{
		"08",    // connection exception
		"53",    // insufficient resources (too many connections, disk full, out of memory)
		"57P01", // admin_shutdown
		"57P02", // crash_shutdown
		"57P03", // cannot_connect_now (starting up, recovery)
		"57P05", // idle_session_timeout
		"57014", // query_canceled (statement_timeout on an overloaded server)
		"58",    // system error (I/O)
		"25006", // read_only_sql_transaction (connected to a standby after a failover)
		"40001", // serialization_failure (after the registry's own retries)
		"40P01", // deadlock_detected (after the registry's own retries)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		for _, s := range unavailableSQLStates {
			if strings.HasPrefix(pgErr.Code, s) {
				return true
			}
		}
		// A server error wrapped in a failed connection attempt (e.g. the
		// server refusing connections while starting) is still an outage.
		var ce *pgconn.ConnectError
		return errors.As(err, &ce)
	}
	var ce *pgconn.ConnectError
	var netErr net.Error
	switch {
	case errors.As(err, &ce),
		pgconn.SafeToRetry(err),
		pgconn.Timeout(err),
		errors.Is(err, pgconn.ErrConnClosed),
		errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE),
		errors.As(err, &netErr),
		errors.Is(err, context.DeadlineExceeded):
		return true
	}
	// pgx reports some broken-connection states only as text.
	return strings.Contains(err.Error(), "conn closed")
}

// isRetryableTxError reports a transaction rolled back by the server that is
// safe to run again at once (every registry statement is its own
// transaction).
func isRetryableTxError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}

// ambiguous reports whether a failed statement may have been executed by the
// server (the failure happened after the request was sent).
func ambiguous(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return false // the server answered: the statement failed and rolled back
	}
	return !pgconn.SafeToRetry(err)
}
