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

// ShardLeaseName is the lease of one shard's leader (docs/relay.md#shards):
// the relay's name for a store of one shard (the lease from before shards,
// so an upgrade changes nothing), else '<name>/shard-0003' (a relay name
// holds no '/').
func ShardLeaseName(name string, shard, shards int) string {
	if shards <= 1 {
		return name
	}
	return fmt.Sprintf("%s/shard-%04d", name, shard)
}

// members is the heartbeat table of a relay name's live replicas
// (sluice.relay_members): how many replicas share the shards. All times
// are the database's.
type members struct {
	pool   *pgxpool.Pool
	name   string
	holder string
	ttl    time.Duration
}

// memberView is what one heartbeat sees: the live replicas with the
// number of shard leases each holds, and the shards whose lease is held
// (unexpired) by anyone.
type memberView struct {
	counts map[string]int // holder -> unexpired shard leases
	taken  map[int]bool   // shards with an unexpired lease
}

// sqlMemberBeat renews this replica's member row (and forgets rows expired
// long ago).
const sqlMemberBeat = `
WITH gone AS (DELETE FROM sluice.relay_members WHERE name = $1 AND holder <> $2 AND expires_at < now() - make_interval(secs => 10 * $3))
INSERT INTO sluice.relay_members AS m (name, holder, expires_at) VALUES ($1, $2, now() + make_interval(secs => $3))
ON CONFLICT (name, holder) DO UPDATE SET expires_at = excluded.expires_at`

// sqlShardLeases reads the unexpired shard leases of a relay name.
const sqlShardLeases = `SELECT name, holder FROM sluice.relay_leases
WHERE left(name, length($1) + 7) = $1 || '/shard-' AND expires_at > now()`

// sqlLiveMembers reads the live replicas of a relay name: those that
// renewed their row within the last half lease (a live replica renews it
// every loop, a fraction of the lease). A replica that stopped renewing
// (killed) leaves the count after half a lease, before its shard leases
// expire: the others' shares have grown by the time its shards are free,
// so they take them as the leases expire, without a round of releases
// for a replica that holds nothing because it is gone.
const sqlLiveMembers = `SELECT holder FROM sluice.relay_members WHERE name = $1 AND expires_at > now() + make_interval(secs => $2 / 2)`

// beat renews this replica's member row and returns what it sees.
func (m *members) beat(ctx context.Context) (memberView, error) {
	v := memberView{counts: map[string]int{m.holder: 0}, taken: map[int]bool{}}
	if _, err := m.pool.Exec(ctx, sqlMemberBeat, m.name, m.holder, m.ttl.Seconds()); err != nil {
		return v, fmt.Errorf("relay: member heartbeat: %w", err)
	}
	rows, err := m.pool.Query(ctx, sqlLiveMembers, m.name, m.ttl.Seconds())
	if err != nil {
		return v, fmt.Errorf("relay: live members: %w", err)
	}
	var holder string
	if _, err := pgx.ForEachRow(rows, []any{&holder}, func() error { v.counts[holder] += 0; return nil }); err != nil {
		return v, fmt.Errorf("relay: live members: %w", err)
	}
	rows, err = m.pool.Query(ctx, sqlShardLeases, m.name)
	if err != nil {
		return v, fmt.Errorf("relay: shard leases: %w", err)
	}
	var name string
	if _, err := pgx.ForEachRow(rows, []any{&name, &holder}, func() error {
		var shard int
		if _, err := fmt.Sscanf(name[len(m.name):], "/shard-%d", &shard); err == nil {
			v.taken[shard] = true
		}
		if _, live := v.counts[holder]; live {
			v.counts[holder]++
		}
		return nil
	}); err != nil {
		return v, fmt.Errorf("relay: shard leases: %w", err)
	}
	return v, nil
}

// leave deletes this replica's member row (a graceful stop): the others
// count one replica fewer at once.
func (m *members) leave(ctx context.Context) error {
	if _, err := m.pool.Exec(ctx, `DELETE FROM sluice.relay_members WHERE name = $1 AND holder = $2`, m.name, m.holder); err != nil {
		return fmt.Errorf("relay: leave members: %w", err)
	}
	return nil
}

// ShardLease is one row of a relay's shard leases, for operators.
type ShardLease struct {
	Shard int
	LeaseInfo
}

// ShardLeases returns the lease of every shard of relay name that some
// replica ever held (a store of one shard: the one lease, as shard 0).
func ShardLeases(ctx context.Context, pool *pgxpool.Pool, name string, shards int) ([]ShardLease, error) {
	var out []ShardLease
	for sh := range max(shards, 1) {
		info, ok, err := NewLease(pool, ShardLeaseName(name, sh, shards), "", time.Second).Info(ctx)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, ShardLease{Shard: sh, LeaseInfo: info})
		}
	}
	return out, nil
}
