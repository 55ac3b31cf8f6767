package migrations_test

import (
	"context"
	"database/sql"
	"os"
	"strings"
	"testing"

	"github.com/pressly/goose/v3"
)

// shardsVersion is the migration that gives the event store its shards
// (00023_eventstore_shards.sql).
const shardsVersion = 23

func gooseOf(t *testing.T, db *sql.DB) *goose.Provider {
	t.Helper()
	if _, err := db.ExecContext(context.Background(), `CREATE SCHEMA IF NOT EXISTS sluice`); err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, os.DirFS("."),
		goose.WithTableName(versionTable), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Migration 23 is reversible on a store of one shard: up over a store with
// rows keeps them (shard 0) and records it as one shard; down leaves
// exactly the schema of 22 — catalog compared, comments included — with
// the rows and the head as they were.
func TestShardsMigrationIsReversible(t *testing.T) {
	ctx := context.Background()
	at22, db := openDB(t), openDB(t)
	if _, err := gooseOf(t, at22).UpTo(ctx, shardsVersion-1); err != nil {
		t.Fatal(err)
	}
	p := gooseOf(t, db)
	if _, err := p.UpTo(ctx, shardsVersion-1); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `
UPDATE sluice.log_head SET next_position = 3;
INSERT INTO sluice.sequences (aggregate_type, aggregate_id, last_sequence) VALUES ('Order', 'o-1', 2);
INSERT INTO sluice.appends (position, event_id, kind, aggregate_type, aggregate_id, sequence_number, state, segment_key,
                            byte_offset, byte_length, canonical_hash, occurred_at, writer_id, committed_at)
SELECT p, gen_random_uuid(), 'command', 'Order', 'o-1', p, 'committed', 'segments/00000000000000000001-00000000000000000002.jsonl',
       (p - 1) * 100, 100, sha256(p::text::bytea), now(), 'w', now()
  FROM generate_series(1, 2) AS p`); err != nil {
		t.Fatal(err)
	}
	rows := func() string {
		var s string
		if err := db.QueryRowContext(ctx, `SELECT string_agg(concat_ws('|', position, event_id, segment_key, byte_offset, canonical_hash), ',' ORDER BY position)
			|| ' head ' || (SELECT next_position FROM sluice.log_head) FROM sluice.appends`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	want := rows()
	testStep(t, "up records one shard and keeps the rows as shard 0's", func(t *testing.T) {
		if _, err := p.UpTo(ctx, shardsVersion); err != nil {
			t.Fatal(err)
		}
		var shards, zero int
		if err := db.QueryRowContext(ctx, `SELECT (SELECT shards FROM sluice.eventstore_layout),
			(SELECT count(*) FROM sluice.appends WHERE shard = 0) + (SELECT count(*) FROM sluice.log_head WHERE shard = 0)`).Scan(&shards, &zero); err != nil {
			t.Fatal(err)
		}
		if shards != 1 || zero != 3 {
			t.Fatalf("layout %d shards, %d rows of shard 0; want 1 and 3", shards, zero)
		}
	})
	testStep(t, "down leaves the schema of 22 and the rows", func(t *testing.T) {
		if _, err := p.DownTo(ctx, shardsVersion-1); err != nil {
			t.Fatal(err)
		}
		if d := diff(readCatalog(t, db), readCatalog(t, at22)); len(d) > 0 {
			t.Fatalf("after down, the schema differs from 22's (first: down, second: 22):\n%s", strings.Join(d, "\n"))
		}
		if got := rows(); got != want {
			t.Fatalf("rows after down: %s, want %s", got, want)
		}
	})
	testStep(t, "up again", func(t *testing.T) {
		if _, err := p.UpTo(ctx, shardsVersion); err != nil {
			t.Fatal(err)
		}
	})
}

// Down refuses a store of more than one shard (its positions repeat
// across shards) and changes nothing.
func TestShardsMigrationDownRefusesShards(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	p := gooseOf(t, db)
	if _, err := p.UpTo(ctx, shardsVersion); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO sluice.eventstore_layout (shards) VALUES (4);
		INSERT INTO sluice.log_head (shard, next_position) SELECT s, 1 FROM generate_series(1, 3) AS s`); err != nil {
		t.Fatal(err)
	}
	_, err := p.DownTo(ctx, shardsVersion-1)
	if err == nil || !strings.Contains(err.Error(), "more than one shard") {
		t.Fatalf("down over four shards: %v", err)
	}
	v, err := p.GetDBVersion(ctx)
	if err != nil || v != shardsVersion {
		t.Fatalf("version %d (%v) after the refused down, want %d", v, err, shardsVersion)
	}
	var heads int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sluice.log_head`).Scan(&heads); err != nil || heads != 4 {
		t.Fatalf("%d head rows (%v) after the refused down", heads, err)
	}
}

func testStep(t *testing.T, name string, f func(t *testing.T)) {
	t.Helper()
	if !t.Run(name, f) {
		t.FailNow()
	}
}
