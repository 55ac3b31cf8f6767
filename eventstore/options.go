package eventstore

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluicehq/sluice/shared/config"
	"github.com/sluicehq/sluice/shared/envelope"
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

// Options configure a Store. Zero values take the defaults of docs/eventstore.md.
type Options struct {
	// Config holds the EVENT_STORE_* knobs (group commit, idempotency
	// mismatch mode, sequence allocator mode, append timeout, limits).
	Config Config
	// Logger receives error-level idempotency mismatches (warn mode) and
	// recovery messages. Default: slog.Default().
	Logger *slog.Logger
	// WriterID names this writer in appends.writer_id. Default: a random id
	// per Store.
	WriterID string
	// MaxInFlightGroups bounds the groups between reservation and commit at
	// once (pipelining: a group reserves while the previous one writes its
	// segment). Default 4.
	MaxInFlightGroups int
	// MaxReservingGroups bounds the groups in their reservation round trip
	// at once (at most MaxInFlightGroups). Default 1: the next group gathers
	// while one reserves, which keeps groups large. With more, a group may
	// reserve while the previous one waits for its WAL flush (the log_head
	// lock is released before the flush, so they overlap), at the price of
	// smaller groups; positions still follow reservation commit order.
	MaxReservingGroups int
	// ReadConcurrency bounds parallel ranged GETs of one read. Default 8.
	ReadConcurrency int
	// Now is the clock for absent occurred_at. Default time.Now.
	Now func() time.Time

	hooks *testHooks
}

// testHooks are crash points for tests (never set in production). A hook
// returning an error stops the group at that point exactly as a crashed
// process would: no clean-up, rows stay as they are.
type testHooks struct {
	// afterReserve runs after the reservation transaction committed.
	afterReserve func(ctx context.Context, segmentKey string) error
	// afterPut runs after the segment was created.
	afterPut func(ctx context.Context, segmentKey string) error
}

type settings struct {
	maxWait      time.Duration
	maxEvents    int
	mismatchWarn bool
	allocatorOff bool
	appendTO     time.Duration
	limits       envelope.Limits
	maxLine      int // EVENT_STORE_MAX_ENVELOPE_BYTES: bound of a stored line
	logger       *slog.Logger
	writerID     string
	maxInFlight  int
	maxReserving int
	readConc     int
	now          func() time.Time
	hooks        testHooks
}

func (o Options) settings() (settings, error) {
	c := o.Config
	config.FillZero(&c) // the defaults of the EVENT_STORE_* tags for what the caller left unset
	s := settings{
		maxWait:      c.GroupCommitMaxWait,
		maxEvents:    c.GroupCommitMaxEvents,
		appendTO:     c.AppendTimeout,
		limits:       c.Limits,
		logger:       o.Logger,
		writerID:     o.WriterID,
		maxInFlight:  o.MaxInFlightGroups,
		maxReserving: o.MaxReservingGroups,
		readConc:     o.ReadConcurrency,
		now:          o.Now,
	}
	s.maxLine = c.MaxEnvelopeBytes
	switch c.IdempotencyMismatchMode {
	case "", MismatchError:
	case MismatchWarn:
		s.mismatchWarn = true
	default:
		return s, fmt.Errorf("eventstore: EVENT_STORE_IDEMPOTENCY_MISMATCH_MODE must be %q or %q, got %q", MismatchError, MismatchWarn, c.IdempotencyMismatchMode)
	}
	switch c.SequenceAllocatorMode {
	case "", AllocatorPostgres:
	case AllocatorOff:
		s.allocatorOff = true
	default:
		return s, fmt.Errorf("eventstore: EVENT_STORE_SEQUENCE_ALLOCATOR_MODE must be %q or %q, got %q", AllocatorPostgres, AllocatorOff, c.SequenceAllocatorMode)
	}
	if s.logger == nil {
		s.logger = slog.Default()
	}
	if s.writerID == "" {
		s.writerID = "writer-" + randomID()
	}
	if s.maxInFlight <= 0 {
		s.maxInFlight = 4
	}
	if s.maxReserving <= 0 {
		s.maxReserving = 1
	}
	s.maxReserving = min(s.maxReserving, s.maxInFlight)
	if s.readConc <= 0 {
		s.readConc = 8
	}
	if s.now == nil {
		s.now = time.Now
	}
	if o.hooks != nil {
		s.hooks = *o.hooks
	}
	return s, nil
}
