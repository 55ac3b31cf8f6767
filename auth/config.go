package auth

import (
	"math"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/shared/config"
)

// Config configures access control (docs/security.md). The tokens of
// SLUICE_API_TOKENS and the admin tokens stay in api.Settings, where they
// were declared first.
type Config struct {
	Required   bool          `env:"SLUICE_AUTH_REQUIRED" envDefault:"false" doc:"Refuse /v1 requests without credentials (401) even when SLUICE_API_TOKENS is unset, so that only API keys (sluice auth key create) get in. SLUICE_API_TOKENS set implies it."`
	KeyRefresh time.Duration `env:"SLUICE_AUTH_KEY_REFRESH" envDefault:"5s" doc:"How long the API serves API-key lookups from its in-memory snapshot of sluice.auth_keys: a key revoked or rotated by another process stops working within this time."`
	// Per-principal limits (0: none).
	AppendRate       float64 `env:"SLUICE_AUTH_RATE_APPENDS" envDefault:"0" doc:"Most event appends (POST /v1/streams/…/events requests) per second per principal, with a burst of twice that (at least 1); one more is answered 429 with Retry-After. 0: no limit."`
	CommandRate      float64 `env:"SLUICE_AUTH_RATE_COMMANDS" envDefault:"0" doc:"Most command requests (create, update, delete, batch) per second per principal, with a burst of twice that (at least 1); one more is answered 429 with Retry-After. 0: no limit."`
	MaxSubscriptions int     `env:"SLUICE_AUTH_MAX_SUBSCRIPTIONS" envDefault:"0" doc:"Most open Server-Sent Events subscriptions per principal in one API process; one more is answered 429 with Retry-After. 0: no limit."`
	// OIDC bearer JWTs (docs/security.md#oidc-bearer-tokens).
	OIDCIssuer         string        `env:"SLUICE_AUTH_OIDC_ISSUER" doc:"Issuer (iss) of the OIDC bearer JWTs the API accepts; with SLUICE_AUTH_OIDC_AUDIENCE and SLUICE_AUTH_OIDC_JWKS_URL it turns them on. Unset: no JWTs."`
	OIDCAudience       string        `env:"SLUICE_AUTH_OIDC_AUDIENCE" doc:"Audience (aud) a JWT must name to be accepted."`
	OIDCJWKSURL        string        `env:"SLUICE_AUTH_OIDC_JWKS_URL" doc:"URL of the issuer's JSON Web Key Set, the keys JWTs are verified with (https, or http on localhost)."`
	OIDCJWKSRefresh    time.Duration `env:"SLUICE_AUTH_OIDC_JWKS_REFRESH" envDefault:"1h" doc:"How often the JWKS is read again; a JWT signed with a key id not yet known makes it read at once (at most every 10 s), so a key rotation of the issuer needs no restart."`
	OIDCClockSkew      time.Duration `env:"SLUICE_AUTH_OIDC_CLOCK_SKEW" envDefault:"60s" doc:"Clock difference tolerated on a JWT's exp, nbf and iat."`
	OIDCPrincipalClaim string        `env:"SLUICE_AUTH_OIDC_PRINCIPAL_CLAIM" envDefault:"sub" doc:"Claim naming a JWT's principal; it is recorded as oidc:{value}."`
	OIDCGrantsClaim    string        `env:"SLUICE_AUTH_OIDC_GRANTS_CLAIM" envDefault:"sluice_grants" doc:"Claim holding a JWT's grants: an array of op[,op…]=pattern strings (docs/security.md#permissions)."`
}

// OIDCEnabled reports whether OIDC bearer JWTs are configured.
func (c Config) OIDCEnabled() bool { return c.OIDCIssuer != "" }

// DefaultConfig is the section with the defaults of its tags.
func DefaultConfig() Config {
	var c Config
	config.Defaults(&c)
	return c
}

// Validate checks the section; every problem is a *config.VarError.
func (c Config) Validate() error {
	k := &config.Checker{}
	k.Positive("SLUICE_AUTH_KEY_REFRESH", c.KeyRefresh)
	// NaN passed "< 0" and made every request 429 (a bucket of burst
	// int(NaN)); +Inf is spelled 0 (no limit).
	for _, v := range []struct {
		name string
		r    float64
	}{{"SLUICE_AUTH_RATE_APPENDS", c.AppendRate}, {"SLUICE_AUTH_RATE_COMMANDS", c.CommandRate}} {
		if !(v.r >= 0) || math.IsInf(v.r, 0) {
			k.Fail(v.name, strconv.FormatFloat(v.r, 'g', -1, 64), "must be a finite number >= 0 (0: no limit)")
		}
	}
	k.AtLeast("SLUICE_AUTH_MAX_SUBSCRIPTIONS", int64(c.MaxSubscriptions), 0)
	if c.OIDCIssuer != "" || c.OIDCAudience != "" || c.OIDCJWKSURL != "" {
		for name, v := range map[string]string{"SLUICE_AUTH_OIDC_ISSUER": c.OIDCIssuer, "SLUICE_AUTH_OIDC_AUDIENCE": c.OIDCAudience, "SLUICE_AUTH_OIDC_JWKS_URL": c.OIDCJWKSURL} {
			if v == "" {
				k.Fail(name, "", "must be set with the other SLUICE_AUTH_OIDC_* variables")
			}
		}
		if c.OIDCJWKSURL != "" {
			if err := checkJWKSURL(c.OIDCJWKSURL); err != nil {
				k.Fail("SLUICE_AUTH_OIDC_JWKS_URL", c.OIDCJWKSURL, "%v", err)
			}
		}
		k.Positive("SLUICE_AUTH_OIDC_JWKS_REFRESH", c.OIDCJWKSRefresh)
		if c.OIDCClockSkew < 0 || c.OIDCClockSkew > 10*time.Minute {
			k.Fail("SLUICE_AUTH_OIDC_CLOCK_SKEW", c.OIDCClockSkew.String(), "must be between 0 and 10m")
		}
	}
	return k.Err()
}
