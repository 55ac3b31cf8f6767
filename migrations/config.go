package migrations

import (
	"net/url"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicehq/sluice/shared/config"
)

// PostgresConfig configures the connection shared by the event-store index and the
// processed-event registry.
type PostgresConfig struct {
	URL      config.Secret `env:"DATABASE_URL" file:"true" doc:"Postgres connection string (postgres://user:pass@host:5432/db?sslmode=...). Required by every service; sluice dev starts a local server when unset."`
	MaxConns int           `env:"DATABASE_MAX_CONNS" envDefault:"16" doc:"Maximum connections in the pool of one process."`
}

// Validate checks the section; every problem is a *config.VarError.
func (c PostgresConfig) Validate() error {
	k := &config.Checker{}
	k.AtLeast("DATABASE_MAX_CONNS", int64(c.MaxConns), 1)
	if u := c.URL.Value(); u != "" {
		if reason := postgresURLProblem(u); reason != "" {
			k.Fail("DATABASE_URL", "", "%s", reason)
		}
	}
	return k.Err()
}

// postgresURLProblem says why s is not a connection string pgx accepts
// (a postgres:// or postgresql:// URL, or key=value pairs), or "" when it
// is. The reason never contains s: it holds a password.
func postgresURLProblem(s string) string {
	if strings.Contains(s, "://") {
		u, err := url.Parse(s)
		if err != nil {
			return "is not a valid URL (check the escaping of the user and password: %XX for reserved characters)"
		}
		if u.Scheme != "postgres" && u.Scheme != "postgresql" {
			return "must be a postgres:// or postgresql:// URL (postgres://user:password@host:5432/db?sslmode=require), not " + strconv.Quote(u.Scheme) + "://"
		}
	}
	if _, err := pgconn.ParseConfig(s); err != nil {
		return "is not a valid Postgres connection string (postgres://user:password@host:5432/db?sslmode=require)"
	}
	return ""
}
