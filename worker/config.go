package worker

import (
	"time"

	"github.com/sluicehq/sluice/shared/claim"

	"github.com/sluicehq/sluice/shared/config"
)

// Settings is the WORKER_* section (docs/worker-runtime.md): the settings
// every worker of a process shares. A Consumer takes it embedded in its
// Config; the instance and projection workers take it as their Worker
// section and pick their retry from it (InstanceRetry, ProjectionRetry).
type Settings struct {
	Concurrency              int `env:"WORKER_CONCURRENCY" envDefault:"16" doc:"Records of different aggregates processed at once per worker."`
	InstanceMaxRetryAttempts int `env:"INSTANCE_WORKER_MAX_RETRY_ATTEMPTS" envDefault:"5" doc:"Attempts of a retryable instance-worker failure before the DLQ."`
	ProjectionMaxRetries     int `env:"PROJECTION_WORKER_MAX_RETRIES" envDefault:"5" doc:"Attempts of a retryable projection failure before the DLQ."`
	claim.Backoff
	ShutdownTimeout time.Duration `env:"SHUTDOWN_TIMEOUT" envDefault:"30s" doc:"Time a worker has after SIGTERM to drain in-flight work and commit."`
	SessionTimeout  time.Duration `env:"KAFKA_SESSION_TIMEOUT" envDefault:"45s" doc:"Consumer-group session timeout of the workers: a worker killed without a clean shutdown keeps its partitions this long. 6s to 30m (the brokers' default group.min/max.session.timeout.ms)."`
	PausePoll       time.Duration `env:"WORKER_PAUSE_POLL_INTERVAL" envDefault:"2s" doc:"How often a worker reads its group's pause flag (sluice consumer pause/resume): a pause or resume takes effect within this time."`
	// RoundLinger: see docs/worker-runtime.md, "Round linger". Zero turns
	// it off, for a Go caller that leaves it unset too.
	RoundLinger time.Duration `env:"WORKER_ROUND_LINGER" envDefault:"10ms" doc:"While a round of the worker is in flight, how long a record may wait for more to join its round (one claim, one handler batch, one mark_done for all of them) before a round starts for it anyway; a worker with no round in flight starts at once. 0: every poll starts a round."`
	// CommitInterval: see docs/worker-runtime.md, "Commit interval". Zero
	// commits at every turn, for a Go caller that leaves it unset too.
	CommitInterval time.Duration `env:"WORKER_COMMIT_INTERVAL" envDefault:"100ms" doc:"Least time between two offset commits of a worker while it runs: the finished prefix of every partition is committed together at most this often (always after its records are marked done), and at once before a rebalance, an operator pause and the drain. A crash re-delivers at most this much more (acknowledged as duplicates). 0: a commit at every turn of the loop."`
}

// Validate checks the section; every problem is a *config.VarError.
func (w Settings) Validate() error {
	k := &config.Checker{}
	k.AtLeast("WORKER_CONCURRENCY", int64(w.Concurrency), 1)
	k.AtLeast("INSTANCE_WORKER_MAX_RETRY_ATTEMPTS", int64(w.InstanceMaxRetryAttempts), 1)
	k.AtLeast("PROJECTION_WORKER_MAX_RETRIES", int64(w.ProjectionMaxRetries), 1)
	k.Positive("WORKER_RETRY_BACKOFF_BASE", w.RetryBackoffBase)
	if w.RetryBackoffCap < w.RetryBackoffBase {
		k.Fail("WORKER_RETRY_BACKOFF_CAP", w.RetryBackoffCap.String(), "must be at least WORKER_RETRY_BACKOFF_BASE (%s)", w.RetryBackoffBase)
	}
	k.Positive("SHUTDOWN_TIMEOUT", w.ShutdownTimeout)
	if w.RoundLinger < 0 {
		k.Fail("WORKER_ROUND_LINGER", w.RoundLinger.String(), "must not be negative (0 turns the linger off)")
	}
	if w.CommitInterval < 0 {
		k.Fail("WORKER_COMMIT_INTERVAL", w.CommitInterval.String(), "must not be negative (0 commits at every turn)")
	}
	if w.SessionTimeout < 6*time.Second || w.SessionTimeout > 30*time.Minute {
		k.Fail("KAFKA_SESSION_TIMEOUT", w.SessionTimeout.String(), "must be between 6s and 30m (the brokers' group.min.session.timeout.ms and group.max.session.timeout.ms defaults)")
	}
	return k.Err()
}

// InstanceRetry is the retry of the instance worker's failures
// (INSTANCE_WORKER_MAX_RETRY_ATTEMPTS attempts, the WORKER_RETRY_* backoff).
func (c Settings) InstanceRetry() claim.Retry {
	return claim.Retry{MaxAttempts: c.InstanceMaxRetryAttempts, BackoffBase: c.RetryBackoffBase, BackoffCap: c.RetryBackoffCap}
}

// ProjectionRetry is the retry of a projection's failures
// (PROJECTION_WORKER_MAX_RETRIES attempts, the WORKER_RETRY_* backoff).
func (c Settings) ProjectionRetry() claim.Retry {
	return claim.Retry{MaxAttempts: c.ProjectionMaxRetries, BackoffBase: c.RetryBackoffBase, BackoffCap: c.RetryBackoffCap}
}
