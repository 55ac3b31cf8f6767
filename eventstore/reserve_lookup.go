package eventstore

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/pgarray"
)

// The lookup: what the rules of a group need, read in one round trip at
// the start of the reservation transaction, under the row locks of the
// group's aggregates (docs/eventstore.md#append-protocol-group-commit).

// sqlPlanProbes makes the transaction's statements run one generic plan
// each, cached per connection, made with sequential scans, hash joins and
// merge joins disabled. Every statement that runs after it reads or updates
// appends (and its neighbours) by keys it is given, so nested loops of
// index probes are the right plan at every size of the table, and with the
// scans disabled that is the plan Postgres makes, also from the statistics
// of an empty appends: a plan made while appends was small is otherwise a
// sequential scan, and a cached plan stays in use as the table grows
// (see Replan). Planned per call instead (force_custom_plan, until issue
// 34), the planning of these statements cost as much Postgres CPU as
// running them: 0.4 ms per commit, 0.6 ms per check of assumed facts
// (docs/eventstore.md#append-protocol-group-commit, *Plans*). A replan
// after an ANALYZE happens in such a transaction too.
const sqlPlanProbes = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true),
       set_config('enable_seqscan', 'off', true), set_config('enable_hashjoin', 'off', true),
       set_config('enable_mergejoin', 'off', true)`

// sqlLockSequences locks the sequences rows of the group's aggregates, in
// the order given (sorted: concurrent reservations lock in one order), and
// returns their last sequences. A missing row is not created: the write
// creates it, and fails if another transaction did meanwhile.
const sqlLockSequences = `
SELECT l.aggregate_type, l.aggregate_id, l.last_sequence
FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS u(t, i, ord)
JOIN LATERAL (SELECT s.aggregate_type, s.aggregate_id, s.last_sequence FROM sluice.sequences s
               WHERE s.aggregate_type = u.t AND s.aggregate_id = u.i FOR UPDATE) l ON true
ORDER BY u.ord`

// sqlLookupEvents reads the rows of the group's event_ids, and for an
// abandoned one whether a later slot of its aggregate is not abandoned
// (a retry then takes a new sequence).
const sqlLookupEvents = `
SELECT a.position, a.event_id::text, a.kind, a.aggregate_type, a.aggregate_id, a.sequence_number, a.state, a.segment_key,
       coalesce(a.byte_offset, -1), coalesce(a.byte_length, 0), a.canonical_hash, a.occurred_at, a.writer_id,
       a.reserved_at < now() - make_interval(secs => $2),
       a.state = '` + StateAbandoned + `' AND EXISTS (
         SELECT 1 FROM sluice.appends b
          WHERE b.aggregate_type = a.aggregate_type AND b.aggregate_id = a.aggregate_id
            AND b.sequence_number > a.sequence_number AND b.state <> '` + StateAbandoned + `'),
       a.shard
FROM sluice.appends a WHERE a.event_id = ANY($1::uuid[])`

// sqlLookupSlots reads the rows at the slots the group names: one probe of
// the slot index per slot (LATERAL … LIMIT: a plain join was planned as a
// scan of the whole table while its statistics were those of a small one).
const sqlLookupSlots = `
SELECT u.t, u.i, u.s, a.kind, a.event_id::text, a.state
FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(t, i, s)
JOIN LATERAL (SELECT a.kind, a.event_id, a.state FROM sluice.appends a
               WHERE a.aggregate_type = u.t AND a.aggregate_id = u.i AND a.sequence_number = u.s
               LIMIT 2) a ON true`

// lookup begins the reservation transaction and reads the group's facts:
// BEGIN, probe plans (sqlPlanProbes), the aggregates' rows locked, the rows of the group's event_ids
// and of the slots it names. One round trip; the locks are held to the
// write's commit.
func (s *Store) lookup(ctx context.Context, c *pgx.Conn, items []*item) (facts, error) {
	f := facts{stored: map[string]indexRow{}, superseded: map[string]bool{}, slots: map[string]slotRow{}, last: map[aggKey]lastSeq{}}
	ids := make(pgarray.UUIDText, len(items)) // pgarray: no allocation per element when sent
	var aggs []aggKey
	seen := map[aggKey]bool{}
	var slotT, slotI pgarray.Text
	var slotK pgarray.Int8
	for n, it := range items {
		e := it.env
		ids[n] = e.EventID
		if it.slotKey != "" {
			slotT, slotI, slotK = append(slotT, e.AggregateType), append(slotI, e.AggregateID), append(slotK, e.SequenceNumber)
		}
		if k := (aggKey{e.AggregateType, e.AggregateID}); !it.slot && !seen[k] {
			seen[k] = true
			aggs = append(aggs, k)
		}
	}
	slices.SortFunc(aggs, compareAggKeys)
	b := &pgx.Batch{}
	b.Queue("BEGIN") // the write turns synchronous_commit off for the transaction
	b.Queue(sqlPlanProbes)
	if len(aggs) > 0 {
		aggT, aggI := make(pgarray.Text, len(aggs)), make(pgarray.Text, len(aggs))
		for n, k := range aggs {
			aggT[n], aggI[n] = k.t, k.i
			f.last[k] = lastSeq{} // known: no row, unless one is read
		}
		b.Queue(sqlLockSequences, aggT, aggI).Query(f.readSequences)
	}
	b.Queue(sqlLookupEvents, ids, s.cfg.AppendTimeout.Seconds()).Query(f.readEvents)
	if len(slotT) > 0 {
		b.Queue(sqlLookupSlots, slotT, slotI, slotK).Query(f.readSlots)
	}
	if err := c.SendBatch(ctx, b).Close(); err != nil {
		return facts{}, err
	}
	return f, nil
}

func (f *facts) readSequences(rows pgx.Rows) error {
	for rows.Next() {
		var k aggKey
		var last int64
		if err := rows.Scan(&k.t, &k.i, &last); err != nil {
			return err
		}
		f.last[k] = lastSeq{seq: last, exists: true}
	}
	return rows.Err()
}

func (f *facts) readEvents(rows pgx.Rows) error {
	for rows.Next() {
		var superseded bool
		var r indexRow
		err := rows.Scan(&r.position, &r.eventID, &r.kind, &r.aggType, &r.aggID, &r.seq, &r.state, &r.key,
			&r.offset, &r.length, &r.hash, &r.occurredAt, &r.writer, &r.stale, &superseded, &r.shard)
		if err != nil {
			return err
		}
		f.stored[r.eventID] = r
		if superseded {
			f.superseded[r.eventID] = true
		}
	}
	return rows.Err()
}

func (f *facts) readSlots(rows pgx.Rows) error {
	for rows.Next() {
		var t, i, kind string
		var seq int64
		var row slotRow
		if err := rows.Scan(&t, &i, &seq, &kind, &row.eventID, &row.state); err != nil {
			return err
		}
		f.slots[slotKeyOf(t, i, seq, envelope.Kind(kind))] = row
	}
	return rows.Err()
}
