package config

import (
	"math"
	"net/url"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

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

// validMemLimit reports whether the Go runtime accepts s as GOMEMLIMIT
// (runtime.parseByteCount, plus "off"): a non-negative integer number of
// bytes (a leading + allowed), optionally followed by B, KiB, MiB, GiB or
// TiB, without spaces. deploy's TestGOMEMLIMITAsTheRuntimeReadsIt holds it
// to the runtime of the built binary.
// An unparsable GOMEMLIMIT makes the runtime abort before main.
func validMemLimit(s string) bool {
	if s == "off" {
		return true
	}
	num, mult := s, int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			num, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	if num == "" {
		return false
	}
	n, err := strconv.ParseInt(num, 10, 64)
	return err == nil && n >= 0 && n <= math.MaxInt64/mult
}
