package registry

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/testenv"
)

// TestProbeQueryKeepsTheConnection: a statement that fails inside
// probeQuery rolls back its implicit transaction and leaves the pooled
// connection idle and in use, not aborted (which the pool would close,
// a reconnect per failed mark done or heartbeat); the setting ends with
// the request.
func TestProbeQueryKeepsTheConnection(t *testing.T) {
	url := testenv.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	r := &Registry{pool: pool}
	var pid int32
	if err := pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	var setting string
	for _, tc := range []struct {
		name, sql string
		wantErr   bool
	}{
		{"a failing statement", `SELECT 1 / (g - 1) FROM generate_series(1, 1) AS g`, true},
		{"a succeeding one", `SELECT current_setting('enable_seqscan')`, false},
	} {
		err := r.probeQuery(ctx, tc.sql, nil, func(rows pgx.Rows) error { return rows.Scan(&setting) })
		if (err != nil) != tc.wantErr {
			t.Fatalf("%s: error %v, want error %v", tc.name, err, tc.wantErr)
		}
		var now int32
		if err := pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&now); err != nil {
			t.Fatalf("after %s: %v", tc.name, err)
		}
		if now != pid {
			t.Fatalf("after %s the pool runs on backend %d, before on %d: the connection was replaced", tc.name, now, pid)
		}
	}
	if setting != "off" {
		t.Errorf("enable_seqscan within probeQuery = %q, want off", setting)
	}
	var after string
	if err := pool.QueryRow(ctx, `SELECT current_setting('enable_seqscan')`).Scan(&after); err != nil || after != "on" {
		t.Errorf("enable_seqscan after probeQuery = %q (%v), want on", after, err)
	}
}
