package registry

import (
	"encoding/json"
	"fmt"

	"github.com/sluicehq/sluice/shared/claim"
)

// The vocabulary of claims lives in shared/claim, below both this package
// and the worker runtime (shared/consumer), so that the runtime depends on
// its own small interface and not on the registry (docs/architecture.md,
// "Floors"). The registry names it under its own names too, so that its
// callers keep one import.
type (
	Policy        = claim.Policy
	Kind          = claim.Kind
	Status        = claim.Status
	ClaimRequest  = claim.Request
	Lease         = claim.Lease
	ClaimResult   = claim.Result
	OutcomeResult = claim.OutcomeResult
	Outcome       = claim.Outcome
	Failure       = claim.Failure
	FailResult    = claim.FailResult
	Row           = claim.Row
	Done          = claim.Done
	RequestError  = claim.RequestError
)

// Policies, claim results, row states and outcomes: see shared/claim.
const (
	SkipStale          = claim.SkipStale
	WaitForPredecessor = claim.WaitForPredecessor
	Unguarded          = claim.Unguarded

	Claimed       = claim.Claimed
	DuplicateDone = claim.DuplicateDone
	InProgress    = claim.InProgress
	Stale         = claim.Stale
	Wait          = claim.Wait
	Dead          = claim.Dead
	RetryLater    = claim.RetryLater

	StatusProcessing   = claim.StatusProcessing
	StatusDone         = claim.StatusDone
	StatusFailed       = claim.StatusFailed
	StatusDead         = claim.StatusDead
	StatusSkippedStale = claim.StatusSkippedStale

	OutcomeApplied  = claim.OutcomeApplied
	OutcomeRejected = claim.OutcomeRejected
	OutcomeConflict = claim.OutcomeConflict
	OutcomeIgnored  = claim.OutcomeIgnored
	OutcomeStale    = claim.OutcomeStale
)

// Applied is claim.Applied.
func Applied() Outcome { return claim.Applied() }

// Rejected is claim.Rejected.
func Rejected(reason string) Outcome { return claim.Rejected(reason) }

// Conflict is claim.Conflict.
func Conflict(reason string) Outcome { return claim.Conflict(reason) }

// Ignored is claim.Ignored.
func Ignored() Outcome { return claim.Ignored() }

// allKinds lists every Kind, for parsing.
func allKinds() [7]Kind {
	return [7]Kind{Claimed, DuplicateDone, InProgress, Stale, Wait, Dead, RetryLater}
}

// parseKind reads a claim result as the claim statement names it.
func parseKind(s string) (Kind, error) {
	for _, k := range allKinds() {
		if k.String() == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf("registry: unknown claim result %q", s)
}

// maxReasonBytes bounds Outcome.Reason and recorded error texts.
const maxReasonBytes = 2048

// validateOutcome checks an outcome a handler asks to record.
func validateOutcome(o Outcome) error {
	switch o.Result {
	case OutcomeApplied, OutcomeConflict, OutcomeIgnored:
		return nil
	case OutcomeRejected:
		if o.Reason == "" {
			return fmt.Errorf("a rejected outcome needs a reason")
		}
		return nil
	case OutcomeStale:
		return fmt.Errorf("outcome %q is recorded by the registry only", o.Result)
	default:
		return fmt.Errorf("unknown outcome result %q (want applied, rejected, conflict or ignored)", o.Result)
	}
}

// encodeOutcome is the outcome's JSON as stored in the row.
func encodeOutcome(o Outcome) (string, error) {
	o.Reason = cleanText(o.Reason)
	b, err := json.Marshal(o)
	if err != nil {
		return "", fmt.Errorf("registry: encode outcome: %w", err)
	}
	return string(b), nil
}

// decodeOutcome reads a stored outcome (nil when none).
func decodeOutcome(b []byte) (*Outcome, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var o Outcome
	if err := json.Unmarshal(b, &o); err != nil {
		return nil, fmt.Errorf("registry: decode outcome: %w", err)
	}
	return &o, nil
}

// truncate shortens s to at most n bytes at a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && (s[cut]&0xC0) == 0x80 {
		cut--
	}
	return s[:cut]
}
