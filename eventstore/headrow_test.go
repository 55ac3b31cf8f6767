package eventstore

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// A shard's head row wiped by hand (the only way to lose one: New creates
// them) fails the reservation's write inside its transaction with a
// *HeadRowMissingError naming the shard: no sequence moved, no row
// written, no other shard's head moved. Once the row is back, appends go
// on.
func TestHeadRowMissingFailsTheWrite(t *testing.T) {
	for _, n := range []int{1, 4} {
		t.Run(fmt.Sprintf("shards=%d", n), func(t *testing.T) {
			e := newEnv(t)
			s := e.store(t, shardedConfig(n))
			ids := idsByShard("Order", "hm", n, 2)
			victim := n - 1 // the shard whose row is wiped
			old, fresh := ids[victim][0], ids[victim][1]
			mustAppend(t, s, command("Order", old, 1))
			ctx := ctxT(t)
			var next int64
			if err := e.pool.QueryRow(ctx, `DELETE FROM sluice.log_head WHERE shard = $1 RETURNING next_position`, victim).Scan(&next); err != nil {
				t.Fatal(err)
			}
			before := indexState(t, e.pool)

			// An aggregate with a sequences row (it would move) and a new one
			// (its row would be created).
			for _, id := range []string{old, fresh} {
				rs, err := s.Append(ctx, command("Order", id, 2))
				if err == nil {
					err = rs[0].Err
				}
				var missing *HeadRowMissingError
				if !errors.As(err, &missing) {
					t.Errorf("append to %s with shard %d's head row missing: %v, want a *HeadRowMissingError", id, victim, err)
					continue
				}
				if !slices.Equal(missing.Shards, []int{victim}) {
					t.Errorf("the error names shards %v, want [%d]: %v", missing.Shards, victim, err)
				}
			}
			after := indexState(t, e.pool)
			if !slices.Equal(after.sequences, before.sequences) {
				t.Errorf("sequences moved by a failed write:\nbefore %v\nafter  %v", before.sequences, after.sequences)
			}
			if !slices.Equal(after.appends, before.appends) {
				t.Errorf("appends rows written by a failed write:\nbefore %v\nafter  %v", before.appends, after.appends)
			}
			if !slices.Equal(after.heads, before.heads) {
				t.Errorf("head rows moved by a failed write:\nbefore %v\nafter  %v", before.heads, after.heads)
			}

			// The row restored, the same appends succeed.
			if _, err := e.pool.Exec(ctx, `INSERT INTO sluice.log_head (shard, next_position) VALUES ($1, $2)`, victim, next); err != nil {
				t.Fatal(err)
			}
			rs := mustAppend(t, s, command("Order", old, 2))
			if got := rs[0].Event.Envelope.SequenceNumber; got != 2 {
				t.Errorf("after the row is back %s's next command is #%d, want #2 (the failed writes moved nothing)", old, got)
			}
		})
	}
}

// A head row wiped by hand while no store runs is recreated by the next
// store to open, past the shard's last position: the next append takes
// the position after it, never one already handed out.
func TestWipedHeadRowRecreatedPastTheLog(t *testing.T) {
	for _, n := range []int{1, 4} {
		t.Run(fmt.Sprintf("shards=%d", n), func(t *testing.T) {
			e := newEnv(t)
			cfg := shardedConfig(n)
			s := e.store(t, cfg)
			ids := idsByShard("Order", "wh", n, 3)
			victim := n - 1
			var last int64
			for i, id := range ids[victim] {
				rs := mustAppend(t, s, command("Order", id, 1))
				if i == len(ids[victim])-1 {
					last = rs[0].Event.Envelope.Position
				}
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			ctx := ctxT(t)
			if _, err := e.pool.Exec(ctx, `DELETE FROM sluice.log_head WHERE shard = $1`, victim); err != nil {
				t.Fatal(err)
			}
			s2 := e.store(t, cfg)
			rs := mustAppend(t, s2, command("Order", ids[victim][0], 2))
			if got := rs[0].Event.Envelope.Position; got != last+1 {
				t.Fatalf("after the head row of shard %d was recreated the next append took position %d, want %d (after the shard's last)", victim, got, last+1)
			}
		})
	}
}

// indexRows is what the index holds, row by row.
type indexRows struct {
	appends, sequences, heads []string
}

// indexState reads every row of appends, sequences and log_head (snapshot
// needs shard 0's head row).
func indexState(t testing.TB, pool *pgxpool.Pool) indexRows {
	t.Helper()
	return indexRows{
		appends:   queryStrings(t, pool, `SELECT concat_ws('|', shard, position, event_id, sequence_number, state) FROM sluice.appends ORDER BY shard, position`),
		sequences: queryStrings(t, pool, `SELECT concat_ws('|', aggregate_type, aggregate_id, last_sequence) FROM sluice.sequences ORDER BY 1`),
		heads:     queryStrings(t, pool, `SELECT shard || ':' || next_position FROM sluice.log_head ORDER BY shard`),
	}
}
