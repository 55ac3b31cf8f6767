package auth

import (
	"time"

	"github.com/sluicehq/sluice/shared/config"
)

// Config configures access control (docs/security.md). The tokens of
// SLUICE_API_TOKENS and the admin tokens stay in api.Config, where they
// were declared first.
type Config struct {
	Required   bool          `env:"SLUICE_AUTH_REQUIRED" envDefault:"false" doc:"Refuse /v1 requests without credentials (401) even when SLUICE_API_TOKENS is unset, so that only API keys (sluice auth key create) get in. SLUICE_API_TOKENS set implies it."`
	KeyRefresh time.Duration `env:"SLUICE_AUTH_KEY_REFRESH" envDefault:"5s" doc:"How long the API serves API-key lookups from its in-memory snapshot of sluice.auth_keys: a key revoked or rotated by another process stops working within this time."`
	// Per-principal limits (0: none).
	AppendRate       float64 `env:"SLUICE_AUTH_RATE_APPENDS" envDefault:"0" doc:"Most event appends (POST /v1/streams/…/events requests) per second per principal, with a burst of twice that (at least 1); one more is answered 429 with Retry-After. 0: no limit."`
	CommandRate      float64 `env:"SLUICE_AUTH_RATE_COMMANDS" envDefault:"0" doc:"Most command requests (create, update, delete, batch) per second per principal, with a burst of twice that (at least 1); one more is answered 429 with Retry-After. 0: no limit."`
	MaxSubscriptions int     `env:"SLUICE_AUTH_MAX_SUBSCRIPTIONS" envDefault:"0" doc:"Most open Server-Sent Events subscriptions per principal in one API process; one more is answered 429 with Retry-After. 0: no limit."`
}

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
	if c.AppendRate < 0 {
		k.Fail("SLUICE_AUTH_RATE_APPENDS", "", "must not be negative")
	}
	if c.CommandRate < 0 {
		k.Fail("SLUICE_AUTH_RATE_COMMANDS", "", "must not be negative")
	}
	k.AtLeast("SLUICE_AUTH_MAX_SUBSCRIPTIONS", int64(c.MaxSubscriptions), 0)
	return k.Err()
}
