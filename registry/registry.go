package registry

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/shared/claim"
)

// Defaults of Options (docs/registry.md, docs/worker-runtime.md); the lease
// and the heartbeat default to those of Config's tags, the backoff to
// claim.DefaultBackoff.
const (
	DefaultMaxAttempts = claim.DefaultMaxAttempts
	DefaultOpTimeout   = 15 * time.Second
	DefaultPruneBatch  = 5000
	// checkTimeout bounds the readiness probe.
	checkTimeout = 2 * time.Second
	// maxTxRetries bounds the immediate re-runs of a statement the server
	// rolled back for a deadlock or serialization failure.
	maxTxRetries  = 3
	maxOwnerBytes = 200
	maxIDBytes    = 512
)

// Options configure a Registry. Zero durations and counts take the defaults
// above; there is deliberately no clock: every time is the database's.
type Options struct {
	// Owner is this worker's stable identity (PROCESSED_EVENT_OWNER, default
	// the hostname). A restarted process with the same Owner reclaims its
	// own in-flight rows at once; two live processes must never share one.
	// Required.
	Owner string
	// LeaseTimeout: a claim not heartbeated for this long may be reclaimed
	// by another owner (PROCESSED_EVENT_LEASE_TIMEOUT_SECONDS, 900 s).
	LeaseTimeout time.Duration
	// HeartbeatInterval: Hold heartbeats its claims this often; must be
	// shorter than LeaseTimeout (PROCESSED_EVENT_HEARTBEAT_INTERVAL_SECONDS,
	// 30 s).
	HeartbeatInterval time.Duration
	// MaxAttempts is the default number of attempts of a retryable failure
	// before the row is dead (per call: Failure.MaxAttempts).
	MaxAttempts int
	// BackoffBase and BackoffCap shape the retry delay after attempt n:
	// min(cap, base·2^(n−1)) scaled by a random factor in [0.5, 1).
	BackoffBase time.Duration
	BackoffCap  time.Duration
	// OpTimeout bounds one registry operation; hitting it is reported as
	// ErrUnavailable (a hung server is an outage).
	OpTimeout time.Duration
	// PruneBatch is the number of rows Prune deletes per statement.
	PruneBatch int
}

func (o Options) withDefaults() Options {
	def := DefaultConfig()
	if o.LeaseTimeout == 0 {
		o.LeaseTimeout = def.LeaseTimeout
	}
	if o.HeartbeatInterval == 0 {
		o.HeartbeatInterval = def.HeartbeatInterval
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	backoff := claim.DefaultBackoff()
	if o.BackoffBase == 0 {
		o.BackoffBase = backoff.RetryBackoffBase
	}
	if o.BackoffCap == 0 {
		o.BackoffCap = backoff.RetryBackoffCap
	}
	if o.OpTimeout == 0 {
		o.OpTimeout = DefaultOpTimeout
	}
	if o.PruneBatch == 0 {
		o.PruneBatch = DefaultPruneBatch
	}
	return o
}

func (o Options) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch {
	case o.Owner == "":
		bad("Owner is empty: set PROCESSED_EVENT_OWNER (default: the hostname) to a stable identity unique to this worker")
	case len(o.Owner) > maxOwnerBytes:
		bad("Owner is %d bytes; the limit is %d", len(o.Owner), maxOwnerBytes)
	case !cleanID(o.Owner):
		bad("Owner %q must be valid UTF-8 without control characters", o.Owner)
	}
	if o.LeaseTimeout < time.Second {
		bad("LeaseTimeout %s must be at least 1s (PROCESSED_EVENT_LEASE_TIMEOUT_SECONDS)", o.LeaseTimeout)
	}
	if o.HeartbeatInterval <= 0 {
		bad("HeartbeatInterval %s must be positive (PROCESSED_EVENT_HEARTBEAT_INTERVAL_SECONDS)", o.HeartbeatInterval)
	} else if o.HeartbeatInterval >= o.LeaseTimeout {
		bad("HeartbeatInterval %s must be shorter than LeaseTimeout %s, or every lease expires between heartbeats", o.HeartbeatInterval, o.LeaseTimeout)
	}
	if o.MaxAttempts < 1 {
		bad("MaxAttempts %d must be at least 1", o.MaxAttempts)
	}
	if o.BackoffBase <= 0 || o.BackoffCap <= 0 {
		bad("BackoffBase %s and BackoffCap %s must be positive", o.BackoffBase, o.BackoffCap)
	} else if o.BackoffBase > o.BackoffCap {
		bad("BackoffBase %s must not exceed BackoffCap %s", o.BackoffBase, o.BackoffCap)
	}
	if o.OpTimeout <= 0 {
		bad("OpTimeout %s must be positive", o.OpTimeout)
	}
	if o.PruneBatch < 1 {
		bad("PruneBatch %d must be at least 1", o.PruneBatch)
	}
	if len(errs) > 0 {
		return fmt.Errorf("registry: invalid options: %w", errors.Join(errs...))
	}
	return nil
}

// Registry is the processed-event registry on one Postgres pool. It is safe
// for concurrent use; one per worker process (claims made through one
// Registry never reclaim each other, see Options.Owner).
type Registry struct {
	pool *pgxpool.Pool
	opts Options

	mu       sync.Mutex
	instance string // identifies this Registry among its owner's incarnations

	hb heartbeats
}

// New returns a Registry on pool (which the caller owns and closes). It
// validates opts; it does not contact Postgres (use Check).
func New(pool *pgxpool.Pool, opts Options) (*Registry, error) {
	if pool == nil {
		return nil, errors.New("registry: nil pool")
	}
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	r := &Registry{pool: pool, opts: opts, instance: newUUID()}
	r.hb.entries = map[uint64]*held{}
	return r, nil
}

// Owner returns the owner identity the registry claims as.
func (r *Registry) Owner() string { return r.opts.Owner }

// Options returns the effective options (defaults applied).
func (r *Registry) Options() Options { return r.opts }

func (r *Registry) currentInstance() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.instance
}

// rotateInstance starts a new incarnation after a claim whose outcome is
// unknown (the connection broke after the statement was sent): rows that
// claim may have created carry the old instance, so this owner can reclaim
// them at once instead of waiting out the lease.
func (r *Registry) rotateInstance(old string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.instance == old {
		r.instance = newUUID()
	}
}

// Check is the readiness probe (an observability.Check): nil when Postgres
// answers within 2 s and the registry tables exist. An unreachable server
// gives an error matching ErrUnavailable; a missing schema says to migrate.
func (r *Registry) Check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, min(checkTimeout, r.opts.OpTimeout))
	defer cancel()
	var ok bool
	err := r.pool.QueryRow(ctx, `SELECT to_regclass('sluice.processed_events') IS NOT NULL
		AND to_regclass('sluice.aggregate_versions') IS NOT NULL
		AND coalesce(obj_description(to_regprocedure('sluice.registry_claim_batch(text[],text[],text[],bigint[],boolean[],uuid[],text,uuid,bigint)'), 'pg_proc'), '') LIKE '%policy:none%'`).Scan(&ok)
	if err != nil {
		return r.wrap(ctx, "check", err)
	}
	if !ok {
		return errors.New("registry: check: tables sluice.processed_events/aggregate_versions or function sluice.registry_claim_batch with policy:none are missing: run `sluice migrate up`")
	}
	return nil
}

// run executes fn with the operation timeout, re-running it when the server
// rolled its transaction back for a deadlock or serialization failure, and
// classifies the final error.
func (r *Registry) run(ctx context.Context, op string, fn func(ctx context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("registry: %s: %w", op, err)
	}
	octx, cancel := context.WithTimeout(ctx, r.opts.OpTimeout)
	defer cancel()
	var err error
	for try := 0; try < maxTxRetries; try++ {
		err = fn(octx)
		if err == nil || !isRetryableTxError(err) {
			break
		}
	}
	if err == nil {
		return nil
	}
	return r.wrap(ctx, op, err)
}

// wrap classifies err: the caller's own cancellation stays a context error,
// an outage becomes *UnavailableError, anything else is wrapped as is.
func (r *Registry) wrap(parent context.Context, op string, err error) error {
	var re *claim.RequestError
	var ll *LeaseLostError
	if errors.As(err, &re) || errors.As(err, &ll) {
		return err
	}
	if perr := parent.Err(); perr != nil {
		return fmt.Errorf("registry: %s: %w (%w)", op, perr, err)
	}
	if isUnavailable(err) {
		return &UnavailableError{Op: op, Err: err}
	}
	return fmt.Errorf("registry: %s: %w", op, err)
}

// newUUID returns a random (version 4) UUID in canonical text form.
func newUUID() string {
	return formatUUID(newTokens(1)[0].Bytes)
}

// newTokens returns n random (version 4) UUIDs, the lease tokens of a
// claim: crypto/rand, like gen_random_uuid(), but generated here, where
// they cost less than on the server (docs/registry.md).
func newTokens(n int) []pgtype.UUID {
	b := make([]byte, 16*n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	out := make([]pgtype.UUID, n)
	for i := range out {
		u := &out[i]
		copy(u.Bytes[:], b[16*i:])
		u.Bytes[6] = u.Bytes[6]&0x0f | 0x40
		u.Bytes[8] = u.Bytes[8]&0x3f | 0x80
		u.Valid = true
	}
	return out
}

// formatUUID returns b in canonical (lower-case) UUID text form.
func formatUUID(b [16]byte) string {
	const hex = "0123456789abcdef"
	var s [36]byte
	j := 0
	for i, c := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			s[j] = '-'
			j++
		}
		s[j], s[j+1] = hex[c>>4], hex[c&0x0f]
		j += 2
	}
	return string(s[:])
}

// validUUID reports whether s is a UUID in its 36-character text form.
func validUUID(s string) bool { return len(s) == 36 && uuid.Validate(s) == nil }

// cleanID reports whether s is valid UTF-8 with no control characters.
func cleanID(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, c := range s {
		if unicode.IsControl(c) {
			return false
		}
	}
	return true
}

// cleanText makes free text (error messages, reasons) storable: valid UTF-8,
// no NUL, bounded.
func cleanText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	return truncate(s, maxReasonBytes)
}
