package eventstore

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

var (
	// ErrNotFound: no committed event matches the read.
	ErrNotFound = errors.New("eventstore: not found")
	// ErrClosed: the store was closed; the append was not accepted.
	ErrClosed = errors.New("eventstore: store closed")
	// ErrCorruptSegment: a segment or index row does not match what the
	// store wrote (wrong key, positions, event ids or byte ranges).
	ErrCorruptSegment = errors.New("eventstore: corrupt segment")
)

// ConflictError is the optimistic-concurrency failure of one envelope
// (docs/eventstore.md#append-protocol-group-commit step 3, HTTP 409): its expected_seq did not equal the
// aggregate's last sequence. Nothing was written for it.
type ConflictError struct {
	AggregateType string
	AggregateID   string
	ExpectedSeq   int64
	ActualSeq     int64
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("eventstore: optimistic concurrency conflict on %s %q: expected_seq %d, actual_seq %d",
		e.AggregateType, e.AggregateID, e.ExpectedSeq, e.ActualSeq)
}

// HTTPStatus is 409.
func (e *ConflictError) HTTPStatus() int { return http.StatusConflict }

// IdempotencyMismatchError: an envelope reused the event_id of a stored one
// with a different canonical form (docs/eventstore.md#append-protocol-group-commit step 2). Hashes are lower-case
// hex SHA-256 of the canonical forms.
type IdempotencyMismatchError struct {
	EventID    string
	StoredHash string
	NewHash    string
}

func (e *IdempotencyMismatchError) Error() string {
	return fmt.Sprintf("eventstore: event_id %s already stored with a different payload (stored canonical sha256 %s, new %s)",
		e.EventID, e.StoredHash, e.NewHash)
}

// HTTPStatus is 409.
func (e *IdempotencyMismatchError) HTTPStatus() int { return http.StatusConflict }

// SlotError: a domain event addressed to slot Sequence of an aggregate
// (docs/eventstore.md#append-protocol-group-commit) cannot go there, or (sequence allocator off) a caller-supplied
// sequence number is already used. Reason says which rule.
type SlotError struct {
	AggregateType string
	AggregateID   string
	Sequence      int64
	Kind          string
	// ExistingEventID is the event holding the slot, when that is the reason.
	ExistingEventID string
	Reason          string
}

func (e *SlotError) Error() string {
	s := fmt.Sprintf("eventstore: %s slot %d of %s %q: %s", e.Kind, e.Sequence, e.AggregateType, e.AggregateID, e.Reason)
	if e.ExistingEventID != "" {
		s += " (held by event " + e.ExistingEventID + ")"
	}
	return s
}

// HTTPStatus is 409.
func (e *SlotError) HTTPStatus() int { return http.StatusConflict }

// retryAfterUnavailable is the wait UnavailableError suggests.
const retryAfterUnavailable = 2 * time.Second

// UnavailableError: a dependency of the append (object storage) could not
// be reached, or did not answer within its deadline (EVENT_STORE_OBJECT_TIMEOUT);
// HTTP 503 with Retry-After, an outage for shared/failure. It keeps
// docs/architecture.md#explicit-failure (a hung store fails the append as fast as a refused one).
// NotWritten: the segment definitely was not written and the reservation was
// released; otherwise the outcome is unknown (the envelope may be stored).
// Either way a retry with the same event_id is safe.
type UnavailableError struct {
	Dependency string // shared/failure dependency name ("objectstore")
	NotWritten bool
	RetryAfter time.Duration
	Err        error
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("eventstore: %s unavailable: %v", e.Dependency, e.Err)
}

func (e *UnavailableError) Unwrap() error { return e.Err }

// HTTPStatus is 503.
func (e *UnavailableError) HTTPStatus() int { return http.StatusServiceUnavailable }

// crashError is returned to the callers of a group stopped by a test crash
// hook: the group stopped where a crashed process would have, without any
// clean-up.
type crashError struct {
	Point string
	Err   error
}

func (e *crashError) Error() string {
	return fmt.Sprintf("eventstore: simulated crash %s: %v", e.Point, e.Err)
}

func (e *crashError) Unwrap() error { return e.Err }
