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
	"github.com/sluicehq/sluice/shared/config"
)

// Defaults of Config's Go-only knobs (docs/registry.md,
// docs/worker-runtime.md); the lease and the heartbeat default to those of
// Config's tags, the backoff to claim.DefaultBackoff.
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

// Deps are the resources of a Registry; it closes none of them.
type Deps struct {
	// Pool is the Postgres pool, migrations applied. Required.
	Pool *pgxpool.Pool
}

// Option is a test hook of a Registry (docs/architecture.md, "One
// construction convention"); there is none, and deliberately no clock:
// every time is the database's.
type Option func(*hooks)

type hooks struct{}

// withDefaults returns c with every default applied: the defaults of the
// PROCESSED_EVENT_* tags for what the caller left zero (a zero prune
// interval stays zero: it means never), then those of the Go-only knobs.
func (c Config) withDefaults() Config {
	config.FillZero(&c, "PROCESSED_EVENT_PRUNE_INTERVAL")
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	backoff := claim.DefaultBackoff()
	if c.BackoffBase == 0 {
		c.BackoffBase = backoff.RetryBackoffBase
	}
	if c.BackoffCap == 0 {
		c.BackoffCap = backoff.RetryBackoffCap
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = DefaultOpTimeout
	}
	if c.PruneBatch == 0 {
		c.PruneBatch = DefaultPruneBatch
	}
	return c
}

// check is what New refuses of a defaulted Config.
func (c Config) check() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch {
	case c.Owner == "":
		bad("Owner is empty: set PROCESSED_EVENT_OWNER (default: the hostname) to a stable identity unique to this worker")
	case len(c.Owner) > maxOwnerBytes:
		bad("Owner is %d bytes; the limit is %d", len(c.Owner), maxOwnerBytes)
	case !cleanID(c.Owner):
		bad("Owner %q must be valid UTF-8 without control characters", c.Owner)
	}
	if c.LeaseTimeout < time.Second {
		bad("LeaseTimeout %s must be at least 1s (PROCESSED_EVENT_LEASE_TIMEOUT_SECONDS)", c.LeaseTimeout)
	}
	if c.HeartbeatInterval <= 0 {
		bad("HeartbeatInterval %s must be positive (PROCESSED_EVENT_HEARTBEAT_INTERVAL_SECONDS)", c.HeartbeatInterval)
	} else if c.HeartbeatInterval >= c.LeaseTimeout {
		bad("HeartbeatInterval %s must be shorter than LeaseTimeout %s, or every lease expires between heartbeats", c.HeartbeatInterval, c.LeaseTimeout)
	}
	if c.MaxAttempts < 1 {
		bad("MaxAttempts %d must be at least 1", c.MaxAttempts)
	}
	if c.BackoffBase <= 0 || c.BackoffCap <= 0 {
		bad("BackoffBase %s and BackoffCap %s must be positive", c.BackoffBase, c.BackoffCap)
	} else if c.BackoffBase > c.BackoffCap {
		bad("BackoffBase %s must not exceed BackoffCap %s", c.BackoffBase, c.BackoffCap)
	}
	if c.OpTimeout <= 0 {
		bad("OpTimeout %s must be positive", c.OpTimeout)
	}
	if c.PruneBatch < 1 {
		bad("PruneBatch %d must be at least 1", c.PruneBatch)
	}
	if len(errs) > 0 {
		return fmt.Errorf("registry: invalid options: %w", errors.Join(errs...))
	}
	return nil
}

// Registry is the processed-event registry on one Postgres pool. It is safe
// for concurrent use; one per worker process (claims made through one
// Registry never reclaim each other, see Config.Owner).
type Registry struct {
	pool *pgxpool.Pool
	cfg  Config // defaults applied (Config.withDefaults)

	mu       sync.Mutex
	instance string // identifies this Registry among its owner's incarnations

	hb heartbeats
}

// New returns a Registry on deps.Pool (which the caller owns and closes),
// with cfg's zero fields at their defaults. It validates cfg; it does not
// contact Postgres (use Check).
func New(cfg Config, deps Deps, opts ...Option) (*Registry, error) {
	if deps.Pool == nil {
		return nil, errors.New("registry: nil pool")
	}
	var h hooks
	for _, o := range opts {
		o(&h)
	}
	cfg = cfg.withDefaults()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	r := &Registry{pool: deps.Pool, cfg: cfg, instance: newUUID()}
	r.hb.entries = map[uint64]*held{}
	return r, nil
}

// Owner returns the owner identity the registry claims as.
func (r *Registry) Owner() string { return r.cfg.Owner }

// Config returns the effective configuration (defaults applied).
func (r *Registry) Config() Config { return r.cfg }

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
	ctx, cancel := context.WithTimeout(ctx, min(checkTimeout, r.cfg.OpTimeout))
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
	octx, cancel := context.WithTimeout(ctx, r.cfg.OpTimeout)
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
