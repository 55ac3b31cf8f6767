package registry

import (
	"encoding/json"
	"fmt"

	"github.com/sluicehq/sluice/shared/claim"
)

// allKinds lists every Kind, for parsing.
func allKinds() [7]claim.Kind {
	return [7]claim.Kind{claim.Claimed, claim.DuplicateDone, claim.InProgress, claim.Stale, claim.Wait, claim.Dead, claim.RetryLater}
}

// parseKind reads a claim result as the claim statement names it.
func parseKind(s string) (claim.Kind, error) {
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
func validateOutcome(o claim.Outcome) error {
	switch o.Result {
	case claim.OutcomeApplied, claim.OutcomeConflict, claim.OutcomeIgnored:
		return nil
	case claim.OutcomeRejected:
		if o.Reason == "" {
			return fmt.Errorf("a rejected outcome needs a reason")
		}
		return nil
	case claim.OutcomeStale:
		return fmt.Errorf("outcome %q is recorded by the registry only", o.Result)
	default:
		return fmt.Errorf("unknown outcome result %q (want applied, rejected, conflict or ignored)", o.Result)
	}
}

// encodeOutcome is the outcome's JSON as stored in the row.
func encodeOutcome(o claim.Outcome) (string, error) {
	o.Reason = cleanText(o.Reason)
	b, err := json.Marshal(o)
	if err != nil {
		return "", fmt.Errorf("registry: encode outcome: %w", err)
	}
	return string(b), nil
}

// decodeOutcome reads a stored outcome (nil when none).
func decodeOutcome(b []byte) (*claim.Outcome, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var o claim.Outcome
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
