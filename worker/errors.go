package worker

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/failure"
)

// Error classes, as written to the DLQ record's error_class and used as
// metric labels.
const (
	// ClassParse: the record is not a valid envelope; dead-lettered at once.
	ClassParse = "parse"
	// ClassPermanent: the handler reported a failure retrying cannot fix
	// (validation, unknown type, mapping errors); dead-lettered at once.
	ClassPermanent = "permanent"
	// ClassRetryable: a transient failure (timeouts, 429, 5xx, connection
	// errors); retried with backoff, dead-lettered after the max attempts.
	ClassRetryable = "retryable"
	// ClassConflict: a version conflict of a versioned write; not an error —
	// the record is finished with outcome conflict.
	ClassConflict = "conflict"
	// ClassOutage: a dependency (Elasticsearch, object storage, Postgres,
	// Kafka) is unreachable or overloaded. Not the record's fault: the
	// worker pauses without spending an attempt, keeps the lease, turns
	// readiness red and resumes by itself; never dead-lettered.
	ClassOutage = "outage"
)

// OutageError marks a failure caused by a dependency outage (connection
// refused or reset, timeouts, 429, 502, 503, 504). The runtime pauses the
// worker instead of counting an attempt; see ClassOutage.
type OutageError struct {
	// Dependency names what is out: "elasticsearch", "objectstore",
	// "postgres" or "kafka" (a metric label and the readiness reason).
	Dependency string
	Err        error
}

func (e *OutageError) Error() string { return e.Dependency + " outage: " + errText(e.Err) }
func (e *OutageError) Unwrap() error { return e.Err }

// Outage wraps err as an *OutageError of dependency dep (nil stays nil).
func Outage(dep string, err error) error {
	if err == nil {
		return nil
	}
	return &OutageError{Dependency: dep, Err: err}
}

// PanicError is a handler call (Handle, HandleBatch, Heal) that panicked,
// turned into an error by the runtime's recover middleware. It is
// retryable: the record is retried within its budget, then dead-lettered
// with the panic value in its error; the worker process never crashes.
type PanicError struct {
	// Value is what the handler panicked with; Stack is the goroutine's
	// stack at the panic (also logged).
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.Value) }

// RetryableError marks a transient failure: the record is retried with
// backoff (only its aggregate waits) until the handler's max attempts, then
// dead-lettered. Unclassified errors are treated as retryable too.
type RetryableError struct{ Err error }

func (e *RetryableError) Error() string { return "retryable: " + errText(e.Err) }
func (e *RetryableError) Unwrap() error { return e.Err }

// PermanentError marks a failure retrying cannot fix: the record is
// dead-lettered at once.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return "permanent: " + errText(e.Err) }
func (e *PermanentError) Unwrap() error { return e.Err }

// ConflictError marks a version conflict of a versioned write ("already
// applied or stale"): the runtime finishes the record with outcome
// claim.Conflict(Reason) instead of failing it.
type ConflictError struct {
	Reason string
	Err    error
}

func (e *ConflictError) Error() string {
	if e.Err == nil {
		return "conflict: " + e.Reason
	}
	return "conflict: " + e.Reason + ": " + e.Err.Error()
}
func (e *ConflictError) Unwrap() error { return e.Err }

// Retryable wraps err as a *RetryableError (nil stays nil).
func Retryable(err error) error {
	if err == nil {
		return nil
	}
	return &RetryableError{Err: err}
}

// Permanent wraps err as a *PermanentError (nil stays nil).
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// Classified wraps a failure of a call to dependency dep made under ctx in
// the runtime's class that shared/failure gives it: an outage (refused,
// reset, timeout, 429, 502, 503, 504) is Outage(dep, err) — the worker
// pauses, no attempt is spent, never a dead letter —, a refusal retrying
// cannot fix (another 4xx) is Permanent, anything else (a 500, the caller's
// own cancellation) Retryable. nil stays nil. Every worker classifies its
// dependencies' failures with it.
func Classified(ctx context.Context, dep string, err error) error {
	if err == nil {
		return nil
	}
	switch failure.Classify(ctx, err) {
	case failure.Outage:
		return Outage(dep, err)
	case failure.Permanent:
		return Permanent(err)
	}
	return Retryable(err)
}

// ConflictErr returns a *ConflictError with reason, wrapping err (may be nil).
func ConflictErr(reason string, err error) error { return &ConflictError{Reason: reason, Err: err} }

// Classify returns the class of a handler error: ClassPermanent,
// ClassConflict, ClassOutage or ClassRetryable (also for unclassified errors). The
// outermost classification wins.
func Classify(err error) string {
	for e := err; e != nil; e = errors.Unwrap(e) {
		switch e.(type) {
		case *PermanentError:
			return ClassPermanent
		case *ConflictError:
			return ClassConflict
		case *RetryableError:
			return ClassRetryable
		case *OutageError:
			return ClassOutage
		case *PanicError:
			return ClassRetryable
		}
	}
	return ClassRetryable
}

// isOutage reports whether err is (or was caused by) a registry outage.
func isOutage(ctx context.Context, err error) bool {
	if errors.Is(err, claim.ErrUnavailable) {
		return true
	}
	return ctx != nil && errors.Is(context.Cause(ctx), claim.ErrUnavailable)
}

// isLeaseLost reports whether the handler stopped because its lease was
// lost; cause is the cancellation cause of the handler's context.
func isLeaseLost(cause, err error) bool {
	return errors.Is(err, claim.ErrLeaseLost) || errors.Is(cause, claim.ErrLeaseLost)
}

func errText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
