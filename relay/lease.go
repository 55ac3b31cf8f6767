package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Lease is the leader lease of one relay name (table sluice.relay_leases).
// All times are the database's.
type Lease struct {
	pool   *pgxpool.Pool
	name   string
	holder string
	ttl    time.Duration
}

// LeaseInfo is the current row of a lease.
type LeaseInfo struct {
	Holder    string
	Epoch     int64
	ExpiresAt time.Time
	Expired   bool
}

// NewLease returns the lease of relay name for holder with the given TTL.
func NewLease(pool *pgxpool.Pool, name, holder string, ttl time.Duration) *Lease {
	return &Lease{pool: pool, name: name, holder: holder, ttl: ttl}
}

// TryAcquire takes the lease if it is free or expired, returning the new
// epoch (one more than the previous holder's). ok is false when another
// holder's lease is still valid.
func (l *Lease) TryAcquire(ctx context.Context) (epoch int64, ok bool, err error) {
	err = l.pool.QueryRow(ctx, `
INSERT INTO sluice.relay_leases AS l (name, holder, epoch, expires_at)
VALUES ($1, $2, 1, now() + make_interval(secs => $3))
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, epoch = l.epoch + 1,
  acquired_at = now(), renewed_at = now(), expires_at = excluded.expires_at
WHERE l.expires_at < now()
RETURNING epoch`, l.name, l.holder, l.ttl.Seconds()).Scan(&epoch)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("relay: acquire lease: %w", err)
	}
	return epoch, true, nil
}

// Renew extends the lease held with epoch. ok is false when it was lost
// (another holder took it after it expired).
func (l *Lease) Renew(ctx context.Context, epoch int64) (ok bool, err error) {
	tag, err := l.pool.Exec(ctx, `
UPDATE sluice.relay_leases SET renewed_at = now(), expires_at = now() + make_interval(secs => $4)
WHERE name = $1 AND holder = $2 AND epoch = $3`, l.name, l.holder, epoch, l.ttl.Seconds())
	if err != nil {
		return false, fmt.Errorf("relay: renew lease: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// Release gives the lease up at once so a standby takes over without
// waiting for it to expire.
func (l *Lease) Release(ctx context.Context, epoch int64) error {
	_, err := l.pool.Exec(ctx, `
UPDATE sluice.relay_leases SET expires_at = now() - interval '1 millisecond'
WHERE name = $1 AND holder = $2 AND epoch = $3`, l.name, l.holder, epoch)
	if err != nil {
		return fmt.Errorf("relay: release lease: %w", err)
	}
	return nil
}

// Info returns the lease row; found is false when no relay ever held it.
func (l *Lease) Info(ctx context.Context) (info LeaseInfo, found bool, err error) {
	err = l.pool.QueryRow(ctx, `SELECT holder, epoch, expires_at, expires_at < now() FROM sluice.relay_leases WHERE name = $1`, l.name).
		Scan(&info.Holder, &info.Epoch, &info.ExpiresAt, &info.Expired)
	if errors.Is(err, pgx.ErrNoRows) {
		return LeaseInfo{}, false, nil
	}
	if err != nil {
		return LeaseInfo{}, false, fmt.Errorf("relay: lease info: %w", err)
	}
	return info, true, nil
}
