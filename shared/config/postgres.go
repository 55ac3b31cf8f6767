package config

import (
	"net/url"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// PostgresURLProblem says why s is not a connection string pgx accepts
// (a postgres:// or postgresql:// URL, or key=value pairs), or "" when it
// is. The reason never contains s: it holds a password.
func PostgresURLProblem(s string) string {
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
