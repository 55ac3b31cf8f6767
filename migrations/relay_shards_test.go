package migrations_test

import (
	"context"
	"strings"
	"testing"
)

// relayShardsVersion is the migration that gives the relay a leader per
// shard (00024_relay_shards.sql).
const relayShardsVersion = 24

const parkedRow = `INSERT INTO sluice.relay_parked (relay, position, event_id, topic, key, envelope, reason, error, attempts)
VALUES ('default', 7, 'e-7', 't', '\x6b', '\x7b7d', 'too_large', 'MESSAGE_TOO_LARGE', 3)`

// Migration 24 is reversible: up keeps the parked rows as shard 0's and
// keys them by (relay, shard, position); down leaves exactly the schema of
// 23, the rows kept.
func TestRelayShardsMigrationIsReversible(t *testing.T) {
	ctx := context.Background()
	at23, db := openDB(t), openDB(t)
	if _, err := gooseOf(t, at23).UpTo(ctx, relayShardsVersion-1); err != nil {
		t.Fatal(err)
	}
	p := gooseOf(t, db)
	if _, err := p.UpTo(ctx, relayShardsVersion-1); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, parkedRow); err != nil {
		t.Fatal(err)
	}
	testStep(t, "up keeps the parked row as shard 0's", func(t *testing.T) {
		if _, err := p.UpTo(ctx, relayShardsVersion); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sluice.relay_parked WHERE shard = 0 AND position = 7`).Scan(&n); err != nil || n != 1 {
			t.Fatalf("%d parked rows of shard 0 (%v), want 1", n, err)
		}
		// The same position in another shard is another row.
		if _, err := db.ExecContext(ctx, `INSERT INTO sluice.relay_members (name, holder, expires_at) VALUES ('default', 'h', now());
			INSERT INTO sluice.relay_parked (relay, shard, position, event_id, topic, key, envelope, reason, error, attempts)
			VALUES ('default', 3, 7, 'e-7', 't', '\x6b', '\x7b7d', 'too_large', 'MESSAGE_TOO_LARGE', 3)`); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, `DELETE FROM sluice.relay_parked WHERE shard = 3`); err != nil {
			t.Fatal(err)
		}
	})
	testStep(t, "down leaves the schema of 23 and the rows", func(t *testing.T) {
		if _, err := p.DownTo(ctx, relayShardsVersion-1); err != nil {
			t.Fatal(err)
		}
		if d := diff(readCatalog(t, db), readCatalog(t, at23)); len(d) > 0 {
			t.Fatalf("after down, the schema differs from 23's (first: down, second: 23):\n%s", strings.Join(d, "\n"))
		}
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sluice.relay_parked WHERE position = 7`).Scan(&n); err != nil || n != 1 {
			t.Fatalf("%d parked rows (%v) after down, want 1", n, err)
		}
	})
	testStep(t, "up again", func(t *testing.T) {
		if _, err := p.UpTo(ctx, relayShardsVersion); err != nil {
			t.Fatal(err)
		}
	})
}

// Down refuses while parked rows of a shard other than 0 exist (they would
// collide by position) and changes nothing.
func TestRelayShardsMigrationDownRefusesShardRows(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	p := gooseOf(t, db)
	if _, err := p.UpTo(ctx, relayShardsVersion); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO sluice.relay_parked (relay, shard, position, event_id, topic, key, envelope, reason, error, attempts)
		VALUES ('default', 2, 7, 'e-7', 't', '\x6b', '\x7b7d', 'too_large', 'MESSAGE_TOO_LARGE', 3)`); err != nil {
		t.Fatal(err)
	}
	_, err := p.DownTo(ctx, relayShardsVersion-1)
	if err == nil || !strings.Contains(err.Error(), "shards other than 0") {
		t.Fatalf("down with a parked row of shard 2: %v", err)
	}
	if v, err := p.GetDBVersion(ctx); err != nil || v != relayShardsVersion {
		t.Fatalf("version %d (%v) after the refused down, want %d", v, err, relayShardsVersion)
	}
}
