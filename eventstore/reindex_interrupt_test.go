package eventstore

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/testenv"
)

// cancelAt is a pgx tracer that calls cancel when a statement starting
// with prefix is sent.
type cancelAt struct {
	prefix string
	cancel context.CancelFunc
}

func (c *cancelAt) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.HasPrefix(strings.ToLower(strings.TrimSpace(d.SQL)), c.prefix) {
		c.cancel()
	}
	return ctx
}

func (c *cancelAt) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestReindexInterrupted: a reindex whose context ends while it reads or
// inserts changes nothing; one whose context ends as it commits commits
// (the commit is not cancelled midway: an interrupted `sluice store
// reindex` must be able to say the index is as it was, and a commit cut
// off by the cancel left it unknown whether it had happened).
func TestReindexInterrupted(t *testing.T) {
	e := newEnv(t)
	w := e.store(t, named(testConfig(), "w1"))
	for i := range 3 {
		mustAppend(t, w, command("Instance", "db:c:"+string(rune('a'+i)), 1))
	}
	for _, tc := range []struct {
		name    string
		at      string // statement prefix at which the context ends
		wantErr bool
	}{
		{"while it inserts", "insert", true},
		{"as it commits", "commit", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testenv.MustExec(t, e.pool, `UPDATE sluice.appends SET writer_id = 'w1'`)
			ctx, cancel := context.WithCancel(ctxT(t))
			defer cancel()
			cfg, err := pgxpool.ParseConfig(e.url)
			if err != nil {
				t.Fatal(err)
			}
			cfg.ConnConfig.Tracer = &cancelAt{prefix: tc.at, cancel: cancel}
			pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			s, err := New(testConfig(), Deps{Pool: pool, Bucket: e.bucket, Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			_, err = s.Reindex(ctx)
			var reindexed int
			if qerr := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM sluice.appends WHERE writer_id = $1`, writerReindex).Scan(&reindexed); qerr != nil {
				t.Fatal(qerr)
			}
			switch {
			case tc.wantErr && (err == nil || reindexed != 0):
				t.Fatalf("reindex cancelled %s: %v, %d rows rewritten; want an error and nothing changed", tc.name, err, reindexed)
			case !tc.wantErr && (err != nil || reindexed != 3):
				t.Fatalf("reindex cancelled %s: %v, %d rows rewritten; want it committed, 3 rows", tc.name, err, reindexed)
			}
		})
	}
}
