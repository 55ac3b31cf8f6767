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

// A reservation (docs/eventstore.md#append-protocol-group-commit step 1)
// is three steps: the facts the rules need (read by lookup, or assumed by
// assume and then verified by the write), decide (decide.go: the rules,
// pure) and write (reserve_write.go: sequences, positions and appends rows
// in one transaction). reserve runs them, and again when the write finds
// an assumed fact false or Postgres refuses it.

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
	shard      int
}

func scanIndexRow(rows pgx.Rows) (indexRow, error) {
	var r indexRow
	err := rows.Scan(&r.position, &r.eventID, &r.kind, &r.aggType, &r.aggID, &r.seq, &r.state, &r.key,
		&r.offset, &r.length, &r.hash, &r.occurredAt, &r.writer, &r.stale, &r.shard)
	return r, err
}

// factSource says where an attempt's facts come from.
type factSource struct {
	read bool             // read by lookup, under the aggregates' row locks
	seen map[aggKey]int64 // last sequences a refused attempt saw, assumed instead of the expected ones
}

// maxReserveAttempts bounds the attempts of one reservation.
const maxReserveAttempts = 9

// reserve reserves a group: it returns the accepted items (seq and pos
// set, in the order of their lines: by shard, then position) and the
// blocks of positions taken, one per shard, ascending. Items it
// settles otherwise carry res, stored, resolve or requeue. The first
// attempt assumes the facts when the group allows it (one round trip);
// an assumption found false, a unique violation (a concurrent writer took
// an event_id, a slot or a new aggregate's row), a deadlock or a
// serialization failure rolls back whatever was begun, and the next
// attempt reads the facts (or assumes the last sequences the write saw).
func (s *Store) reserve(ctx context.Context, items []*item) (accepted []*item, blocks []shardBlock, err error) {
	c, release, err := s.txConn(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("eventstore: reserve: %w", err)
	}
	defer release()
	src := factSource{read: !assumable(items, s.cfg)}
	for attempt := 1; ; attempt++ {
		for _, it := range items {
			it.resetOutcome()
		}
		accepted, blocks, err = s.reserveOnce(ctx, c, items, src)
		var refused *assumptionError
		var pgErr *pgconn.PgError
		switch {
		case err == nil || attempt >= maxReserveAttempts:
			return accepted, blocks, err
		case errors.As(err, &refused):
			// Assume what the write saw, once, when only last sequences
			// were wrong (a stale expected_seq); read the facts otherwise.
			src = factSource{read: refused.seen == nil || src.seen != nil, seen: refused.seen}
		case errors.Is(err, errNeedFacts) && !src.read,
			errors.As(err, &pgErr) && (pgErr.Code == "23505" || pgErr.Code == "40P01" || pgErr.Code == "40001"):
			src = factSource{read: true}
		default:
			return accepted, blocks, err
		}
	}
}

// reserveOnce is one attempt of reserve, on c.
func (s *Store) reserveOnce(ctx context.Context, c *pgx.Conn, items []*item, src factSource) ([]*item, []shardBlock, error) {
	if c.PgConn().TxStatus() != 'I' {
		// An earlier attempt's error skipped the rest of its batch, its
		// COMMIT included. (Its own round trip: Postgres refuses even to
		// prepare a statement in a failed transaction.)
		if _, err := c.Exec(ctx, "ROLLBACK"); err != nil {
			return nil, nil, fmt.Errorf("eventstore: reserve: %w", err)
		}
	}
	f := assume(items, src.seen)
	if src.read {
		s.stats.lookups.Add(1)
		var err error
		if f, err = s.lookup(ctx, c, items); err != nil {
			return nil, nil, fmt.Errorf("eventstore: reserve: lookup: %w", err)
		}
	}
	d, err := decide(items, f, s.rules())
	if err != nil {
		return nil, nil, err
	}
	if !src.read && !d.settledByAssumption() {
		return nil, nil, &assumptionError{why: "the assumed facts refuse an envelope for another reason than a stale expected_seq"}
	}
	if s.shards > 1 {
		// Lines by shard, each shard's in arrival order: one contiguous
		// block per shard (docs/eventstore.md#shards).
		slices.SortStableFunc(d.order, func(a, b int) int { return items[a].shard - items[b].shard })
	}
	accepted := s.apply(items, d, time.Now())
	if len(accepted) == 0 {
		// Nothing to write. Read facts: release rolls back. Facts a
		// refused write saw (src.seen): every envelope is a stale
		// expected_seq, not stored, as that write saw.
		s.report(items, nil)
		return nil, nil, nil
	}
	w := newWrite(items, d, s.cfg.WriterID, s.shards)
	if !src.read {
		w.checks = assumedChecks(items, f, d)
	}
	blocks, seqs, err := s.write(ctx, c, w)
	if err != nil {
		return nil, nil, err
	}
	at := make(map[int]int64, len(blocks))
	for _, b := range blocks {
		at[b.shard] = b.first
	}
	for j, it := range accepted {
		it.seq, it.pos = seqs[j], at[it.shard]+w.rank(j)-1
	}
	s.report(items, accepted)
	return accepted, blocks, nil
}

func (s *Store) rules() rules {
	return rules{allocatorOff: s.cfg.allocatorOff(), mismatchWarn: s.cfg.mismatchWarn(), writerID: s.cfg.WriterID}
}

// settledByAssumption: decided on assumed facts, every envelope is
// accepted or refused by optimistic concurrency (whose facts the write
// verifies). Anything else is decided on read facts.
func (d decision) settledByAssumption() bool {
	for _, v := range d.verdicts {
		var ce *ConflictError
		if !v.accepted && !errors.As(v.err, &ce) {
			return false
		}
	}
	return true
}

// apply hands the decision's verdicts to the items and returns the
// accepted ones in position order.
func (s *Store) apply(items []*item, d decision, now time.Time) []*item {
	var waits map[*unit]time.Time // atomic batches that wait: the latest member's time
	for n, it := range items {
		v := d.verdicts[n]
		it.res.Err, it.stored, it.mismatch, it.moved, it.resolve = v.err, v.stored, v.mismatch, v.moved, v.resolve
		switch {
		case v.resolve != "":
			it.requeue, it.notBefore = true, now
		case v.wait == waitWriter:
			s.stats.waited.Add(1)
			it.backoff(now) // a live writer: wait for it
		case v.wait == waitBatch:
			it.requeue = true
		}
		if v.wait != waitNone && it.unit != nil {
			if waits == nil {
				waits = map[*unit]time.Time{}
			}
			if nb := waits[it.unit]; it.notBefore.After(nb) || nb.IsZero() {
				waits[it.unit] = it.notBefore
			}
		}
	}
	for _, it := range items {
		if nb, ok := waits[it.unit]; ok && it.unit != nil {
			it.notBefore = nb
		}
	}
	accepted := make([]*item, len(d.order))
	for j, n := range d.order {
		accepted[j] = items[n]
		accepted[j].seq = d.verdicts[n].seq // relative ones are replaced by the write's numbers
	}
	return accepted
}

// report logs what a reservation settled: idempotency mismatches answered
// with the stored event (warn mode), and retries of abandoned appends.
func (s *Store) report(items, accepted []*item) {
	for _, it := range items {
		if mm := it.mismatch; mm != nil && it.stored != nil {
			s.log.Error("eventstore: idempotency mismatch: returning the stored event",
				"event_id", mm.EventID, "stored_hash", mm.StoredHash, "new_hash", mm.NewHash,
				"aggregate_type", it.stored.aggType, "aggregate_id", it.stored.aggID)
		}
	}
	for _, it := range accepted {
		if m := it.moved; m != nil {
			s.log.Warn("eventstore: an abandoned append was retried; it gets a fresh position (its old one may be behind the relay)",
				"event_id", m.eventID, "old_position", m.position, "old_sequence", m.seq)
		}
	}
}

// assumable reports whether a group may be reserved on assumed facts: the
// postgres allocator, no atomic batch, and every causation_id of a domain
// event into its command's slot a canonical UUID (anything else never
// names a command, and Postgres text could not even carry a NUL byte).
func assumable(items []*item, cfg Config) bool {
	if cfg.allocatorOff() {
		return false
	}
	for _, it := range items {
		if it.unit != nil || it.slotKey != "" && !it.slot {
			return false
		}
		if c := it.env.Metadata.CausationID(); it.slot && c != "" && !envelope.IsCanonicalUUID(c) {
			return false
		}
	}
	return true
}

// assume returns the facts of the common group, which the write verifies
// (assumedChecks) or the unique indexes enforce: no event_id of the group
// is stored; no other event holds a slot it names; the slot of each domain
// event into its command's slot holds that command, committed, with the
// causation_id as its event_id when one is set; and the last sequence of
// an aggregate with expected_seq envelopes is the one its first such
// envelope expects (after the envelopes before it), or the one seen by a
// refused write. The last sequences of the other aggregates stay unknown:
// their envelopes take the next sequences, whatever they are.
func assume(items []*item, seen map[aggKey]int64) facts {
	f := facts{slots: map[string]slotRow{}, last: map[aggKey]lastSeq{}}
	before := map[aggKey]int64{} // envelopes of the aggregate before this one
	for _, it := range items {
		e := it.env
		if it.slot {
			f.slots[slotKeyOf(e.AggregateType, e.AggregateID, e.SequenceNumber, envelope.KindCommand)] =
				slotRow{eventID: e.Metadata.CausationID(), state: stateCommitted}
			continue
		}
		k := aggKey{e.AggregateType, e.AggregateID}
		if _, ok := f.last[k]; !ok && e.ExpectedSeq != nil {
			last := max(*e.ExpectedSeq-before[k], 0)
			if v, ok := seen[k]; ok {
				last = v
			}
			f.last[k] = lastSeq{seq: last, exists: last > 0}
		}
		before[k]++
	}
	return f
}

// assumptionError: the write found an assumed fact false and wrote
// nothing.
type assumptionError struct {
	why string
	// seen: the last sequences the write saw (of the aggregates with
	// expected_seq envelopes), when they were the only false facts.
	seen map[aggKey]int64
}

func (e *assumptionError) Error() string {
	return "eventstore: reserve: an assumed fact is false: " + e.why
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
