package eventstore

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/shared/config"
)

// Shards over several Postgres servers (docs/scale-out.md#shards-over-several-servers):
// EVENT_STORE_SHARD_MAP names, for ranges of shards, the database that
// holds them, "0-1=postgres://a/db,2-3=postgres://b/db". Each shard lives
// wholly on one server, so its head row, its aggregates' sequences, its
// optimistic concurrency and its notifications stay that server's.

// ShardServer is one database of a shard map and the shards it holds.
type ShardServer struct {
	// URL is the connection string (it may hold a password: never print it).
	URL string
	// Shards are the shards it holds, ascending.
	Shards []int
}

// Name names the server in messages by its shards ("shards 2-3"), never
// by its URL.
func (s ShardServer) Name() string { return "shards " + shardRanges(s.Shards) }

// shardRanges spells ascending shards as ranges: "0-1,4".
func shardRanges(shards []int) string {
	var b strings.Builder
	for i := 0; i < len(shards); {
		j := i
		for j+1 < len(shards) && shards[j+1] == shards[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(shards[i]))
		if j > i {
			b.WriteString("-" + strconv.Itoa(shards[j]))
		}
		i = j + 1
	}
	return b.String()
}

// ParseShardMap parses a shard map for a store of n shards: comma-separated
// "FIRST-LAST=URL" (or "SHARD=URL") entries whose ranges cover 0..n-1
// exactly once. It returns the servers in the order their URL first
// appears (entries with the same URL are one server). "" is no map (nil).
// Errors never quote a URL.
func ParseShardMap(m string, n int) ([]ShardServer, error) {
	m = strings.TrimSpace(m)
	if m == "" {
		return nil, nil
	}
	owner := make([]int, n)
	for i := range owner {
		owner[i] = -1
	}
	var out []ShardServer
	for k, entry := range strings.Split(m, ",") {
		lo, hi, u, err := parseShardEntry(strings.TrimSpace(entry), n)
		if err != nil {
			return nil, fmt.Errorf("entry %d: %w", k+1, err)
		}
		i := slices.IndexFunc(out, func(s ShardServer) bool { return s.URL == u })
		if i < 0 {
			out = append(out, ShardServer{URL: u})
			i = len(out) - 1
		}
		for sh := lo; sh <= hi; sh++ {
			if owner[sh] >= 0 {
				return nil, fmt.Errorf("entry %d: shard %d is mapped twice", k+1, sh)
			}
			owner[sh] = i
			out[i].Shards = append(out[i].Shards, sh)
		}
	}
	var missing []int
	for sh, o := range owner {
		if o < 0 {
			missing = append(missing, sh)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("shards %s of 0-%d (EVENT_STORE_SHARDS=%d) are not mapped: the ranges must cover every shard", shardRanges(missing), n-1, n)
	}
	for i := range out {
		slices.Sort(out[i].Shards)
	}
	return out, nil
}

// parseShardEntry parses "FIRST-LAST=URL" or "SHARD=URL".
func parseShardEntry(entry string, n int) (lo, hi int, u string, err error) {
	rng, u, ok := strings.Cut(entry, "=")
	if !ok || strings.TrimSpace(u) == "" {
		return 0, 0, "", fmt.Errorf("want FIRST-LAST=postgres://…, got no '=URL'")
	}
	rng, u = strings.TrimSpace(rng), strings.TrimSpace(u)
	a, b, isRange := strings.Cut(rng, "-")
	if !isRange {
		b = a
	}
	lo, err1 := strconv.Atoi(a)
	hi, err2 := strconv.Atoi(b)
	switch {
	case err1 != nil || err2 != nil:
		return 0, 0, "", fmt.Errorf("range %q: want FIRST-LAST, two shard numbers", rng)
	case lo < 0 || hi >= n || lo > hi:
		return 0, 0, "", fmt.Errorf("range %q: want 0 <= FIRST <= LAST <= %d (EVENT_STORE_SHARDS=%d)", rng, n-1, n)
	}
	if reason := postgresURLProblem(u); reason != "" {
		return 0, 0, "", fmt.Errorf("the URL of shards %s %s", rng, reason)
	}
	return lo, hi, u, nil
}

// postgresURLProblem says why s is not a postgres:// or postgresql:// URL
// pgx accepts, or "" when it is; the reason never contains s (it holds a
// password). A map entry must be a URL (its ',' and '=' separate entries),
// so the key=value form config.PostgresURLProblem also accepts is refused.
func postgresURLProblem(s string) string {
	if !strings.Contains(s, "://") {
		return "must be a postgres:// or postgresql:// URL"
	}
	return config.PostgresURLProblem(s)
}

// ShardServers returns the servers of EVENT_STORE_SHARD_MAP (nil when it is
// unset: every shard on the store role's database).
func (c Config) ShardServers() ([]ShardServer, error) {
	return ParseShardMap(c.ShardMap.Value(), max(c.Shards, 1))
}

// ShardMapMismatchError: a server of the shard map recorded, when the
// store was created, other shards than the map gives it now (or the
// server holds a store without a map, hence every shard). Opening is
// refused: the shards' rows would be read on the wrong server
// (docs/scale-out.md#shards-over-several-servers).
type ShardMapMismatchError struct {
	// Server names the server: by the shards the map gives it, or as
	// EVENT_STORE_DATABASE_URL's when there is no map.
	Server string
	// Stored and Configured are the shards recorded and mapped.
	Stored, Configured []int
}

func (e *ShardMapMismatchError) Error() string {
	return fmt.Sprintf("eventstore: the Postgres server of %s holds shards %s of this store, but the map gives it shards %s; "+
		"a shard map is fixed when the store is created: restore the map it was created with (docs/scale-out.md#shards-over-several-servers)",
		e.Server, shardRanges(e.Stored), shardRanges(e.Configured))
}

// HTTPStatus is 503: the deployment's mistake, never a record's (as
// *ShardsMismatchError).
func (e *ShardMapMismatchError) HTTPStatus() int { return http.StatusServiceUnavailable }
