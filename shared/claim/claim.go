// Package claim is the vocabulary of the processed-event registry that the
// worker runtime shares with it: claim requests and results, leases,
// sequence-guard policies, outcomes, failures and the errors callers branch
// on. It holds types and their rules only, no I/O: package registry
// implements the claims on Postgres, and worker depends on this
// package and on its own small Registry interface, not on the registry
// (docs/architecture.md, "Floors").
package claim

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/shared/config"
)

// DefaultMaxAttempts is the attempts of a retryable failure of the
// registry (Options) and the worker runtime when their caller gives none.
const DefaultMaxAttempts = 5

// Backoff is the backoff of a worker's retries, min(cap, base·2^(n−1))
// with jitter: the WORKER_RETRY_* part of the workers' section
// (consumer.Config embeds it), declared here, below both the worker
// runtime and the registry, which computes the delay after a failed
// attempt, so that both read the same defaults.
type Backoff struct {
	RetryBackoffBase time.Duration `env:"WORKER_RETRY_BACKOFF_BASE" envDefault:"200ms" doc:"Base of the exponential retry backoff (with jitter)."`
	RetryBackoffCap  time.Duration `env:"WORKER_RETRY_BACKOFF_CAP" envDefault:"30s" doc:"Cap of the retry backoff."`
}

// DefaultBackoff is the backoff of the tags' defaults.
func DefaultBackoff() Backoff {
	var b Backoff
	config.Defaults(&b)
	return b
}

// Retry is how a retryable failure is retried: the attempts before it is
// dead, and the backoff between them, min(BackoffCap, BackoffBase·2^(n−1))
// with jitter.
type Retry struct {
	MaxAttempts             int
	BackoffBase, BackoffCap time.Duration
}

// Policy is a handler's sequence-guard policy (docs/registry.md#sequence-guard-policies-per-handler).
type Policy int

const (
	// SkipStale (projections): an event whose sequence is at or below the
	// aggregate's last finished sequence is STALE; higher sequences are
	// claimable even across gaps (domain events carry full state and the
	// Elasticsearch write is versioned, so the final state converges).
	SkipStale Policy = iota + 1
	// WaitForPredecessor (instance worker): at or below the last finished
	// sequence is STALE; exactly last+1 is claimable (an aggregate with no
	// finished slot has last 0, so its first claimable slot is 1); anything
	// higher is WAIT until its predecessor is finished.
	WaitForPredecessor
	// Unguarded (per-event side effects such as the history projection, whose
	// document is the event itself): no sequence guard. Every event is
	// claimable once whatever the aggregate's last finished sequence, so an
	// event published late, after newer events of its aggregate, still gets
	// its effect. Duplicates, leases and retries are decided by the event's
	// row as under the other policies (at most one effect per event id).
	// The claim function marks its support with "policy:none".
	Unguarded
)

// String returns "skip-stale", "wait-for-predecessor" or "none".
func (p Policy) String() string {
	switch p {
	case SkipStale:
		return "skip-stale"
	case WaitForPredecessor:
		return "wait-for-predecessor"
	case Unguarded:
		return "none"
	default:
		return fmt.Sprintf("Policy(%d)", int(p))
	}
}

// Valid reports whether p is one of the three policies.
func (p Policy) Valid() bool {
	return p == SkipStale || p == WaitForPredecessor || p == Unguarded
}

// Kind is the result of a claim.
type Kind int

const (
	// Claimed: the caller holds the lease (Result.Lease) and may run
	// the side effect, then MarkDone or MarkFailed.
	Claimed Kind = iota + 1
	// DuplicateDone: the event was already processed (Result.Outcome);
	// acknowledge without effect.
	DuplicateDone
	// InProgress: another claim holds a live lease (Result.Holder,
	// until Result.NotBefore unless heartbeated); do not commit past
	// the record, try again later.
	InProgress
	// Stale: the sequence guard found the event at or below the aggregate's
	// last finished sequence; it is recorded as skipped_stale and
	// acknowledged without effect.
	Stale
	// Wait: wait-for-predecessor found a missing predecessor (the last
	// finished sequence is Result.LastSequence); nothing is recorded.
	// Retry after backoff; when Result.HealDue, heal the gap
	// (docs/registry.md).
	Wait
	// Dead: the event failed for good and was dead-lettered; it is not run
	// again by redelivery (only Redrive resets it). Acknowledge.
	Dead
	// RetryLater: an earlier attempt failed and the row is backing off until
	// Result.NotBefore (database clock; Result.RetryIn from now).
	// Do not commit past the record; claim again after RetryIn.
	RetryLater
)

// String returns the documented name (docs/registry.md#claim-results): CLAIMED, DUPLICATE_DONE, IN_PROGRESS, STALE,
// WAIT, DEAD or RETRY_LATER.
func (k Kind) String() string {
	switch k {
	case Claimed:
		return "CLAIMED"
	case DuplicateDone:
		return "DUPLICATE_DONE"
	case InProgress:
		return "IN_PROGRESS"
	case Stale:
		return "STALE"
	case Wait:
		return "WAIT"
	case Dead:
		return "DEAD"
	case RetryLater:
		return "RETRY_LATER"
	default:
		return fmt.Sprintf("Kind(%d)", int(k))
	}
}

// Status is the state of a processed_events row.
type Status string

// Row states (docs/registry.md#tables).
const (
	StatusProcessing   Status = "processing"
	StatusDone         Status = "done"
	StatusFailed       Status = "failed"
	StatusDead         Status = "dead"
	StatusSkippedStale Status = "skipped_stale"
)

// Request asks to claim one event for one handler.
type Request struct {
	// Handler names the consumer ("instanceworker",
	// "projection:{name}:v{version}"); rows and versions are per handler.
	Handler string
	// EventID is the envelope's event_id.
	EventID string
	// AggregateID is the envelope's aggregate_id; it is normalised (docs/architecture.md#aggregate-identity)
	// before use, so ids equal after normalisation share a version row and
	// no others do. Invalid ids are refused (*RequestError).
	AggregateID string
	// Seq is the envelope's sequence_number (≥ 1).
	Seq int64
	// Policy is the handler's sequence-guard policy.
	Policy Policy
}

// Lease identifies a claim; the token fences every later write.
type Lease struct {
	Handler string
	EventID string
	// Token is the lease token (a UUID) of this claim.
	Token string
	// Attempt is the attempt number of this claim (1 for the first).
	Attempt int
}

// Result is the registry's answer to one Request.
type Result struct {
	Kind Kind
	// Lease is set when Kind is Claimed.
	Lease Lease
	// Attempt is the claim's attempt number (Claimed), or the attempts made
	// so far (DuplicateDone, InProgress, Dead, RetryLater).
	Attempt int
	// Holder is the owner holding the lease (InProgress).
	Holder string
	// LastSequence is the aggregate's last finished sequence when the claim
	// was evaluated (0 when none); what Stale and Wait were decided against.
	LastSequence int64
	// NotBefore, on the database clock, is when the holder's lease expires
	// unless heartbeated (InProgress), or when the next attempt is due
	// (RetryLater).
	NotBefore time.Time
	// RetryIn is NotBefore minus the database's now at evaluation, so
	// callers can wait without comparing clocks.
	RetryIn time.Duration
	// Stalled (Wait) is how long the aggregate has not advanced, on the
	// database clock.
	Stalled time.Duration
	// HealDue (Wait) is true once Stalled reaches the lease timeout: the
	// worker should heal the gap (read the missing slots from the event
	// store and process them in order, AdvanceTo for empty slots).
	HealDue bool
	// Outcome is the recorded outcome (DuplicateDone; Stale records
	// OutcomeStale).
	Outcome *Outcome
	// LastError is the last recorded failure (Dead, RetryLater).
	LastError string
}

// OutcomeResult classifies what a finished event did.
type OutcomeResult string

// Outcome results.
const (
	// OutcomeApplied: the side effect was made.
	OutcomeApplied OutcomeResult = "applied"
	// OutcomeRejected: the command was refused by business rules (the slot
	// is finished empty); Reason says why and is shown by command status.
	OutcomeRejected OutcomeResult = "rejected"
	// OutcomeConflict: a versioned write found newer state (already applied
	// or stale); counted, treated as success.
	OutcomeConflict OutcomeResult = "conflict"
	// OutcomeIgnored: the handler does not act on this event type.
	OutcomeIgnored OutcomeResult = "ignored"
	// OutcomeStale: recorded by the registry for skipped_stale rows.
	OutcomeStale OutcomeResult = "stale"
)

// Outcome is what a done row records, stored as JSON in
// processed_events.outcome: {"result":"rejected","reason":"instance exists"}.
type Outcome struct {
	Result OutcomeResult `json:"result"`
	Reason string        `json:"reason,omitempty"`
}

// Applied is the outcome of a successful side effect.
func Applied() Outcome { return Outcome{Result: OutcomeApplied} }

// Rejected is the outcome of a command refused by business rules.
func Rejected(reason string) Outcome { return Outcome{Result: OutcomeRejected, Reason: reason} }

// Conflict is the outcome of a versioned write that found newer state.
func Conflict(reason string) Outcome { return Outcome{Result: OutcomeConflict, Reason: reason} }

// Ignored is the outcome of an event the handler does not act on.
func Ignored() Outcome { return Outcome{Result: OutcomeIgnored} }

// Failure describes a failed attempt for MarkFailed.
type Failure struct {
	// Err is the failure; its text is recorded as last_error.
	Err error
	// Retryable failures back off and run again until MaxAttempts; others
	// (Permanent, docs/worker-runtime.md#errors) make the row dead at once.
	Retryable bool
	// MaxAttempts overrides Options.MaxAttempts for this handler when > 0.
	MaxAttempts int
}

// FailResult reports what MarkFailed recorded.
type FailResult struct {
	// Status is StatusFailed (will be retried) or StatusDead (send the
	// record to the DLQ, then commit).
	Status Status
	// Attempt is the number of the attempt that failed.
	Attempt int
	// NotBefore is when the next attempt is due (database clock; failed
	// only), RetryIn the same as a duration from the database's now.
	NotBefore time.Time
	RetryIn   time.Duration
	// FirstFailedAt is the database time of the first failure of the event.
	FirstFailedAt time.Time
}

// Row is one processed_events row (Get, GetRow; `sluice registry show`).
type Row struct {
	Handler       string
	EventID       string
	AggregateID   string
	Sequence      int64
	Status        Status
	Owner         string
	LeaseToken    string
	StartedAt     time.Time // zero when unset
	HeartbeatAt   time.Time
	ProcessedAt   time.Time
	NextAttemptAt time.Time
	FirstFailedAt time.Time
	Attempts      int
	LastError     string
	Outcome       *Outcome
}

// Done is one item of MarkDoneBatch.
type Done struct {
	Lease   Lease
	Outcome Outcome
}

// ErrUnavailable matches (errors.Is) every error caused by Postgres being
// unreachable or unable to serve: connection refused or cut, pool acquire
// timeout, server shutting down or starting up, too many connections, the
// registry's own operation timeout. Callers pause on it (docs/registry.md#outage-behaviour): no side
// effect, no dead letter, no offset commit; retry with capped backoff.
var ErrUnavailable = errors.New("registry: Postgres unavailable")

// ErrLeaseLost matches the error of MarkDone, MarkFailed, Release and
// Heartbeat when the caller no longer holds the claim: the lease token is not
// the row's current one (another owner reclaimed an expired lease) or the row
// is no longer processing. The caller must not commit the record's offset on
// its own account; the new holder finishes it.
var ErrLeaseLost = errors.New("registry: lease lost")

// ErrInvalidRequest matches every *RequestError.
var ErrInvalidRequest = errors.New("registry: invalid request")

// RequestError reports a request the registry refuses before touching
// Postgres (a caller bug or bad input). It matches ErrInvalidRequest.
type RequestError struct {
	// Index is the position of the offending request in a batch (0 for
	// single calls).
	Index int
	// Field names the offending field ("handler", "aggregate_id", …).
	Field string
	// Reason explains the rule that was broken.
	Reason string
	// Err is an underlying validation error, if any.
	Err error
}

// Error names the field and the rule.
func (e *RequestError) Error() string {
	return fmt.Sprintf("registry: request %d: %s: %s", e.Index, e.Field, e.Reason)
}

// Unwrap returns the underlying validation error, if any.
func (e *RequestError) Unwrap() error { return e.Err }

// Is reports whether target is ErrInvalidRequest.
func (e *RequestError) Is(target error) bool { return target == ErrInvalidRequest }
