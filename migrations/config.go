package migrations

import (
	"slices"
	"strings"

	"github.com/sluicehq/sluice/shared/config"
)

// PostgresConfig configures the connections of a sluice process to
// Postgres: one URL per role (docs/scale-out.md). The event-store index and
// the processed-event registry may each live on a server of their own;
// each defaults to DATABASE_URL, and roles whose URLs are equal share one
// database and one pool.
type PostgresConfig struct {
	URL         config.Secret `env:"DATABASE_URL" file:"true" doc:"Postgres connection string (postgres://user:pass@host:5432/db?sslmode=...). Required by every service; sluice dev starts a local server when unset. Holds the main role (event schemas, API keys, the admin audit) and every role whose own URL is unset (docs/scale-out.md)."`
	StoreURL    config.Secret `env:"EVENT_STORE_DATABASE_URL" file:"true" docDefault:"DATABASE_URL" doc:"Postgres of the store role: the event store's index (log_head, sequences, appends) and the relay's lease and parked records. Used by the api, the relay, the instance worker and the store commands (docs/scale-out.md)."`
	RegistryURL config.Secret `env:"REGISTRY_DATABASE_URL" file:"true" docDefault:"DATABASE_URL" doc:"Postgres of the registry role: every worker group's processed-event registry and pause flags. Used by the workers, the api (command status) and the registry, dlq and consumer commands (docs/scale-out.md)."`
	MaxConns    int           `env:"DATABASE_MAX_CONNS" envDefault:"16" doc:"Maximum connections in each Postgres pool of one process (one pool per distinct URL among the roles it uses)."`

	// ShardURLs are further databases of the store role: the servers of
	// the event store's shard map (EVENT_STORE_SHARD_MAP, declared in
	// eventstore.Config), which pipeline/sluiceconfig fills in. Databases
	// lists each (named by that variable), so that UpDatabases migrates
	// it and OpenPools opens it (Pools.StoreShards). Secrets: they hold
	// passwords.
	ShardURLs []config.Secret
}

// Role is the part of sluice's Postgres state that one URL holds
// (docs/scale-out.md#the-roles). Every table belongs to exactly one role.
type Role string

// The roles, in the order they are listed and migrated.
const (
	// RoleMain (DATABASE_URL): event schemas, API keys, the admin audit.
	RoleMain Role = "main"
	// RoleStore (EVENT_STORE_DATABASE_URL): the event store's index and
	// the relay's lease and parked records.
	RoleStore Role = "store"
	// RoleRegistry (REGISTRY_DATABASE_URL): the processed-event registry
	// of every worker group and the groups' pause flags.
	RoleRegistry Role = "registry"
)

// Roles returns every role, in order.
func Roles() []Role { return []Role{RoleMain, RoleStore, RoleRegistry} }

// Var is the variable that sets the role's URL.
func (r Role) Var() string {
	switch r {
	case RoleStore:
		return "EVENT_STORE_DATABASE_URL"
	case RoleRegistry:
		return "REGISTRY_DATABASE_URL"
	default:
		return "DATABASE_URL"
	}
}

// URLOf returns the connection string of role r (DATABASE_URL's when the
// role has none of its own).
func (c PostgresConfig) URLOf(r Role) string {
	if u := c.own(r); u != "" {
		return u.Value()
	}
	return c.URL.Value()
}

// own is the URL set for role r itself ("" when unset).
func (c PostgresConfig) own(r Role) config.Secret {
	switch r {
	case RoleStore:
		return c.StoreURL
	case RoleRegistry:
		return c.RegistryURL
	default:
		return c.URL
	}
}

// Database is one distinct Postgres database of a configuration and the
// roles it holds.
type Database struct {
	URL   string
	Roles []Role
	vars  []string
}

// Vars names the variables that set the database's URL ("DATABASE_URL,
// REGISTRY_DATABASE_URL"; DATABASE_URL for a role without a URL of its
// own), for messages; never the URL (it may hold a password).
func (d Database) Vars() string { return strings.Join(d.vars, ", ") }

// Databases groups roles by URL: one entry per distinct database, in role
// order; roles with an empty URL are left out. With only DATABASE_URL set
// it is one database holding every role, as before the split.
func (c PostgresConfig) Databases(roles ...Role) []Database {
	if len(roles) == 0 {
		roles = Roles()
	}
	var out []Database
	for _, r := range roles {
		u := c.URLOf(r)
		if u == "" {
			continue
		}
		v := "DATABASE_URL"
		if c.own(r) != "" {
			v = r.Var()
		}
		i := slices.IndexFunc(out, func(d Database) bool { return d.URL == u })
		if i < 0 {
			out = append(out, Database{URL: u})
			i = len(out) - 1
		}
		out[i].Roles = append(out[i].Roles, r)
		if !slices.Contains(out[i].vars, v) {
			out[i].vars = append(out[i].vars, v)
		}
	}
	if slices.Contains(roles, RoleStore) {
		for _, sec := range c.ShardURLs {
			u := sec.Value()
			i := slices.IndexFunc(out, func(d Database) bool { return d.URL == u })
			if i < 0 {
				out = append(out, Database{URL: u, Roles: []Role{RoleStore}})
				i = len(out) - 1
			}
			if !slices.Contains(out[i].vars, shardMapVar) {
				out[i].vars = append(out[i].vars, shardMapVar)
			}
		}
	}
	return out
}

// shardMapVar names the servers of ShardURLs in messages.
const shardMapVar = "EVENT_STORE_SHARD_MAP"

// Validate checks the section; every problem is a *config.VarError.
func (c PostgresConfig) Validate() error {
	k := &config.Checker{}
	k.AtLeast("DATABASE_MAX_CONNS", int64(c.MaxConns), 1)
	for _, r := range Roles() {
		u := c.own(r)
		if u == "" || (r != RoleMain && u == c.URL) {
			continue // unset, or DATABASE_URL's: reported once, as DATABASE_URL
		}
		if reason := config.PostgresURLProblem(u.Value()); reason != "" {
			k.Fail(r.Var(), "", "%s", reason)
		}
	}
	return k.Err()
}
