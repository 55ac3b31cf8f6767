package auth_test

import (
	"math"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/auth"
)

// A rate limit is a finite number >= 0: NaN was accepted ("configuration
// OK") and then refused every request with 429.
func TestConfigValidateRates(t *testing.T) {
	tests := []struct {
		name            string
		appends, cmds   float64
		wantErrContains string
	}{
		{"no limit", 0, 0, ""},
		{"limits", 10, 0.5, ""},
		{"negative appends", -1, 0, "SLUICE_AUTH_RATE_APPENDS"},
		{"NaN appends", math.NaN(), 0, "SLUICE_AUTH_RATE_APPENDS"},
		{"NaN commands", 0, math.NaN(), "SLUICE_AUTH_RATE_COMMANDS"},
		{"infinite commands", 0, math.Inf(1), "SLUICE_AUTH_RATE_COMMANDS"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := auth.DefaultConfig()
			c.AppendRate, c.CommandRate = tc.appends, tc.cmds
			err := c.Validate()
			switch {
			case tc.wantErrContains == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.wantErrContains != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErrContains)):
				t.Fatalf("error %v, want one naming %s", err, tc.wantErrContains)
			}
		})
	}
}
