package eventstore

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicehq/sluice/shared/envelope"
)

// indexRow is one row of sluice.appends.
type indexRow struct {
	position   int64
	eventID    string
	kind       string
	aggType    string
	aggID      string
	seq        int64
	state      string
	key        string
	offset     int64
	length     int64
	hash       []byte
	occurredAt time.Time
	writer     string
	stale      bool // reserved longer than the append timeout (database clock)
}

const sqlLookupEvents = `
SELECT position, event_id::text, kind, aggregate_type, aggregate_id, sequence_number, state, segment_key,
       coalesce(byte_offset, -1), coalesce(byte_length, 0), canonical_hash, occurred_at, writer_id,
       reserved_at < now() - make_interval(secs => $2)
FROM sluice.appends WHERE event_id = ANY($1::uuid[])`

func scanIndexRow(rows pgx.Rows) (indexRow, error) {
	var r indexRow
	err := rows.Scan(&r.position, &r.eventID, &r.kind, &r.aggType, &r.aggID, &r.seq, &r.state, &r.key,
		&r.offset, &r.length, &r.hash, &r.occurredAt, &r.writer, &r.stale)
	return r, err
}

const sqlLookupSlots = `
SELECT a.aggregate_type, a.aggregate_id, a.sequence_number, a.kind, a.event_id::text, a.state
FROM sluice.appends a
JOIN unnest($1::text[], $2::text[], $3::bigint[]) AS u(t, i, s)
  ON a.aggregate_type = u.t AND a.aggregate_id = u.i AND a.sequence_number = u.s`

// sqlSlotRefusals applies the slot rules to the domain events going into
// their commands' slots: sluice.eventstore_slot_refusal, the one definition
// the one-round-trip reservation applies too (migrations/00013_eventstore.sql),
// gives the rule each breaks (NULL: none) and the slot's command. One probe
// of the slot index per envelope, as in the reservation.
const sqlSlotRefusals = `
SELECT u.ord, sluice.eventstore_slot_refusal(c.event_id, c.state, u.cause), coalesce(c.event_id::text, '')
FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[]) WITH ORDINALITY AS u(t, i, s, cause, ord)
LEFT JOIN LATERAL (
     SELECT a.event_id, a.state FROM sluice.appends a
      WHERE a.aggregate_type = u.t AND a.aggregate_id = u.i AND a.sequence_number = u.s AND a.kind = 'command'
      LIMIT 1) c ON true`

// slotRefusal is what sqlSlotRefusals says of one slot envelope: the rule it
// breaks ("" for none) and the event_id of the slot's command ("" for none).
type slotRefusal struct{ rule, command string }

// sqlPlanPerCall makes the general path's statements plan per call, for
// the arrays at hand and the tables as they are: generic plans cached while
// appends was small scan it sequentially (see Replan).
const sqlPlanPerCall = `SELECT set_config('plan_cache_mode', 'force_custom_plan', true)`

// sqlLockSequences locks (creating at 0 where missing) the sequence rows of
// the group's aggregates and returns their last sequence. The input is
// sorted, so concurrent groups lock in the same order.
const sqlLockSequences = `
INSERT INTO sluice.sequences AS s (aggregate_type, aggregate_id, last_sequence)
SELECT t, i, 0 FROM unnest($1::text[], $2::text[]) AS u(t, i)
ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_sequence = s.last_sequence
RETURNING aggregate_type, aggregate_id, last_sequence, (xmax = 0)`

// sqlReserve writes the group's reservation in one statement: new last
// sequences, removal of sequence rows this transaction created but did not
// use, one contiguous block of positions from log_head, the appends rows in
// state reserved with the segment key they will have, and the NOTIFY.
const sqlReserve = `
WITH seqs AS (
  UPDATE sluice.sequences s SET last_sequence = u.last, updated_at = now()
  FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(t, i, last)
  WHERE s.aggregate_type = u.t AND s.aggregate_id = u.i
  RETURNING 1
), unused AS (
  DELETE FROM sluice.sequences s
  USING unnest($4::text[], $5::text[]) AS u(t, i)
  WHERE s.aggregate_type = u.t AND s.aggregate_id = u.i AND s.last_sequence = 0
  RETURNING 1
), head AS (
  UPDATE sluice.log_head SET next_position = next_position + $6::bigint
  RETURNING next_position - $6::bigint AS first
), ins AS (
  INSERT INTO sluice.appends (position, event_id, kind, aggregate_type, aggregate_id, sequence_number,
                              state, segment_key, canonical_hash, occurred_at, writer_id)
  SELECT head.first + u.ord - 1, u.eid::uuid, u.kind, u.t, u.i, u.seq, '` + StateReserved + `',
         'segments/' || lpad(head.first::text, 20, '0') || '-' || lpad((head.first + $6::bigint - 1)::text, 20, '0') || '.jsonl',
         u.hash, u.occ, $14
  FROM head, unnest($7::text[], $8::text[], $9::text[], $10::text[], $11::bigint[], $12::bytea[], $13::timestamptz[])
       WITH ORDINALITY AS u(eid, kind, t, i, seq, hash, occ, ord)
  RETURNING 1
)
SELECT head.first, (SELECT count(*) FROM ins),
       pg_notify('` + NotifyChannel + `', '` + StateReserved + ` ' || head.first || ' ' || (head.first + $6::bigint - 1))
FROM head`

type aggKey struct{ t, i string }

// compareAggKeys orders aggregates by (type, id): concurrent reservations
// lock sequences rows in this one order, so they cannot deadlock.
func compareAggKeys(a, b aggKey) int {
	if c := strings.Compare(a.t, b.t); c != 0 {
		return c
	}
	return strings.Compare(a.i, b.i)
}

// txConn acquires a connection for one hand-written transaction (BEGIN …
// COMMIT in a batch). release rolls back a transaction the caller left open
// (an error half-way) before the connection goes back to the pool.
func (s *Store) txConn(ctx context.Context) (c *pgx.Conn, release func(), err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, err
	}
	c = conn.Conn()
	return c, func() {
		if c.PgConn().TxStatus() != 'I' {
			_, _ = c.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		}
		conn.Release()
	}, nil
}

// reserve runs step 2 and 3 of docs/eventstore.md#append-protocol-group-commit for a group: idempotency, slot
// checks, sequences with OCC, and one reservation transaction. It returns the
// accepted items (seq and pos set, in position order) and the block's first
// position. Items it settles otherwise carry res, stored, revive, resolve or
// requeue. A unique violation (a concurrent writer elsewhere took an
// event_id or slot) rolls the transaction back and runs it again, so no
// position is lost.
func (s *Store) reserve(ctx context.Context, items []*item) (accepted []*item, first int64, err error) {
	for attempt := 0; ; attempt++ {
		for _, it := range items {
			it.resetOutcome()
		}
		accepted, first, err = s.reserveOnce(ctx, items)
		var pgErr *pgconn.PgError
		if err != nil && attempt < 8 && (errors.Is(err, errMovedRace) || errors.As(err, &pgErr) &&
			(pgErr.Code == "23505" || pgErr.Code == "40P01" || pgErr.Code == "40001")) {
			continue
		}
		return accepted, first, err
	}
}

func (s *Store) reserveOnce(ctx context.Context, items []*item) (accepted []*item, first int64, err error) {
	if s.fastEligible(items) {
		accepted, first, ok, err := s.reserveFast(ctx, items)
		if ok {
			s.stats.fast.Add(1)
		}
		if ok || err != nil {
			return accepted, first, err
		}
		for _, it := range items {
			it.resetOutcome()
		}
	}
	c, release, err := s.txConn(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("eventstore: reserve: %w", err)
	}
	defer release()

	// Round trip 1: BEGIN, the idempotency lookup by event_id, the slot
	// lookup, and the locks on the sequences of every aggregate that may
	// take a sequence (rows created at 0 where missing).
	ids := make([]string, len(items))
	var slotT, slotI, intoT, intoI, intoCause []string
	var slotK, intoK []int64
	var into []*item // domain events into their commands' slots
	aggSet := map[aggKey]bool{}
	for i, it := range items {
		ids[i] = it.env.EventID
		if it.slotKey != "" {
			slotT, slotI, slotK = append(slotT, it.env.AggregateType), append(slotI, it.env.AggregateID), append(slotK, it.env.SequenceNumber)
		}
		if it.slot {
			// A causation_id that is no UUID never names a command, and
			// Postgres text cannot carry every string (NUL): any non-UUID
			// stands for it.
			cause := it.env.Metadata.CausationID()
			if cause != "" && !envelope.IsCanonicalUUID(cause) {
				cause = "not a uuid"
			}
			into = append(into, it)
			intoT, intoI, intoK, intoCause = append(intoT, it.env.AggregateType), append(intoI, it.env.AggregateID),
				append(intoK, it.env.SequenceNumber), append(intoCause, cause)
		}
		if !it.slot {
			aggSet[aggKey{it.env.AggregateType, it.env.AggregateID}] = true
		}
	}
	keys := make([]aggKey, 0, len(aggSet))
	for k := range aggSet {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareAggKeys)
	seqT, seqI := make([]string, len(keys)), make([]string, len(keys))
	for n, k := range keys {
		seqT[n], seqI[n] = k.t, k.i
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(sqlPlanPerCall)
	b.Queue(sqlLookupEvents, ids, s.cfg.AppendTimeout.Seconds())
	if len(slotT) > 0 {
		b.Queue(sqlLookupSlots, slotT, slotI, slotK)
	}
	if len(into) > 0 {
		b.Queue(sqlSlotRefusals, intoT, intoI, intoK, intoCause)
	}
	if len(keys) > 0 {
		b.Queue(sqlLockSequences, seqT, seqI)
	}
	existing := map[string]indexRow{}
	slotRows := map[string]slotRow{}
	refusals := make(map[*item]slotRefusal, len(into))
	last, read, created := map[aggKey]int64{}, map[aggKey]int64{}, map[aggKey]bool{}
	err = func() error {
		br := c.SendBatch(ctx, b)
		defer br.Close()
		for range 2 { // BEGIN, sqlPlanPerCall
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		rows, _ := br.Query()
		for rows.Next() {
			r, err := scanIndexRow(rows)
			if err != nil {
				rows.Close()
				return err
			}
			existing[r.eventID] = r
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(slotT) > 0 {
			rows, _ := br.Query()
			for rows.Next() {
				var t, i, kind, eid, state string
				var seq int64
				if err := rows.Scan(&t, &i, &seq, &kind, &eid, &state); err != nil {
					rows.Close()
					return err
				}
				slotRows[fmt.Sprintf("%s\x00%s\x00%d\x00%s", t, i, seq, kind)] = slotRow{eid, state}
			}
			if err := rows.Err(); err != nil {
				return err
			}
		}
		if len(into) > 0 {
			rows, _ := br.Query()
			for rows.Next() {
				var ord int64
				var rule *string
				var cmd string
				if err := rows.Scan(&ord, &rule, &cmd); err != nil {
					rows.Close()
					return err
				}
				if ord < 1 || int(ord) > len(into) {
					rows.Close()
					return fmt.Errorf("slot rules: row %d of %d inputs", ord, len(into))
				}
				r := slotRefusal{command: cmd}
				if rule != nil {
					r.rule = *rule
				}
				refusals[into[ord-1]] = r
			}
			if err := rows.Err(); err != nil {
				return err
			}
		}
		if len(keys) > 0 {
			rows, _ := br.Query()
			for rows.Next() {
				var k aggKey
				var v int64
				var inserted bool
				if err := rows.Scan(&k.t, &k.i, &v, &inserted); err != nil {
					rows.Close()
					return err
				}
				last[k], read[k], created[k] = v, v, inserted
			}
			if err := rows.Err(); err != nil {
				return err
			}
		}
		return br.Close()
	}()
	if err != nil {
		return nil, 0, fmt.Errorf("eventstore: reserve: lookup: %w", err)
	}

	// 2. idempotency by event_id, then the slot rules
	now := time.Now()
	live := make([]*item, 0, len(items))
	for _, it := range items {
		if r, ok := existing[it.env.EventID]; ok {
			s.settleExisting(it, r, now)
			if it.moved == nil {
				continue
			}
		}
		if it.slotKey != "" && !s.slotAllowed(it, slotRows, refusals[it]) {
			it.moved = nil
			continue
		}
		live = append(live, it)
	}

	units, live := settleUnits(items, live)

	superseded, err := s.supersededSlots(ctx, c, live)
	if err != nil {
		return nil, 0, err
	}

	// 3. sequences (OCC) in arrival order
	accepted = make([]*item, 0, len(live))
	top := map[aggKey]int64{} // highest sequence accepted per aggregate in this group
	var doneUnits map[*unit]bool
	for _, it := range live {
		if u := it.unit; u != nil {
			if !doneUnits[u] {
				if doneUnits == nil {
					doneUnits = map[*unit]bool{}
				}
				doneUnits[u] = true
				accepted = s.reserveUnit(u, units[u], last, top, superseded, accepted)
			}
			continue
		}
		if it.slot {
			it.seq = it.env.SequenceNumber
			accepted = append(accepted, it)
			continue
		}
		k := aggKey{it.env.AggregateType, it.env.AggregateID}
		cur := last[k]
		if m := it.moved; m != nil && (s.cfg.allocatorOff() || !superseded[it] && m.seq > top[k]) {
			// A retry of an abandoned append whose slot nothing after it
			// filled (every later slot of the aggregate is abandoned too,
			// or being retried here, in order): it keeps its slot — its
			// expected_seq held when the slot was handed out — and only
			// its position is fresh, so consumers still see the
			// aggregate's sequences in position order.
			it.seq = m.seq
			top[k] = max(top[k], it.seq)
			accepted = append(accepted, it)
			continue
		}
		// Otherwise it is a new append: optimistic concurrency against the
		// aggregate as it is, and the next sequence; a retry's old slot
		// stays an empty one (docs/eventstore.md#append-protocol-group-commit: an abandoned slot is finished).
		if it.env.ExpectedSeq != nil && *it.env.ExpectedSeq != cur {
			it.res.Err = &ConflictError{AggregateType: k.t, AggregateID: k.i, ExpectedSeq: *it.env.ExpectedSeq, ActualSeq: cur}
			continue
		}
		if s.cfg.allocatorOff() {
			it.seq = it.env.SequenceNumber
			last[k] = max(cur, it.seq)
		} else {
			it.seq = cur + 1
			last[k] = it.seq
		}
		top[k] = max(top[k], it.seq)
		accepted = append(accepted, it)
	}
	if len(accepted) == 0 {
		return nil, 0, nil // rolled back: nothing to reserve
	}
	if err := s.dropMoved(ctx, c, accepted); err != nil {
		return nil, 0, err
	}

	// Round trip 2: sequences, positions, appends rows, NOTIFY; COMMIT.
	var upT, upI, delT, delI []string
	var upLast []int64
	for _, k := range keys {
		switch {
		case last[k] != read[k]:
			upT, upI, upLast = append(upT, k.t), append(upI, k.i), append(upLast, last[k])
		case created[k]:
			delT, delI = append(delT, k.t), append(delI, k.i)
		}
	}
	n := len(accepted)
	eids, kinds, ts, is := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	seqs, hashes, occs := make([]int64, n), make([][]byte, n), make([]time.Time, n)
	for j, it := range accepted {
		eids[j], kinds[j], ts[j], is[j] = it.env.EventID, string(it.env.Kind), it.env.AggregateType, it.env.AggregateID
		seqs[j], hashes[j], occs[j] = it.seq, it.hash[:], it.env.OccurredAt.Time()
	}
	b = &pgx.Batch{}
	b.Queue(sqlReserve, upT, upI, upLast, delT, delI, int64(n), eids, kinds, ts, is, seqs, hashes, occs, s.cfg.WriterID)
	b.Queue("COMMIT")
	var inserted int64
	err = func() error {
		br := c.SendBatch(ctx, b)
		defer br.Close()
		if err := br.QueryRow().Scan(&first, &inserted, nil); err != nil {
			return err
		}
		if _, err := br.Exec(); err != nil {
			return err
		}
		return br.Close()
	}()
	if err != nil {
		return nil, 0, fmt.Errorf("eventstore: reserve: %w", err)
	}
	if c.PgConn().TxStatus() != 'I' {
		return nil, 0, fmt.Errorf("eventstore: reserve: transaction did not commit")
	}
	if inserted != int64(n) {
		return nil, 0, fmt.Errorf("eventstore: reserve: inserted %d rows of %d", inserted, n)
	}
	for j, it := range accepted {
		it.pos = first + int64(j)
	}
	return accepted, first, nil
}

type slotRow struct{ eventID, state string }

const sqlSupersededSlots = `
SELECT u.ord FROM unnest($1::text[], $2::text[], $3::bigint[]) WITH ORDINALITY AS u(t, i, s, ord)
WHERE EXISTS (SELECT 1 FROM sluice.appends a
              WHERE a.aggregate_type = u.t AND a.aggregate_id = u.i AND a.sequence_number > u.s AND a.state <> '` + StateAbandoned + `')`

// supersededSlots returns the retries of abandoned appends (store-assigned
// sequences) whose old slot was followed by a slot that is not abandoned:
// consumers may have seen the later sequence, so the old one would be
// stale; they take a new sequence. The aggregates' sequence rows are
// locked by the reservation, so no slot is handed out meanwhile.
func (s *Store) supersededSlots(ctx context.Context, c *pgx.Conn, live []*item) (map[*item]bool, error) {
	var cand []*item
	var ts, is []string
	var seqs []int64
	for _, it := range live {
		if it.moved != nil && !it.slot && !s.cfg.allocatorOff() {
			cand = append(cand, it)
			ts, is, seqs = append(ts, it.env.AggregateType), append(is, it.env.AggregateID), append(seqs, it.moved.seq)
		}
	}
	if len(cand) == 0 {
		return nil, nil
	}
	rows, err := c.Query(ctx, sqlSupersededSlots, ts, is, seqs)
	if err != nil {
		return nil, fmt.Errorf("eventstore: reserve: %w", err)
	}
	ords, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("eventstore: reserve: %w", err)
	}
	out := make(map[*item]bool, len(ords))
	for _, o := range ords {
		out[cand[o-1]] = true
	}
	return out, nil
}

// errMovedRace: an abandoned row a retry was to replace changed state
// between the look-up and its removal; the reservation runs again.
var errMovedRace = errors.New("eventstore: reserve: an abandoned row changed meanwhile")

const sqlDropMoved = `
DELETE FROM sluice.appends WHERE event_id = ANY($1::uuid[]) AND state = '` + StateAbandoned + `' RETURNING event_id::text`

// dropMoved removes, inside the reservation transaction, the abandoned rows
// that accepted retries replace with fresh reservations (the event_id is
// unique). It takes their row locks, so a late writer's commit of the same
// rows waits for this transaction and then finds them gone. A row that is
// no longer abandoned fails the reservation with errMovedRace (rolled
// back, run again).
func (s *Store) dropMoved(ctx context.Context, c *pgx.Conn, accepted []*item) error {
	var ids []string
	for _, it := range accepted {
		if it.moved != nil {
			ids = append(ids, it.env.EventID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	rows, err := c.Query(ctx, sqlDropMoved, ids)
	if err != nil {
		return fmt.Errorf("eventstore: reserve: %w", err)
	}
	n, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("eventstore: reserve: %w", err)
	}
	if len(n) != len(ids) {
		return errMovedRace
	}
	for _, it := range accepted {
		if m := it.moved; m != nil {
			s.log.Warn("eventstore: an abandoned append was retried; it gets a fresh position (its old one may be behind the relay)",
				"event_id", m.eventID, "old_position", m.position, "old_sequence", m.seq)
		}
	}
	return nil
}

// settleExisting decides what to do with an item whose event_id is already
// in appends (docs/eventstore.md#append-protocol-group-commit step 2).
func (s *Store) settleExisting(it *item, r indexRow, now time.Time) {
	switch r.state {
	case stateCommitted, stateAbandoned:
		h := it.hashWithTime(envelope.NewTimestamp(r.occurredAt))
		if string(h[:]) != string(r.hash) {
			mm := &IdempotencyMismatchError{EventID: r.eventID, StoredHash: hex.EncodeToString(r.hash), NewHash: hex.EncodeToString(h[:])}
			if s.cfg.mismatchWarn() && r.state == stateCommitted {
				s.log.Error("eventstore: idempotency mismatch: returning the stored event",
					"event_id", r.eventID, "stored_hash", mm.StoredHash, "new_hash", mm.NewHash,
					"aggregate_type", r.aggType, "aggregate_id", r.aggID)
				it.mismatch = mm
				it.stored = &r
				return
			}
			it.res.Err = mm
			return
		}
		if r.state == stateCommitted {
			it.stored = &r
		} else {
			// Never re-committed at its old position, which the relay
			// may have passed (and left its lookback): the append is
			// reserved afresh, and published in order like a new one.
			it.moved = &r
		}
	case stateReserved:
		if r.writer == s.cfg.WriterID || r.stale {
			// Our own reservation whose group is over (the committer never
			// has one event_id in two groups), or a writer silent for longer
			// than the append timeout: settle it, then try again.
			it.resolve = r.key
			it.requeue, it.notBefore = true, now
			return
		}
		s.stats.waited.Add(1)
		it.backoff(now) // a live writer: wait for it
	default:
		it.res.Err = fmt.Errorf("eventstore: event %s has unknown state %q", r.eventID, r.state)
	}
}

// slotAllowed applies the slot rules (docs/eventstore.md#slots-commands-and-domain-events)
// to an item naming its sequence number; a rejected item gets its
// SlotError. Whether another event of its kind holds the slot is read from
// found (the unique index would refuse it anyway); for a domain event into
// its command's slot, the rule it breaks comes from Postgres (ref, from
// sluice.eventstore_slot_refusal, the rules' one definition) and is only
// put into words here.
func (s *Store) slotAllowed(it *item, found map[string]slotRow, ref slotRefusal) bool {
	e := it.env
	serr := &SlotError{AggregateType: e.AggregateType, AggregateID: e.AggregateID, Sequence: e.SequenceNumber, Kind: string(e.Kind)}
	if held, ok := found[it.slotKey]; ok && held.eventID != e.EventID {
		serr.ExistingEventID, serr.Reason = held.eventID, "the slot already holds another "+string(e.Kind)
		if held.state == stateAbandoned {
			serr.Reason += " (abandoned; only a retry of that event_id can take it)"
		}
		it.res.Err = serr
		return false
	}
	if !it.slot {
		return true
	}
	switch ref.rule {
	case "":
		return true
	case "no_command":
		serr.Reason = "the slot holds no command (a domain event without a command must not set sequence_number)"
	case "command_abandoned":
		serr.ExistingEventID, serr.Reason = ref.command, "the slot's command was abandoned"
	case "causation_mismatch":
		serr.ExistingEventID = ref.command
		serr.Reason = "metadata.causation_id " + e.Metadata.CausationID() + " is not the slot's command"
	default:
		serr.ExistingEventID, serr.Reason = ref.command, "slot rule "+ref.rule
	}
	it.res.Err = serr
	return false
}
