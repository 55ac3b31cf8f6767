package eventstore

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/shared/config"
	"github.com/sluicehq/sluice/shared/crashpoint"
)

// Knob values of Config the store understands.
const (
	MismatchError     = "error"
	MismatchWarn      = "warn"
	AllocatorPostgres = "postgres"
	AllocatorOff      = "off"
)

// NotifyChannel is the Postgres channel the store NOTIFYs on: once per
// reservation ("reserved FIRST LAST") and once per commit or repair
// ("committed FIRST LAST"). The relay LISTENs on it as a wake-up.
const NotifyChannel = "sluice_appends"

// Deps are the resources a Store works on; it closes none of them.
type Deps struct {
	// Pool is the Postgres pool, migrations applied. Required, but with
	// a shard map of several servers (Config.ShardMap), where ShardPools
	// hold the shards.
	Pool *pgxpool.Pool
	// ShardPools are the pools of the servers of Config.ShardMap, by the
	// URL the map names (migrations applied on each). Required for every
	// server of a map; unused without one.
	ShardPools map[string]*pgxpool.Pool
	// Bucket holds the segments. Required.
	Bucket objstore.Bucket
	// Logger receives error-level idempotency mismatches (warn mode) and
	// recovery messages. Default: slog.Default().
	Logger *slog.Logger
}

// Option is a test hook of a Store (docs/architecture.md, "One
// construction convention"); production passes none but WithCrasher.
type Option func(*hooks)

type hooks struct {
	crash *crashpoint.Crasher
	now   func() time.Time
	// gapNow is the clock of the committer's stream test (is an append
	// part of a steady stream, committer.go): time.Now, or a test's.
	gapNow func() time.Time
}

// WithCrasher hands the store its crash points, CrashWorker:after_reserve
// (the reservation transaction committed, the segment not yet written)
// and CrashWorker:after_put (the segment written, the rows not yet
// committed). A crashpoint.Func crasher whose error stops the group leaves
// the rows exactly as a crashed process would.
func WithCrasher(c *crashpoint.Crasher) Option { return func(h *hooks) { h.crash = c } }

// WithClock replaces time.Now as the clock of an absent occurred_at.
func WithClock(now func() time.Time) Option { return func(h *hooks) { h.now = now } }

// CrashWorker is the store's name in its crash points
// ("eventstore:after_reserve", "eventstore:after_put").
const CrashWorker = "eventstore"

// withDefaults returns c with every default applied: the EVENT_STORE_*
// tags for what the caller left unset, then the library knobs.
func (c Config) withDefaults() (Config, error) {
	config.FillZero(&c, "EVENT_STORE_GROUP_COMMIT_LINGER") // the defaults of the EVENT_STORE_* tags for what the caller left unset (a zero linger is off)
	switch c.IdempotencyMismatchMode {
	case MismatchError, MismatchWarn:
	default:
		return c, fmt.Errorf("eventstore: EVENT_STORE_IDEMPOTENCY_MISMATCH_MODE must be %q or %q, got %q", MismatchError, MismatchWarn, c.IdempotencyMismatchMode)
	}
	switch c.SequenceAllocatorMode {
	case AllocatorPostgres, AllocatorOff:
	default:
		return c, fmt.Errorf("eventstore: EVENT_STORE_SEQUENCE_ALLOCATOR_MODE must be %q or %q, got %q", AllocatorPostgres, AllocatorOff, c.SequenceAllocatorMode)
	}
	if c.Shards < 1 || c.Shards > MaxShards {
		return c, fmt.Errorf("eventstore: EVENT_STORE_SHARDS must be between 1 and %d, got %d", MaxShards, c.Shards)
	}
	if c.WriterID == "" {
		c.WriterID = "writer-" + randomID()
	}
	if c.MaxInFlightGroups <= 0 {
		c.MaxInFlightGroups = 4
	}
	if c.GroupCommitLinger < 0 {
		return c, fmt.Errorf("eventstore: EVENT_STORE_GROUP_COMMIT_LINGER must not be negative (0 turns it off), got %s", c.GroupCommitLinger)
	}
	if c.MaxReservingGroups <= 0 {
		c.MaxReservingGroups = 1
	}
	c.MaxReservingGroups = min(c.MaxReservingGroups, c.MaxInFlightGroups)
	if c.ReadConcurrency <= 0 {
		c.ReadConcurrency = 8
	}
	return c, nil
}

func (c Config) mismatchWarn() bool { return c.IdempotencyMismatchMode == MismatchWarn }
func (c Config) allocatorOff() bool { return c.SequenceAllocatorMode == AllocatorOff }
