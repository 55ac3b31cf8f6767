package eventstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/shared/pgarray"
)

// lineRef locates one envelope's line in a segment.
type lineRef struct {
	shard    int
	position int64
	eventID  string
	offset   int64
	length   int64
}

const sqlCommitRows = `
WITH upd AS (
  UPDATE sluice.appends a
  SET state = '` + StateCommitted + `', segment_key = $1, byte_offset = u.off, byte_length = u.len, committed_at = now()
  FROM unnest($2::bigint[], $3::text[], $4::bigint[], $5::int[], $6::int[]) AS u(pos, eid, off, len, sh)
  WHERE a.shard = u.sh AND a.position = u.pos AND a.event_id = u.eid::uuid AND a.state = '` + StateReserved + `'
  RETURNING a.shard, a.position
), blk AS (
  SELECT u.sh, min(u.pos) AS lo, max(u.pos) AS hi FROM unnest($6::int[], $2::bigint[]) AS u(sh, pos) GROUP BY u.sh
), closed AS (
  DELETE FROM sluice.appends_open o USING blk
   WHERE o.shard = blk.sh AND o.first BETWEEN blk.lo AND blk.hi
     AND (SELECT count(*) FROM sluice.appends a
           WHERE a.shard = o.shard AND a.position BETWEEN o.first AND o.last AND a.state <> '` + StateCommitted + `')
       = (SELECT count(*) FROM upd WHERE upd.shard = o.shard AND upd.position BETWEEN o.first AND o.last)
)
SELECT coalesce(array_agg(shard), '{}'), coalesce(array_agg(position), '{}') FROM upd`

// shardPos addresses an event: (shard, position).
type shardPos struct {
	shard    int
	position int64
}

// sqlNotify sends a wake-up on NotifyChannel in a transaction of its own.
const sqlNotify = `SELECT pg_notify('` + NotifyChannel + `', $1)`

// commitRows is step 5 of docs/eventstore.md#append-protocol-group-commit (and the repair of a block whose
// segment exists): one statement marks the block's reserved rows committed
// with their byte ranges (a HOT update: no index of appends covers a
// column it changes), deletes the appends_open rows of blocks it leaves
// with every row committed, and returns the positions it committed. Rows in
// any other state are left alone: committed ones (a repair got there
// first), and abandoned ones — abandoned is final, because the relay may
// have passed the position and its bounded lookback; a late writer appends
// those envelopes again at fresh positions instead (writeBlock).
//
// One round trip: BEGIN; the update; COMMIT; then the NOTIFY in a
// transaction of its own. A NOTIFY inside the updating transaction would hold
// Postgres's cluster-wide notification lock through that transaction's
// commit fsync, serialising it with every other notifying commit (the
// reservations among them); after the commit it costs no fsync. The
// wake-up still follows the commit; if the process dies in between, the
// relay's poll finds the rows. The commit is synchronous: a commit that a
// Postgres crash could lose after Append returned would leave rows the
// relay may already have published (or committed rows back to reserved)
// with nothing left to settle them.
func (s *Store) commitRows(ctx context.Context, key string, refs []lineRef) (map[shardPos]bool, error) {
	n := len(refs)
	pos, eids, offs, lens, shs := make(pgarray.Int8, n), make(pgarray.Text, n), make(pgarray.Int8, n), make(pgarray.Int4, n), make(pgarray.Int4, n)
	var blocks []shardBlock // per shard, ascending (refs are in line order: by shard, then position)
	for j, r := range refs {
		pos[j], eids[j], offs[j], lens[j], shs[j] = r.position, r.eventID, r.offset, int32(r.length), int32(r.shard)
		if k := len(blocks); k > 0 && blocks[k-1].shard == r.shard {
			blocks[k-1].first, blocks[k-1].last = min(blocks[k-1].first, r.position), max(blocks[k-1].last, r.position)
			continue
		}
		blocks = append(blocks, shardBlock{shard: r.shard, first: r.position, last: r.position})
	}
	updated, err := s.commitRoundTrip(ctx, key, pos, eids, offs, lens, shs, blockNotify(StateCommitted, s.shards, blocks))
	if err != nil {
		return nil, fmt.Errorf("eventstore: commit %s: %w", key, err)
	}
	return updated, nil
}

func (s *Store) commitRoundTrip(ctx context.Context, key string, pos pgarray.Int8, eids pgarray.Text, offs pgarray.Int8, lens, shs pgarray.Int4,
	payload string) (map[shardPos]bool, error) {
	c, release, err := s.txConn(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	// Its probe plan: a generic plan made by the statistics of a small
	// appends hash-joins the arrays to a sequential scan of it (measured:
	// 4 ms per 50-row commit at 40,000 rows, growing until an ANALYZE);
	// planned per call, the plan cost as much as the update.
	b.Queue(sqlPlanProbes)
	b.Queue(sqlCommitRows, key, pos, eids, offs, lens, shs)
	b.Queue("COMMIT")
	b.Queue(sqlNotify, payload)
	br := c.SendBatch(ctx, b)
	defer br.Close()
	var upShards []int32
	var upPos []int64
	for range 2 { // BEGIN, sqlPlanProbes
		if _, err := br.Exec(); err != nil {
			return nil, err
		}
	}
	if err := br.QueryRow().Scan(&upShards, &upPos); err != nil {
		return nil, err
	}
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	if _, err := br.Exec(); err != nil {
		// committed; only the wake-up failed (the relay polls)
		s.log.Debug("eventstore: NOTIFY after commit failed", "segment_key", key, "error", err)
	}
	if err := br.Close(); err != nil && c.PgConn().TxStatus() != 'I' {
		return nil, err
	}
	out := make(map[shardPos]bool, len(upPos))
	for j, p := range upPos {
		out[shardPos{int(upShards[j]), p}] = true
	}
	return out, nil
}

type abandonPolicy int

const (
	abandonMine  abandonPolicy = iota // abandon rows of this writer or older than the append timeout
	abandonStale                      // abandon rows older than the append timeout
)

const sqlAbandon = `
WITH upd AS (
  UPDATE sluice.appends a SET state = '` + StateAbandoned + `'
    FROM sluice.appends_open o
  WHERE o.segment_key = $1 AND a.shard = o.shard AND a.position BETWEEN o.first AND o.last
    AND a.segment_key = $1 AND a.state = '` + StateReserved + `'
    AND (($2::text <> '' AND a.writer_id = $2) OR a.reserved_at < now() - make_interval(secs => $4))
  RETURNING a.shard, a.position
)` + sqlAbandonedNotify

// resolveBlock settles the reservations of one segment key: if the segment
// exists its rows are committed from it (byte ranges from the segment);
// if it does not, rows are abandoned as the policy allows. It returns how
// many rows it committed and abandoned.
func (s *Store) resolveBlock(ctx context.Context, key string, policy abandonPolicy) (committed, abandoned int64, err error) {
	name, err := s.nameOf(key)
	if err != nil {
		return 0, 0, err
	}
	body, _, err := s.bucket.Get(ctx, key)
	if err == nil {
		lines, err := parseBlock(name, key, body)
		if err != nil {
			return 0, 0, err
		}
		refs := make([]lineRef, len(lines))
		for j, l := range lines {
			refs[j] = lineRef{shard: l.shard, position: l.env.Position, eventID: l.env.EventID, offset: l.offset, length: int64(len(l.raw))}
		}
		done, err := s.commitRows(ctx, key, refs)
		n := int64(len(done))
		if n > 0 {
			s.log.Warn("eventstore: committed reserved rows whose segment exists", "segment_key", key, "rows", n)
		}
		return n, 0, err
	}
	if !errors.Is(err, objstore.ErrNotFound) {
		return 0, 0, fmt.Errorf("eventstore: resolve %s: %w", key, err)
	}
	writer := ""
	if policy == abandonMine {
		writer = s.cfg.WriterID
	}
	var lo, hi int64
	if err := s.pool.QueryRow(ctx, sqlAbandon, key, writer, s.shards > 1, s.cfg.AppendTimeout.Seconds()).Scan(&abandoned, &lo, &hi, nil); err != nil {
		return 0, 0, fmt.Errorf("eventstore: abandon %s: %w", key, err)
	}
	if abandoned > 0 {
		s.log.Warn("eventstore: abandoned reserved rows without a segment", "segment_key", key, "rows", abandoned, "first", lo, "last", hi)
	}
	return 0, abandoned, nil
}

// RepairReport summarises a Repair run.
type RepairReport struct {
	// Blocks is the number of segment keys examined.
	Blocks int
	// Committed rows had their segment: now committed.
	Committed int64
	// Abandoned rows had no segment and were older than the append timeout.
	Abandoned int64
	// InFlight rows have no segment yet and are younger than the append
	// timeout: left for their writer.
	InFlight int64
}

// sqlReservedBlocks finds the reserved rows through appends_open (no
// index of appends names state: docs/eventstore.md#open-blocks-and-hot-commits).
const sqlReservedBlocks = `
SELECT r.segment_key, count(*) FROM (
  SELECT DISTINCT a.shard, a.position, a.segment_key
    FROM sluice.appends_open o
    JOIN sluice.appends a ON a.shard = o.shard AND a.position BETWEEN o.first AND o.last
   WHERE a.state = '` + StateReserved + `' AND a.reserved_at <= now() - make_interval(secs => $1)) r
GROUP BY r.segment_key ORDER BY min(r.shard), min(r.position)`

// sqlPruneOpen deletes the appends_open rows whose positions hold no row
// that is not committed: a block whose commit raced a repair's (each
// statement saw the other's rows reserved), or the one-position blocks the
// table's trigger made for a writer of a build before migration 26 and
// that writer committed. A block and its rows are inserted in one
// statement, so a reservation in flight is never pruned.
const sqlPruneOpen = `
DELETE FROM sluice.appends_open o
 WHERE NOT EXISTS (SELECT 1 FROM sluice.appends a
                    WHERE a.shard = o.shard AND a.position BETWEEN o.first AND o.last AND a.state <> '` + StateCommitted + `')`

// Repair resolves reservations whose writer may be gone (docs/eventstore.md#append-protocol-group-commit, docs/relay.md#gaps-and-the-bounded-lookback;
// `sluice store repair`): for every reserved row at least olderThan old
// (database clock; 0 = all), it looks up the segment its block expects —
// present: the rows are committed with byte ranges from the segment;
// absent and the row older than EVENT_STORE_APPEND_TIMEOUT: the rows are
// marked abandoned (a late writer or a retry of the event_id revives them);
// otherwise they are left in flight. Safe to run concurrently with writers,
// relays and other repairs: every step is conditional on the row's state.
func (s *Store) Repair(ctx context.Context, olderThan time.Duration) (RepairReport, error) {
	if s.parts != nil {
		return s.repairServers(ctx, olderThan)
	}
	var rep RepairReport
	if err := s.layoutChecked(); err != nil {
		return rep, err
	}
	if _, err := s.pool.Exec(ctx, sqlPruneOpen); err != nil {
		return rep, fmt.Errorf("eventstore: repair: prune open blocks: %w", err)
	}
	rows, err := s.pool.Query(ctx, sqlReservedBlocks, olderThan.Seconds())
	if err != nil {
		return rep, fmt.Errorf("eventstore: repair: %w", err)
	}
	type block struct {
		key  string
		rows int64
	}
	var blocks []block
	for rows.Next() {
		var b block
		if err := rows.Scan(&b.key, &b.rows); err != nil {
			rows.Close()
			return rep, fmt.Errorf("eventstore: repair: %w", err)
		}
		blocks = append(blocks, b)
	}
	if err := rows.Err(); err != nil {
		return rep, fmt.Errorf("eventstore: repair: %w", err)
	}
	for _, b := range blocks {
		c, a, err := s.resolveBlock(ctx, b.key, abandonStale)
		if err != nil {
			return rep, fmt.Errorf("eventstore: repair: %w", err)
		}
		rep.Blocks++
		rep.Committed += c
		rep.Abandoned += a
		if rest := b.rows - c - a; rest > 0 {
			rep.InFlight += rest
		}
	}
	return rep, nil
}
