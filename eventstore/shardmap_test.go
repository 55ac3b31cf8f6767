package eventstore

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/shared/config"
)

// The shard map's syntax and rules: ranges cover 0..N-1 exactly once,
// every URL a Postgres URL, errors never quote a URL (it holds a
// password), and Validate reports a *config.VarError naming the variable.
func TestParseShardMap(t *testing.T) {
	const a, b = "postgres://u:secretA@a:5432/sluice", "postgresql://u:secretB@b/sluice?sslmode=disable"
	for _, c := range []struct {
		name, m string
		n       int
		want    string // servers as "shards@url-letter …", or the error's text
		err     bool
	}{
		{"empty", "", 4, "", false},
		{"two servers", "0-1=" + a + ",2-3=" + b, 4, "0,1@a 2,3@b", false},
		{"single shards and spaces", " 0=" + a + " , 1-2=" + b + ",3=" + a, 4, "0,3@a 1,2@b", false},
		{"one server for all", "0-3=" + a, 4, "0,1,2,3@a", false},
		{"a shard missing", "0-1=" + a + ",3=" + b, 4, "shards 2 of 0-3", true},
		{"overlap", "0-2=" + a + ",2-3=" + b, 4, "shard 2 is mapped twice", true},
		{"out of range", "0-4=" + a, 4, "want 0 <= FIRST <= LAST <= 3", true},
		{"reversed", "2-1=" + a + ",0=" + a + ",3=" + a, 4, "want 0 <= FIRST <= LAST", true},
		{"no url", "0-3", 4, "no '=URL'", true},
		{"not postgres", "0-1=mysql://u:secretA@a/db,2-3=" + b, 4, `not "mysql"://`, true},
		{"not a url", "0-1=host=a password=secretA,2-3=" + b, 4, "must be a postgres:// or postgresql:// URL", true},
		{"bad range", "x-1=" + a, 4, "want FIRST-LAST", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseShardMap(c.m, c.n)
			if c.err {
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("error %v, want one containing %q", err, c.want)
				}
				if strings.Contains(err.Error(), "secret") {
					t.Fatalf("error %q quotes a URL", err)
				}
				cfg := DefaultConfig()
				cfg.Shards, cfg.ShardMap = c.n, config.Secret(c.m)
				var ve *config.VarError
				if verr := cfg.Validate(); !errors.As(verr, &ve) || ve.Var != "EVENT_STORE_SHARD_MAP" || strings.Contains(verr.Error(), "secret") {
					t.Fatalf("Validate: %v, want a *config.VarError of EVENT_STORE_SHARD_MAP without the URL", verr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var parts []string
			for _, s := range got {
				letter := "a"
				if s.URL == b {
					letter = "b"
				}
				parts = append(parts, strings.Trim(strings.ReplaceAll(fmt.Sprint(s.Shards), " ", ","), "[]")+"@"+letter)
			}
			if g := strings.Join(parts, " "); g != c.want {
				t.Fatalf("servers %q, want %q", g, c.want)
			}
		})
	}
	if n := (ShardServer{Shards: []int{0, 1, 2, 5, 7, 8}}).Name(); n != "shards 0-2,5,7-8" {
		t.Fatalf("Name %q", n)
	}
}
