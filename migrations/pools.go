package migrations

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Pools are the Postgres pools of one process by role
// (docs/scale-out.md#the-roles). Roles whose URLs are equal share one pool,
// so a process configured with DATABASE_URL alone holds one pool, as
// before the split. A role the process did not open is nil.
type Pools struct {
	Main, Store, Registry *pgxpool.Pool
	// StoreShards are the pools of the store role's databases by URL: the
	// store role's own and the servers of the shard map
	// (PostgresConfig.ShardURLs), for eventstore.Deps.ShardPools; nil when
	// the store role was not opened.
	StoreShards map[string]*pgxpool.Pool
	opened      []*pgxpool.Pool
}

// Of returns the pool of role r (nil when it was not opened).
func (p *Pools) Of(r Role) *pgxpool.Pool {
	switch r {
	case RoleStore:
		return p.Store
	case RoleRegistry:
		return p.Registry
	default:
		return p.Main
	}
}

func (p *Pools) set(r Role, pool *pgxpool.Pool) {
	switch r {
	case RoleStore:
		p.Store = pool
	case RoleRegistry:
		p.Registry = pool
	default:
		p.Main = pool
	}
}

// Close closes every pool once.
func (p *Pools) Close() {
	for _, pool := range p.opened {
		pool.Close()
	}
	p.opened = nil
}

// OpenPools opens the pools of roles (all when none is named): one per
// distinct database of c (Databases), each with open (the caller's pool
// settings and checks; its errors should name db.Vars(), never the URL). A
// role without a URL is an error naming its variable. On an error nothing
// stays open.
func OpenPools(ctx context.Context, c PostgresConfig, open func(ctx context.Context, db Database) (*pgxpool.Pool, error), roles ...Role) (*Pools, error) {
	if len(roles) == 0 {
		roles = Roles()
	}
	for _, r := range roles {
		if c.URLOf(r) == "" {
			if r == RoleMain {
				return nil, errors.New("DATABASE_URL is not set")
			}
			return nil, fmt.Errorf("%s is not set, nor DATABASE_URL, its default", r.Var())
		}
	}
	p := &Pools{}
	for _, db := range c.Databases(roles...) {
		pool, err := open(ctx, db)
		if err != nil {
			p.Close()
			return nil, err
		}
		p.opened = append(p.opened, pool)
		for _, r := range db.Roles {
			if c.URLOf(r) == db.URL { // a server of the shard map only is not the role's own database
				p.set(r, pool)
			}
			if r == RoleStore {
				if p.StoreShards == nil {
					p.StoreShards = map[string]*pgxpool.Pool{}
				}
				p.StoreShards[db.URL] = pool
			}
		}
	}
	return p, nil
}
