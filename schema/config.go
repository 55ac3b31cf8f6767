package schema

import (
	"time"

	"github.com/sluicehq/sluice/shared/config"
)

// Modes of EVENT_SCHEMA_MODE: what the door does with an event type that
// has no registered schema.
const (
	// ModeOpen accepts events of unregistered types unchecked.
	ModeOpen = "open"
	// ModeStrict refuses them (422 schema_not_registered).
	ModeStrict = "strict"
)

// Config is the schema registry's section (docs/schemas.md).
type Config struct {
	Mode            string        `env:"EVENT_SCHEMA_MODE" envDefault:"open" doc:"Events of an event type without a registered schema: open (accepted unchecked) or strict (refused with 422 schema_not_registered). Registered types are always validated."`
	RefreshInterval time.Duration `env:"EVENT_SCHEMA_REFRESH_INTERVAL" envDefault:"2s" doc:"How often an API process asks Postgres whether a schema was registered or deleted elsewhere (one cheap query per interval, never per event); its own changes apply at once."`
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
	k.OneOf("EVENT_SCHEMA_MODE", c.Mode, ModeOpen, ModeStrict)
	k.Positive("EVENT_SCHEMA_REFRESH_INTERVAL", c.RefreshInterval)
	return k.Err()
}
