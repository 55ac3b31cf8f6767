package eventstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicehq/sluice/shared/envelope"
)

// sqlFlush makes everything this connection committed before durable: a
// transaction with a WAL record and an xid, committed with the session's
// synchronous_commit, flushes the WAL through its own commit record (see
// migrations/00013_eventstore.sql).
const sqlFlush = `
INSERT INTO sluice.eventstore_flush AS f (backend_pid, flushes) VALUES (pg_backend_pid(), 1)
ON CONFLICT (backend_pid) DO UPDATE SET flushes = f.flushes + 1`

// sqlNotifyReserved sends the reservation's NOTIFY ("reserved FIRST LAST",
// left by eventstore_reserve in the session variable) after its commit, in
// a transaction without WAL of its own.
const sqlNotifyReserved = `
SELECT pg_notify('` + NotifyChannel + `', p) FROM (SELECT current_setting('sluice.reserved_notify', true) AS p) AS x WHERE p <> ''`

// sqlReserveFast calls the one-round-trip reservation
// (sluice.eventstore_reserve, migrations/00013_eventstore.sql): the whole reservation transaction of a
// group as one statement, domain events into their commands' slots
// included.
const sqlReserveFast = `
SELECT first_pos, seqs, actuals FROM sluice.eventstore_reserve($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`

// eventIDKey and slotUniqueKey are the unique constraints on appends.event_id and
// on (aggregate, sequence_number, kind).
const (
	eventIDKey    = "appends_event_id_key"
	slotUniqueKey = "appends_slot_key"
)

// fastEligible reports whether a group can take the one-round-trip
// reservation: the postgres allocator (so the only envelopes naming their
// sequence number are domain events into their commands' slots, whose
// rules eventstore_reserve checks).
func (s *Store) fastEligible(items []*item) bool {
	if s.cfg.allocatorOff() || s.noFastReserve.Load() {
		return false
	}
	for _, it := range items {
		if it.unit != nil {
			return false // atomic batches: the general path's unit rules
		}
		if it.slotKey != "" && !it.slot {
			return false
		}
		// A causation_id that is no canonical UUID never names a command's
		// event_id: the general path rejects it (*SlotError) without
		// sending it to Postgres, whose text cannot hold every string (NUL).
		if c := it.env.Metadata.CausationID(); it.slot && c != "" && !envelope.IsCanonicalUUID(c) {
			return false
		}
	}
	return true
}

// reserveFast runs a group's reservation in one round trip (docs/eventstore.md#append-protocol-group-commit
// steps 2–3 for the common case; see migrations/00013_eventstore.sql).
// ok is false when the general path must decide instead: an event_id of the
// group is already in appends (idempotency, revival, a live writer: the
// function fails on the unique index and nothing of it remains), a slot
// envelope breaks a slot rule (the general path names it), or the function
// is missing (the schema is not migrated). Its outcome is the
// general path's: accepted items in arrival order with their sequences and
// consecutive positions from first, *ConflictError for the rest.
func (s *Store) reserveFast(ctx context.Context, items []*item) (accepted []*item, first int64, ok bool, err error) {
	idx := make(map[aggKey]int32, len(items))
	keys := make([]aggKey, 0, len(items))
	for _, it := range items {
		k := aggKey{it.env.AggregateType, it.env.AggregateID}
		if _, seen := idx[k]; !seen {
			idx[k] = 0
			keys = append(keys, k)
		}
	}
	// sorted, so concurrent reservations lock sequences rows in one order
	slices.SortFunc(keys, compareAggKeys)
	ts, is := make([]string, len(keys)), make([]string, len(keys))
	for n, k := range keys {
		ts[n], is[n] = k.t, k.i
		idx[k] = int32(n + 1)
	}
	n := len(items)
	eids, kinds := make([]string, n), make([]string, n)
	aggs, hasExp, exps := make([]int32, n), make([]bool, n), make([]int64, n)
	hashes, occs := make([][]byte, n), make([]time.Time, n)
	slots, slotSeqs, causes := make([]bool, n), make([]int64, n), make([]string, n)
	for j, it := range items {
		if it.slot {
			slots[j], slotSeqs[j], causes[j] = true, it.env.SequenceNumber, it.env.Metadata.CausationID()
		}
		eids[j], kinds[j] = it.env.EventID, string(it.env.Kind)
		aggs[j] = idx[aggKey{it.env.AggregateType, it.env.AggregateID}]
		if it.env.ExpectedSeq != nil {
			hasExp[j], exps[j] = true, *it.env.ExpectedSeq
		}
		hashes[j], occs[j] = it.hash[:], it.env.OccurredAt.Time()
	}
	var firstPos *int64
	var seqs, actuals []int64
	if err := s.reserveFastRoundTrip(ctx, []any{ts, is, eids, kinds, aggs, hasExp, exps, hashes, occs, s.cfg.WriterID, slots, slotSeqs, causes},
		&firstPos, &seqs, &actuals); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && (pgErr.Code == "42883" || pgErr.Code == "42P01") { // undefined function or table
			s.noFastReserve.Store(true)
			s.log.Warn("eventstore: function sluice.eventstore_reserve missing (run sluice migrate up); reservations take two round trips", "error", err)
			return nil, 0, false, nil
		}
		if errors.As(err, &pgErr) && pgErr.Code == "23505" && (pgErr.ConstraintName == eventIDKey || pgErr.ConstraintName == slotUniqueKey) {
			return nil, 0, false, nil // an event id or a slot is taken already (or being taken)
		}
		return nil, 0, false, fmt.Errorf("eventstore: reserve: %w", err)
	}
	if firstPos == nil {
		return nil, 0, false, nil
	}
	if len(seqs) != n || len(actuals) != n {
		return nil, 0, false, fmt.Errorf("eventstore: reserve: %d sequences for %d envelopes", len(seqs), n)
	}
	first = *firstPos
	accepted = make([]*item, 0, n)
	for j, it := range items {
		if seqs[j] == 0 {
			if it.env.ExpectedSeq == nil {
				return nil, 0, false, fmt.Errorf("eventstore: reserve: envelope %d without expected_seq was not reserved", j)
			}
			it.res.Err = &ConflictError{AggregateType: it.env.AggregateType, AggregateID: it.env.AggregateID,
				ExpectedSeq: *it.env.ExpectedSeq, ActualSeq: actuals[j]}
			continue
		}
		it.seq, it.pos = seqs[j], first+int64(len(accepted))
		accepted = append(accepted, it)
	}
	if len(accepted) > 0 && first < 1 {
		return nil, 0, false, fmt.Errorf("eventstore: reserve: %d envelopes accepted without a position block", len(accepted))
	}
	if len(accepted) == 0 {
		return nil, 0, true, nil
	}
	return accepted, first, true, nil
}

// reserveFastRoundTrip sends the reservation in one pipelined round trip:
// BEGIN; synchronous_commit off for this transaction; the reservation;
// COMMIT — which releases the locks on log_head and sequences without
// waiting for the WAL flush, so the next group's reservation proceeds —;
// the reservation's NOTIFY in a transaction of its own (it writes no WAL, so
// it waits for no flush while holding the notification lock); and then
// sqlFlush, whose synchronous commit returns only once the WAL holding the
// reservation is durable. When this returns without error the
// reservation is exactly as durable as a synchronous commit would have made
// it; the segment is written only after that.
func (s *Store) reserveFastRoundTrip(ctx context.Context, args []any, firstPos **int64, seqs, actuals *[]int64) error {
	c, release, err := s.txConn(ctx)
	if err != nil {
		return err
	}
	defer release()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue("SET LOCAL synchronous_commit = off")
	b.Queue(sqlReserveFast, args...)
	b.Queue("COMMIT")
	b.Queue("BEGIN")
	b.Queue(sqlNotifyReserved)
	b.Queue("COMMIT")
	b.Queue(sqlFlush)
	br := c.SendBatch(ctx, b)
	defer br.Close()
	for range 2 {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	if err := br.QueryRow().Scan(firstPos, seqs, actuals); err != nil {
		return err
	}
	for range 5 {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	if err := br.Close(); err != nil {
		return err
	}
	if c.PgConn().TxStatus() != 'I' {
		return fmt.Errorf("reservation did not commit")
	}
	return nil
}
