package pipeline

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicehq/sluice/auth"
	"github.com/sluicehq/sluice/pipeline/sluiceconfig"
	"github.com/sluicehq/sluice/shared/config"
)

// TestAPIAuthenticatorKnowsTheAdminTokens: on /v1 the admin tokens are
// authenticated as their admin principals, which hold no /v1 operation —
// so the API answers 403 forbidden (docs/security.md#principals), not 401
// as for an unknown credential; a wrong token is still ErrInvalid.
func TestAPIAuthenticatorKnowsTheAdminTokens(t *testing.T) {
	cfg := &sluiceconfig.Config{}
	cfg.API.Tokens = []config.Secret{"full-token"}
	cfg.API.AdminToken = "operator-token"
	cfg.API.AdminReadToken = "read-token"
	a := apiAuthenticator(cfg, nil, nil)
	for _, tc := range []struct {
		token, principal string
		v1               bool
	}{
		{"full-token", "api-token:1", true},
		{"operator-token", "admin:operator", false},
		{"read-token", "admin:read", false},
	} {
		t.Run(tc.principal, func(t *testing.T) {
			p, err := a.Authenticate(context.Background(), "Bearer "+tc.token)
			if err != nil {
				t.Fatalf("Authenticate: %v (an admin token on /v1 must be a 403, not a 401)", err)
			}
			if p.Name != tc.principal {
				t.Fatalf("principal %q, want %q", p.Name, tc.principal)
			}
			for _, op := range []auth.Operation{auth.OpAppend, auth.OpRead, auth.OpSubscribe, auth.OpCommand} {
				if got := p.AllowsAny(op); got != tc.v1 {
					t.Errorf("%s may %s: %v, want %v", p.Name, op, got, tc.v1)
				}
			}
		})
	}
	if _, err := a.Authenticate(context.Background(), "Bearer wrong"); !errors.Is(err, auth.ErrInvalid) {
		t.Fatalf("a wrong token: %v, want ErrInvalid", err)
	}
	if !a.Required() {
		t.Fatal("SLUICE_API_TOKENS set: credentials must be required")
	}
}
