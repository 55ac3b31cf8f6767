package eventstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/pgarray"
)

// The write: a decision applied in one round trip (docs/eventstore.md#append-protocol-group-commit).
// When the facts were assumed, the same round trip first verifies them
// (sqlVerify) and writes nothing when one is false.

// sqlVerify checks the assumed facts of a group before anything is
// written, and leaves the transaction-local setting sluice.reserve_refused
// empty when they hold (else the reasons), which sqlWriteOne and sqlWriteSharded obey. It locks
// the sequences rows of every aggregate the group advances ($1, $2, in
// order) when last sequences are assumed ($3–$5): they then stay as seen
// until the commit. The slot commands ($6–$10: the command's event_id, ”
// when any, and its state) and the absence of the envelopes with
// expected_seq ($11) are read by one probe of an index each (LATERAL …
// LIMIT: never a scan, whatever the statistics). It returns the reasons,
// whether only last sequences were wrong, and the last sequences seen.
// It runs its probe plan (sqlPlanProbes before it, in the same round
// trip; the write after it then runs its generic plan too), or for a large
// group plans per call (writeArgs.plans).
const sqlVerify = `
WITH locked AS MATERIALIZED (
  SELECT l.t, l.i, l.last
    FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS u(t, i, ord)
    JOIN LATERAL (SELECT s.aggregate_type AS t, s.aggregate_id AS i, s.last_sequence AS last FROM sluice.sequences s
                   WHERE s.aggregate_type = u.t AND s.aggregate_id = u.i FOR UPDATE) l ON true
   ORDER BY u.ord
), last_seqs AS (
  SELECT u.t, u.i, u.assumed, coalesce(l.last, 0) AS seen
    FROM unnest($3::text[], $4::text[], $5::bigint[]) AS u(t, i, assumed)
    LEFT JOIN locked l ON l.t = u.t AND l.i = u.i
), slot_commands AS (
  SELECT u.t, u.i, u.k
    FROM unnest($6::text[], $7::text[], $8::bigint[], $9::text[], $10::text[]) AS u(t, i, k, eid, state)
    LEFT JOIN LATERAL (SELECT a.event_id::text AS eid, a.state FROM sluice.appends a
                        WHERE a.aggregate_type = u.t AND a.aggregate_id = u.i AND a.sequence_number = u.k AND a.kind = 'command'
                        LIMIT 1) c ON true
   WHERE c.eid IS NULL OR c.state <> u.state OR (u.eid <> '' AND c.eid <> u.eid)
), stored AS (
  SELECT u.e FROM unnest($11::uuid[]) AS u(e)
    JOIN LATERAL (SELECT 1 FROM sluice.appends a WHERE a.event_id = u.e LIMIT 1) a ON true
), verdict AS (
  SELECT concat_ws('; ',
           (SELECT 'last sequences ' || string_agg(format('%s %s is %s, not %s', t, i, seen, assumed), ', ') FROM last_seqs WHERE seen <> assumed),
           (SELECT 'slots ' || string_agg(format('%s of %s %s', k, t, i), ', ') FROM slot_commands),
           (SELECT 'stored ' || string_agg(e::text, ', ') FROM stored)) AS why,
         NOT EXISTS (SELECT FROM slot_commands) AND NOT EXISTS (SELECT FROM stored) AS last_only
)
SELECT v.why, v.last_only, s.t, s.i, s.seen, set_config('sluice.reserve_refused', v.why, true), (SELECT count(*) FROM locked)
FROM verdict v, (SELECT array_agg(t ORDER BY t, i) AS t, array_agg(i ORDER BY t, i) AS i, array_agg(seen ORDER BY t, i) AS seen
                   FROM last_seqs) s`

// The write statement applies a decision, unless sqlVerify refused its facts: the
// aggregates' last sequences move ($1–$4: by delta; rows the lookup found
// missing are created, so a concurrent creation fails the statement,
// others upserted; in sorted order), one contiguous block of positions is
// taken from the head row of each shard the group touches (after the
// sequences, so the head rows' locks are held only for the rest of this
// statement and the commit), and the accepted envelopes' appends rows go
// in as reserved with the segment key their group will have ($6–$13; a
// relative sequence is the aggregate's new last sequence minus seq), with
// one appends_open row per shard's block (the relay's, Log's and Repair's
// way to the rows not committed: docs/eventstore.md#open-blocks-and-hot-commits;
// sluice.appends_open = 'kept' tells the table's trigger that the
// statement keeps it itself). It
// returns whether it wrote, the shards' blocks, when each head row was
// held and when the statement began to ask for them (the head lock wait,
// database clock), and the rows' sequence numbers. It turns
// synchronous_commit off for its transaction (set_config, local: no
// statement of its own) and leaves in the session variable
// sluice.reserve_wrote whether it wrote (on, else empty), for the flush
// transaction after the commit.
//
// sqlWriteOne is the statement of a store of one shard (today's layout:
// the one head row, shard 0; $5 the block's size); sqlWriteSharded of a
// store of more ($5 the shards, ascending, $15 their blocks' sizes, $16
// the number of shards, $17 and $18 each row's shard and rank in its
// shard's block), which locks the head rows in ascending shard order
// (concurrent reservations cannot deadlock on them) before it moves them.
const (
	sqlWriteOne     = sqlWriteSequences + sqlWriteHeadOne + sqlWriteInsertOne + sqlWriteResult
	sqlWriteSharded = sqlWriteSequences + sqlWriteHeadSharded + sqlWriteInsertSharded + sqlWriteResult
)

const sqlWriteSequences = `
WITH go AS (
  SELECT coalesce(current_setting('sluice.reserve_refused', true), '') = '' AS ok,
         set_config('sluice.appends_open', 'kept', true) AS kept
), created AS (
  INSERT INTO sluice.sequences (aggregate_type, aggregate_id, last_sequence)
  SELECT u.t, u.i, u.d FROM unnest($1::text[], $2::text[], $3::bigint[], $4::boolean[]) WITH ORDINALITY AS u(t, i, d, c, ord)
   WHERE u.c AND (SELECT ok FROM go) ORDER BY u.ord
  RETURNING aggregate_type, aggregate_id, last_sequence
), added AS (
  INSERT INTO sluice.sequences AS s (aggregate_type, aggregate_id, last_sequence)
  SELECT u.t, u.i, u.d FROM unnest($1::text[], $2::text[], $3::bigint[], $4::boolean[]) WITH ORDINALITY AS u(t, i, d, c, ord)
   WHERE NOT u.c AND (SELECT ok FROM go) ORDER BY u.ord
  ON CONFLICT (aggregate_type, aggregate_id)
  DO UPDATE SET last_sequence = s.last_sequence + excluded.last_sequence, updated_at = now()
  RETURNING aggregate_type, aggregate_id, last_sequence
), seqs AS (
  SELECT * FROM created UNION ALL SELECT * FROM added
)`

// t0 is read once the sequences moved (it reads them), before the head row
// is asked for; at, after it was updated.
const sqlWriteHeadOne = `, t0 AS MATERIALIZED (
  SELECT clock_timestamp() AS t FROM (SELECT count(*) FROM seqs) c
), head AS (
  UPDATE sluice.log_head SET next_position = next_position + $5::bigint
   WHERE shard = 0 AND (SELECT ok FROM go) AND (SELECT t FROM t0) IS NOT NULL
  RETURNING 0 AS s, next_position - $5::bigint AS first, $5::bigint AS n, clock_timestamp() AS at
), head_missing AS MATERIALIZED (
  SELECT '0'::text AS shards WHERE (SELECT ok FROM go) AND NOT EXISTS (SELECT FROM head)
)`

const sqlWriteInsertOne = `, ins AS (
  INSERT INTO sluice.appends (shard, position, event_id, kind, aggregate_type, aggregate_id, sequence_number,
                              state, segment_key, canonical_hash, occurred_at, writer_id)
  SELECT 0, head.first + u.ord - 1, u.eid::uuid, u.kind, u.t, u.i,
         CASE WHEN u.rel THEN s.last_sequence - u.seq ELSE u.seq END, '` + StateReserved + `',
         'segments/' || lpad(head.first::text, 20, '0') || '-' || lpad((head.first + $5::bigint - 1)::text, 20, '0') || '.jsonl',
         u.hash, u.occ, $14
    FROM head
   CROSS JOIN unnest($6::text[], $7::text[], $8::text[], $9::text[], $10::bigint[], $11::boolean[], $12::bytea[], $13::timestamptz[])
         WITH ORDINALITY AS u(eid, kind, t, i, seq, rel, hash, occ, ord)
    LEFT JOIN seqs s ON u.rel AND s.aggregate_type = u.t AND s.aggregate_id = u.i
  RETURNING shard, position, sequence_number
), opened AS (
  INSERT INTO sluice.appends_open (shard, first, last, segment_key)
  SELECT 0, head.first, head.first + $5::bigint - 1,
         'segments/' || lpad(head.first::text, 20, '0') || '-' || lpad((head.first + $5::bigint - 1)::text, 20, '0') || '.jsonl'
    FROM head WHERE $5::bigint > 0
)`

// want is read in full (MATERIALIZED) once the sequences moved, before the
// first head row is asked for; locked takes the rows one by one in the
// order of want (a nested loop over the LATERAL lock), at is when each
// was held.
const sqlWriteHeadSharded = `, want AS MATERIALIZED (
  SELECT u.s, u.n, clock_timestamp() AS t0
    FROM unnest($5::int[], $15::bigint[]) WITH ORDINALITY AS u(s, n, ord)
   WHERE (SELECT ok FROM go) AND (SELECT count(*) FROM seqs) >= 0
   ORDER BY u.ord
), locked AS MATERIALIZED (
  SELECT w.s, w.n, clock_timestamp() AS at
    FROM want w
   CROSS JOIN LATERAL (SELECT 1 FROM sluice.log_head h WHERE h.shard = w.s FOR UPDATE) l
), head AS (
  UPDATE sluice.log_head h SET next_position = h.next_position + l.n
    FROM locked l WHERE h.shard = l.s
  RETURNING l.s AS s, h.next_position - l.n AS first, l.n, l.at
), t0 AS (
  SELECT min(t0) AS t FROM want
), head_missing AS MATERIALIZED (
  SELECT string_agg(w.s::text, ',' ORDER BY w.s) AS shards FROM want w
   WHERE NOT EXISTS (SELECT FROM locked l WHERE l.s = w.s)
  HAVING count(*) > 0
)`

const sqlWriteInsertSharded = `, seg AS (
  SELECT 'segments/n' || $16::int || '/' || lpad(s::text, 4, '0') || '-' || lpad(first::text, 20, '0') || '-'
         || lpad((first + n - 1)::text, 20, '0') || '.jsonl' AS key
    FROM head ORDER BY s LIMIT 1
), ins AS (
  INSERT INTO sluice.appends (shard, position, event_id, kind, aggregate_type, aggregate_id, sequence_number,
                              state, segment_key, canonical_hash, occurred_at, writer_id)
  SELECT u.sh, hd.first + u.rk - 1, u.eid::uuid, u.kind, u.t, u.i,
         CASE WHEN u.rel THEN s.last_sequence - u.seq ELSE u.seq END, '` + StateReserved + `',
         (SELECT key FROM seg), u.hash, u.occ, $14
    FROM unnest($6::text[], $7::text[], $8::text[], $9::text[], $10::bigint[], $11::boolean[], $12::bytea[], $13::timestamptz[],
                $17::int[], $18::bigint[]) AS u(eid, kind, t, i, seq, rel, hash, occ, sh, rk)
    JOIN head hd ON hd.s = u.sh
    LEFT JOIN seqs s ON u.rel AND s.aggregate_type = u.t AND s.aggregate_id = u.i
  RETURNING shard, position, sequence_number
), opened AS (
  INSERT INTO sluice.appends_open (shard, first, last, segment_key)
  SELECT s, first, first + n - 1, (SELECT key FROM seg) FROM head WHERE n > 0
)`

// sqlWriteResult is the write statement's answer (the same for one shard
// and for more). No NOTIFY announces a reservation: no reader of the
// commit stream acted on one (docs/eventstore.md#notify).
//
// A shard asked for without a head row (head_missing: only a hand-edited
// log_head gets there; New creates the rows) fails the statement, hence
// the transaction: the sequences moved above are rolled back with it.
// Plain SQL has no RAISE, so the failure is a cast of the message to int
// (SQLSTATE 22P02, the message in the error's text), on a column of a
// materialized CTE so that the planner cannot fold it while the CTE is
// empty; write turns it into a *HeadRowMissingError.
const sqlWriteResult = `
SELECT (SELECT ('` + headMissingMarker + `' || shards)::int FROM head_missing) IS NULL,
       (SELECT ok FROM go),
       (SELECT coalesce(array_agg(s ORDER BY s), '{}') FROM head),
       (SELECT coalesce(array_agg(first ORDER BY s), '{}') FROM head),
       (SELECT coalesce(array_agg(at ORDER BY s), '{}') FROM head),
       (SELECT t FROM t0),
       (SELECT array_agg(sequence_number ORDER BY shard, position) FROM ins),
       set_config('synchronous_commit', 'off', true),
       set_config('sluice.reserve_wrote', CASE WHEN EXISTS (SELECT FROM head) THEN 'on' ELSE '' END, false)`

// sqlDropMoved removes the abandoned rows that accepted retries replace
// with fresh reservations (the event_id is unique): it takes their row
// locks, so a late writer's commit of the same rows waits for this
// transaction and then finds them gone. A row that is no longer abandoned
// stays, and the retry's insert fails on the unique index: the reservation
// runs again.
const sqlDropMoved = `DELETE FROM sluice.appends WHERE event_id = ANY($1::uuid[]) AND state = '` + StateAbandoned + `'`

// sqlFlush makes everything this connection committed before durable: a
// transaction with a WAL record and an xid, committed with the session's
// synchronous_commit, flushes the WAL through its own commit record (see
// migrations/00013_eventstore.sql). Nothing reserved, nothing to flush.
const sqlFlush = `
INSERT INTO sluice.eventstore_flush AS f (backend_pid, flushes)
SELECT pg_backend_pid(), 1 WHERE current_setting('sluice.reserve_wrote', true) <> ''
ON CONFLICT (backend_pid) DO UPDATE SET flushes = f.flushes + 1`

// writeArgs is a decision as the write's arrays.
// Its arrays are pgarray types: the same parameters as the plain slices,
// without an allocation per element when sent.
type writeArgs struct {
	aggT, aggI          pgarray.Text // sorted
	delta               pgarray.Int8
	create              pgarray.Bool
	n                   int64 // accepted envelopes, in the order of their lines (by shard, then position):
	eids, kinds, ts, is pgarray.Text
	seqs                pgarray.Int8 // sequence, or when rel the distance below the aggregate's new last sequence
	rel                 pgarray.Bool
	hashes              pgarray.Bytea
	occs                pgarray.Timestamptz
	writer              string
	moved               pgarray.UUIDText // event_ids of abandoned rows that accepted retries replace
	checks              *checks          // assumed facts to verify first; nil when read
	// More than one shard (shards > 1): each row's shard and its rank
	// (1-based) in its shard's block, and the blocks' shards (ascending)
	// and sizes.
	shards    int
	rowShard  pgarray.Int4
	rowRank   pgarray.Int8
	headShard pgarray.Int4
	headSize  pgarray.Int8
}

// rank is row j's rank (1-based) in its shard's block.
func (w *writeArgs) rank(j int) int64 {
	if w.shards <= 1 {
		return int64(j) + 1
	}
	return w.rowRank[j]
}

// newWrite turns a decision into the write's arrays; d.order holds the
// accepted envelopes by shard (a store of more than one shard).
func newWrite(items []*item, d decision, writer string, shards int) *writeArgs {
	w := &writeArgs{n: int64(len(d.order)), writer: writer, shards: shards}
	deltas := make(map[aggKey]int64, len(d.advances))
	for _, a := range d.advances {
		w.aggT, w.aggI = append(w.aggT, a.agg.t), append(w.aggI, a.agg.i)
		w.delta, w.create = append(w.delta, a.delta), append(w.create, a.create)
		deltas[a.agg] = a.delta
	}
	for _, n := range d.order {
		it, v := items[n], d.verdicts[n]
		e := it.env
		seq := v.seq
		if v.rel {
			seq = deltas[aggKey{e.AggregateType, e.AggregateID}] - v.seq
		}
		w.eids, w.kinds, w.ts, w.is = append(w.eids, e.EventID), append(w.kinds, string(e.Kind)), append(w.ts, e.AggregateType), append(w.is, e.AggregateID)
		w.seqs, w.rel = append(w.seqs, seq), append(w.rel, v.rel)
		w.hashes, w.occs = append(w.hashes, it.hash[:]), append(w.occs, e.OccurredAt.Time())
		if v.moved != nil {
			w.moved = append(w.moved, e.EventID)
		}
		if shards > 1 {
			sh := int32(it.shard)
			if k := len(w.headShard); k == 0 || w.headShard[k-1] != sh {
				w.headShard, w.headSize = append(w.headShard, sh), append(w.headSize, 0)
			}
			w.headSize[len(w.headSize)-1]++
			w.rowShard, w.rowRank = append(w.rowShard, sh), append(w.rowRank, w.headSize[len(w.headSize)-1])
		}
	}
	return w
}

// checks are the assumed facts a write verifies (sqlVerify).
type checks struct {
	lockT, lockI       pgarray.Text
	lastT, lastI       pgarray.Text
	last               pgarray.Int8
	slotT, slotI       pgarray.Text
	slotK              pgarray.Int8
	slotEID, slotState pgarray.Text
	occIDs             pgarray.UUIDText
}

// probeJoinPairsMax is the most pairs of rows a probe plan may join by a
// nested loop. The write joins the group's envelopes with the aggregates
// it advances (seqs), and the checks join the assumed last sequences with
// the locked sequences rows; a generic plan estimates an array at 10 rows
// and joins the two by a nested loop, quadratic in the group (500
// envelopes of 500 aggregates: 40 ms, against 0.8 ms hashed). Fine for
// the tens of aggregates of a usual group; a larger one runs its
// transaction planned per call (sqlPlanLargeGroup).
const probeJoinPairsMax = 10_000

// sqlPlanLargeGroup plans the transaction's statements per call for the
// actual sizes of the group's arrays (hash joins allowed), and still never
// scans appends or sequences (enable_seqscan off): a group whose joins
// exceed probeJoinPairsMax.
const sqlPlanLargeGroup = `SELECT set_config('plan_cache_mode', 'force_custom_plan', true),
       set_config('enable_seqscan', 'off', true), set_config('enable_hashjoin', 'on', true),
       set_config('enable_mergejoin', 'off', true)`

// plans is the settings statement the write's round trip starts with:
// plans per call for a large group, probe plans before the checks of
// assumed facts, else none ("": the write runs in the lookup's
// transaction, with its probe plans, or in one of its own, with its cached
// plan).
func (w *writeArgs) plans() string {
	large := int64(len(w.aggT))*w.n > probeJoinPairsMax
	if k := w.checks; k != nil && len(k.lastT)*len(k.lockT) > probeJoinPairsMax {
		large = true
	}
	switch {
	case large:
		return sqlPlanLargeGroup
	case w.checks != nil:
		return sqlPlanProbes
	}
	return ""
}

// assumedChecks lists the facts of f that the decision rests on and the
// write's unique indexes do not enforce: the assumed last sequences (and
// the locks of every aggregate the group advances, taken before any is
// written, in order), the slot commands, and that no envelope with
// expected_seq is stored (it may have been refused; the others are
// inserted, so the unique index on event_id checks them). nil: none.
func assumedChecks(items []*item, f facts, d decision) *checks {
	c := &checks{}
	if len(f.last) > 0 {
		locks := map[aggKey]bool{}
		for _, a := range d.advances {
			locks[a.agg] = true
		}
		for k := range f.last {
			locks[k] = true
		}
		keys := slices.SortedFunc(maps.Keys(locks), compareAggKeys)
		for _, k := range keys {
			c.lockT, c.lockI = append(c.lockT, k.t), append(c.lockI, k.i)
			if l, ok := f.last[k]; ok {
				c.lastT, c.lastI, c.last = append(c.lastT, k.t), append(c.lastI, k.i), append(c.last, l.seq)
			}
		}
	}
	for _, it := range items {
		e := it.env
		if it.slot {
			cmd := f.slots[slotKeyOf(e.AggregateType, e.AggregateID, e.SequenceNumber, envelope.KindCommand)]
			c.slotT, c.slotI, c.slotK = append(c.slotT, e.AggregateType), append(c.slotI, e.AggregateID), append(c.slotK, e.SequenceNumber)
			c.slotEID, c.slotState = append(c.slotEID, cmd.eventID), append(c.slotState, cmd.state)
		}
		if e.ExpectedSeq != nil {
			c.occIDs = append(c.occIDs, e.EventID)
		}
	}
	if len(c.lockT) == 0 && len(c.slotT) == 0 && len(c.occIDs) == 0 {
		return nil
	}
	return c
}

// write runs a decision's transaction in one round trip (docs/eventstore.md#append-protocol-group-commit):
// BEGIN (unless the lookup began it); the checks of assumed facts (planned
// per call); the removal of abandoned rows that retries replace;
// sqlWriteOne or sqlWriteSharded, which also turns synchronous_commit off
// for the transaction; COMMIT — which releases the locks on log_head and
// sequences without waiting for the WAL flush, so the next group's
// reservation proceeds —; and sqlFlush, whose synchronous commit returns
// only once the WAL holding the reservation is durable. When it returns
// without error the reservation is as durable as a synchronous commit
// would have made it; the segment is written only after that. No NOTIFY:
// a reservation wakes no reader (the commit's NOTIFY does). For the
// common group that is four statements: BEGIN, the write, COMMIT, the
// flush (TestGroupWork). It returns the blocks of positions it took (one
// per shard, ascending) and the rows' sequence numbers (relative ones now
// known), or an *assumptionError when a check failed (then nothing was
// written).
func (s *Store) write(ctx context.Context, c *pgx.Conn, w *writeArgs) (blocks []shardBlock, seqs []int64, err error) {
	b := &pgx.Batch{}
	var seen verifyResult
	if c.PgConn().TxStatus() != 'T' { // else the lookup began it
		b.Queue("BEGIN")
	}
	if p := w.plans(); p != "" {
		b.Queue(p)
	}
	if k := w.checks; k != nil {
		b.Queue(sqlVerify, k.lockT, k.lockI, k.lastT, k.lastI, k.last, k.slotT, k.slotI, k.slotK, k.slotEID, k.slotState, k.occIDs).
			QueryRow(seen.scan)
	}
	if len(w.moved) > 0 {
		b.Queue(sqlDropMoved, w.moved)
	}
	var res writeResult
	if w.shards <= 1 {
		b.Queue(sqlWriteOne, w.aggT, w.aggI, w.delta, w.create, w.n, w.eids, w.kinds, w.ts, w.is, w.seqs, w.rel, w.hashes, w.occs, w.writer).
			QueryRow(res.scan)
	} else {
		b.Queue(sqlWriteSharded, w.aggT, w.aggI, w.delta, w.create, w.headShard, w.eids, w.kinds, w.ts, w.is, w.seqs, w.rel, w.hashes, w.occs, w.writer,
			w.headSize, w.shards, w.rowShard, w.rowRank).QueryRow(res.scan)
	}
	b.Queue("COMMIT")
	b.Queue(sqlFlush)
	if err := c.SendBatch(ctx, b).Close(); err != nil {
		if missing, ok := headMissing(err); ok {
			return nil, nil, missing
		}
		return nil, nil, fmt.Errorf("eventstore: reserve: %w", err)
	}
	if c.PgConn().TxStatus() != 'I' {
		return nil, nil, fmt.Errorf("eventstore: reserve: transaction did not commit")
	}
	if !res.wrote {
		return nil, nil, seen.refusal()
	}
	blocks, err = res.blocks(w)
	if err != nil {
		return nil, nil, err
	}
	seqs = res.seqs
	if int64(len(seqs)) != w.n {
		return nil, nil, fmt.Errorf("eventstore: reserve: wrote %d rows of %d", len(seqs), w.n)
	}
	for j, rel := range w.rel {
		if !rel && seqs[j] != w.seqs[j] {
			return nil, nil, fmt.Errorf("eventstore: reserve: row %d written with sequence %d, decided %d", j, seqs[j], w.seqs[j])
		}
	}
	s.observeHeadWait(res)
	return blocks, seqs, nil
}

// writeResult is what sqlWriteOne and sqlWriteSharded return.
type writeResult struct {
	wrote  bool
	shards []int32
	firsts []int64
	held   []time.Time // when each shard's head row was held (updated)
	asked  *time.Time  // when the first head row was asked for
	seqs   []int64
}

func (r *writeResult) scan(row pgx.Row) error {
	return row.Scan(nil, &r.wrote, &r.shards, &r.firsts, &r.held, &r.asked, &r.seqs, nil, nil)
}

// headMissingMarker starts the text the write statement fails with when
// a shard's head row is missing (sqlWriteResult); the shards follow,
// comma-separated.
const headMissingMarker = "sluice.log_head has no row for shards "

// HeadRowMissingError: the reservation's write asked for the head row
// (sluice.log_head) of a shard that has none. Only an index edited by hand
// gets there: New creates every shard's row, and nothing deletes one. The
// write failed inside its transaction, so nothing of the group was
// written (no sequence moved, no position taken); every append of the
// group fails with it until the row is back.
type HeadRowMissingError struct {
	Shards []int
}

func (e *HeadRowMissingError) Error() string {
	return fmt.Sprintf("eventstore: reserve: sluice.log_head has no row for shard(s) %v: the index was edited by hand; nothing was written "+
		"(restore each row with next_position above the shard's highest position in sluice.appends)", e.Shards)
}

// headMissing recognises the write statement's failure on a missing head
// row (sqlWriteResult) in err.
func headMissing(err error) (*HeadRowMissingError, bool) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "22P02" /* invalid_text_representation */ {
		return nil, false
	}
	_, list, ok := strings.Cut(pgErr.Message, headMissingMarker)
	if !ok {
		return nil, false
	}
	list, _, _ = strings.Cut(list, `"`)
	e := &HeadRowMissingError{}
	for _, f := range strings.Split(list, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil {
			e.Shards = append(e.Shards, n)
		}
	}
	return e, true
}

// blocks are the blocks the write took, checked against what it asked.
func (r *writeResult) blocks(w *writeArgs) ([]shardBlock, error) {
	want, sizes := w.headShard, w.headSize
	if w.shards <= 1 {
		want, sizes = []int32{0}, []int64{w.n}
	}
	if len(r.shards) != len(want) || len(r.firsts) != len(want) {
		return nil, fmt.Errorf("eventstore: reserve: took blocks in shards %v, asked %v", r.shards, want)
	}
	out := make([]shardBlock, len(want))
	for k := range want {
		if r.shards[k] != want[k] || r.firsts[k] < 1 {
			return nil, fmt.Errorf("eventstore: reserve: took blocks in shards %v at %v, asked %v", r.shards, r.firsts, want)
		}
		out[k] = shardBlock{shard: int(want[k]), first: r.firsts[k], last: r.firsts[k] + sizes[k] - 1}
	}
	return out, nil
}

// observeHeadWait adds the head lock waits of a write to
// sluice_eventstore_head_lock_wait_seconds: per shard, from when the
// previous head row (or the first) was asked for to when this one was
// held, database clock.
func (s *Store) observeHeadWait(r writeResult) {
	if r.asked == nil || len(r.held) != len(r.shards) {
		return
	}
	since := *r.asked
	for k, at := range r.held {
		s.m.headWait.WithLabelValues(strconv.Itoa(int(r.shards[k]))).Observe(max(at.Sub(since), 0).Seconds())
		since = at
	}
}

// verifyResult is what sqlVerify returns.
type verifyResult struct {
	why      string
	lastOnly bool
	t, i     []string
	seen     []int64
}

func (v *verifyResult) scan(r pgx.Row) error {
	return r.Scan(&v.why, &v.lastOnly, &v.t, &v.i, &v.seen, nil, nil)
}

// refusal is the error of a write whose checks failed.
func (v *verifyResult) refusal() *assumptionError {
	e := &assumptionError{why: v.why}
	if v.lastOnly {
		e.seen = make(map[aggKey]int64, len(v.t))
		for n := range v.t {
			e.seen[aggKey{v.t[n], v.i[n]}] = v.seen[n]
		}
	}
	return e
}
