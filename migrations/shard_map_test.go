package migrations_test

import (
	"context"
	"strings"
	"testing"
)

// shardMapVersion is the migration that records the shards a server holds
// (00025_eventstore_shard_map.sql).
const shardMapVersion = 25

// Migration 25 is reversible: up keeps the layout row (held NULL: every
// shard); down leaves exactly the schema of 24, and refuses, changing
// nothing, on a server that holds only some shards.
func TestShardMapMigrationIsReversible(t *testing.T) {
	ctx := context.Background()
	at24, db := openDB(t), openDB(t)
	if _, err := gooseOf(t, at24).UpTo(ctx, shardMapVersion-1); err != nil {
		t.Fatal(err)
	}
	p := gooseOf(t, db)
	if _, err := p.UpTo(ctx, shardMapVersion-1); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO sluice.eventstore_layout (shards) VALUES (4)`); err != nil {
		t.Fatal(err)
	}
	testStep(t, "up keeps the layout, holding every shard", func(t *testing.T) {
		if _, err := p.UpTo(ctx, shardMapVersion); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sluice.eventstore_layout WHERE shards = 4 AND held IS NULL`).Scan(&n); err != nil || n != 1 {
			t.Fatalf("%d layout rows holding every shard (%v), want 1", n, err)
		}
	})
	testStep(t, "down refuses a server holding some shards", func(t *testing.T) {
		if _, err := db.ExecContext(ctx, `UPDATE sluice.eventstore_layout SET held = '{2,3}'`); err != nil {
			t.Fatal(err)
		}
		if _, err := p.DownTo(ctx, shardMapVersion-1); err == nil || !strings.Contains(err.Error(), "holds some shards") {
			t.Fatalf("down: %v, want a refusal", err)
		}
		if _, err := db.ExecContext(ctx, `UPDATE sluice.eventstore_layout SET held = NULL`); err != nil {
			t.Fatal(err)
		}
	})
	testStep(t, "down leaves the schema of 24 and the row", func(t *testing.T) {
		if _, err := p.DownTo(ctx, shardMapVersion-1); err != nil {
			t.Fatal(err)
		}
		if d := diff(readCatalog(t, db), readCatalog(t, at24)); len(d) > 0 {
			t.Fatalf("after down, the schema differs from 24's (first: down, second: 24):\n%s", strings.Join(d, "\n"))
		}
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sluice.eventstore_layout WHERE shards = 4`).Scan(&n); err != nil || n != 1 {
			t.Fatalf("%d layout rows (%v) after down, want 1", n, err)
		}
	})
}
