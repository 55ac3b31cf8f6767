package registry

import (
	"os"
	"time"

	"github.com/sluicehq/sluice/shared/claim"

	"github.com/sluicehq/sluice/shared/config"
)

// Config configures the processed-event registry (docs/registry.md).
type Config struct {
	Enabled           bool          `env:"ENABLE_PROCESSED_EVENT_REGISTRY" envDefault:"true" doc:"Must be true: the registry is not optional, and false is refused at start-up."`
	Owner             string        `env:"PROCESSED_EVENT_OWNER" docDefault:"hostname" doc:"Stable owner identity of this worker; a restarted worker with the same owner reclaims its in-flight rows at once."`
	LeaseTimeout      time.Duration `env:"PROCESSED_EVENT_LEASE_TIMEOUT_SECONDS" envDefault:"900" doc:"Lease of a claim; an expired claim may be taken by another owner."`
	HeartbeatInterval time.Duration `env:"PROCESSED_EVENT_HEARTBEAT_INTERVAL_SECONDS" envDefault:"30" doc:"Heartbeat interval of a claim; must be shorter than the lease."`
	RetentionDays     int           `env:"PROCESSED_EVENT_RETENTION_DAYS" envDefault:"7" doc:"Age after which done and skipped_stale rows are pruned."`
	PruneInterval     time.Duration `env:"PROCESSED_EVENT_PRUNE_INTERVAL" envDefault:"1h" doc:"How often each projection worker prunes its own handlers' done and skipped_stale rows older than the retention (0: never; sluice registry prune still works). The instance worker's rows are command statuses and are kept."`

	// The knobs below have no variable of their own (Go only); New applies
	// their defaults when zero.

	// MaxAttempts is the default number of attempts of a retryable failure
	// before the row is dead (per call: Failure.MaxAttempts); BackoffBase
	// and BackoffCap shape the retry delay after attempt n: min(cap,
	// base·2^(n−1)) scaled by a random factor in [0.5, 1). They are the
	// retry of the worker the registry serves (WithRetry). Defaults:
	// DefaultMaxAttempts and claim.DefaultBackoff.
	MaxAttempts             int
	BackoffBase, BackoffCap time.Duration
	// OpTimeout bounds one registry operation; hitting it is reported as
	// ErrUnavailable (a hung server is an outage). Default DefaultOpTimeout.
	OpTimeout time.Duration
	// PruneBatch is the number of rows Prune deletes per statement.
	// Default DefaultPruneBatch.
	PruneBatch int
}

// DefaultConfig is the section with the defaults of its tags, as a process
// with none of its variables set reads it (before Derive).
func DefaultConfig() Config {
	var c Config
	config.Defaults(&c)
	return c
}

// Derive defaults the owner to the hostname.
func (r *Config) Derive() {
	if r.Owner == "" {
		if h, err := os.Hostname(); err == nil {
			r.Owner = h
		}
	}
}

// Validate checks the section; every problem is a *config.VarError.
func (rg Config) Validate() error {
	k := &config.Checker{}
	if !rg.Enabled {
		k.Fail("ENABLE_PROCESSED_EVENT_REGISTRY", "false", "the processed-event registry is not optional: without it duplicates, crashes and replays would repeat side effects (docs/architecture.md#the-guarantees, docs/registry.md); remove the variable or set it to true")
	}
	if rg.Owner == "" {
		k.Fail("PROCESSED_EVENT_OWNER", "", "must be set (the hostname could not be read)")
	}
	k.Positive("PROCESSED_EVENT_LEASE_TIMEOUT_SECONDS", rg.LeaseTimeout)
	k.Positive("PROCESSED_EVENT_HEARTBEAT_INTERVAL_SECONDS", rg.HeartbeatInterval)
	if rg.HeartbeatInterval >= rg.LeaseTimeout {
		k.Fail("PROCESSED_EVENT_HEARTBEAT_INTERVAL_SECONDS", rg.HeartbeatInterval.String(), "must be shorter than PROCESSED_EVENT_LEASE_TIMEOUT_SECONDS (%s)", rg.LeaseTimeout)
	}
	k.AtLeast("PROCESSED_EVENT_RETENTION_DAYS", int64(rg.RetentionDays), 1)
	if rg.PruneInterval < 0 {
		k.Fail("PROCESSED_EVENT_PRUNE_INTERVAL", rg.PruneInterval.String(), "must be 0 (never) or positive")
	}
	return k.Err()
}

// Retention is PROCESSED_EVENT_RETENTION_DAYS as a duration.
func (c Config) Retention() time.Duration { return time.Duration(c.RetentionDays) * 24 * time.Hour }

// WithRetry returns c with the retry of the worker the registry serves
// (the WORKER_* section's InstanceRetry or ProjectionRetry: the WORKER_RETRY_*
// backoff and the worker's number of attempts) copied in.
func (c Config) WithRetry(retry claim.Retry) Config {
	c.MaxAttempts, c.BackoffBase, c.BackoffCap = retry.MaxAttempts, retry.BackoffBase, retry.BackoffCap
	return c
}
