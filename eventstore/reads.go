package eventstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/shared/envelope"
)

const indexColumns = `position, event_id::text, kind, aggregate_type, aggregate_id, sequence_number, state, segment_key,
       coalesce(byte_offset, -1), coalesce(byte_length, 0), canonical_hash, occurred_at, writer_id, false, shard`

// Replan is the pgx execution mode of the store's queries on its growing
// tables (and the relay's): an unnamed statement with a cached description,
// so Postgres plans every execution for the table as it is. With cached
// prepared statements a plan made while appends was small (a sequential
// scan) stays in use as the table grows until an ANALYZE invalidates it —
// parameterless statements such as Head always reuse their first plan;
// measured 1.5 ms per Head at 10,000 rows instead of 0.05 ms, growing with
// the table. A plan costs 0.1–0.3 ms of Postgres CPU per statement; the
// store's statements each serve a whole group or read.
const Replan = pgx.QueryExecModeCacheDescribe

func (s *Store) queryRows(ctx context.Context, sql string, args ...any) ([]indexRow, error) {
	rows, err := s.pool.Query(ctx, sql, append([]any{Replan}, args...)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []indexRow
	for rows.Next() {
		r, err := scanIndexRow(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// Stream returns the committed events of one aggregate with fromSeq <=
// sequence_number <= toSeq (toSeq 0: no upper bound), ordered by sequence
// number and, within a slot, the command before its domain event
// (docs/eventstore.md#reads). kind "" returns both kinds. Index rows come from Postgres, the
// bytes from ranged GETs of the segments, in parallel. Gaps (rejected or
// abandoned slots) are normal. Page long streams with toSeq.
func (s *Store) Stream(ctx context.Context, aggregateType, aggregateID string, fromSeq, toSeq int64, kind envelope.Kind) ([]Event, error) {
	if s.parts != nil {
		p, err := s.serverOfAggregate(aggregateType, aggregateID)
		if err != nil {
			return nil, err
		}
		evs, err := p.Stream(ctx, aggregateType, aggregateID, fromSeq, toSeq, kind)
		return evs, p.serverErr("", err)
	}
	id, err := envelope.NormalizeAggregateID(aggregateID)
	if err != nil {
		return nil, err
	}
	if kind != "" && !kind.Valid() {
		return nil, &envelope.ValidationError{Code: envelope.CodeInvalid, Field: "kind", Limit: "command|domain", Reason: fmt.Sprintf("must be %q, %q or empty, got %q", envelope.KindCommand, envelope.KindDomain, kind)}
	}
	if toSeq <= 0 {
		toSeq = math.MaxInt64
	}
	rows, err := s.queryRows(ctx, `SELECT `+indexColumns+` FROM sluice.appends
		WHERE aggregate_type = $1 AND aggregate_id = $2 AND sequence_number BETWEEN $3 AND $4
		  AND ($5 = '' OR kind = $5) AND state = '`+StateCommitted+`'
		ORDER BY sequence_number, kind`, aggregateType, id, fromSeq, toSeq, string(kind))
	if err != nil {
		return nil, fmt.Errorf("eventstore: stream %s %q: %w", aggregateType, id, err)
	}
	return s.fetch(ctx, rows)
}

// ByEventID returns the committed event with this event_id, or an error
// wrapping ErrNotFound.
func (s *Store) ByEventID(ctx context.Context, eventID string) (Event, error) {
	if s.parts != nil {
		return s.byEventIDServers(ctx, eventID)
	}
	u, err := uuid.Parse(eventID)
	if err != nil {
		return Event{}, &envelope.ValidationError{Code: envelope.CodeInvalid, Field: "event_id", Limit: envelope.UUIDPattern, Reason: "must be a UUID"}
	}
	return s.one(ctx, "event "+u.String(), `SELECT `+indexColumns+` FROM sluice.appends WHERE event_id = $1::uuid AND state = '`+StateCommitted+`'`, u.String())
}

// Command returns the committed command in slot seq of an aggregate, or an
// error wrapping ErrNotFound.
func (s *Store) Command(ctx context.Context, aggregateType, aggregateID string, seq int64) (Event, error) {
	if s.parts != nil {
		p, err := s.serverOfAggregate(aggregateType, aggregateID)
		if err != nil {
			return Event{}, err
		}
		ev, err := p.Command(ctx, aggregateType, aggregateID, seq)
		return ev, p.serverErr("", err)
	}
	id, err := envelope.NormalizeAggregateID(aggregateID)
	if err != nil {
		return Event{}, err
	}
	return s.one(ctx, fmt.Sprintf("command %d of %s %q", seq, aggregateType, id), `SELECT `+indexColumns+` FROM sluice.appends
		WHERE aggregate_type = $1 AND aggregate_id = $2 AND sequence_number = $3 AND kind = 'command' AND state = '`+StateCommitted+`'`,
		aggregateType, id, seq)
}

func (s *Store) one(ctx context.Context, what, sql string, args ...any) (Event, error) {
	rows, err := s.queryRows(ctx, sql, args...)
	if err != nil {
		return Event{}, fmt.Errorf("eventstore: read %s: %w", what, err)
	}
	if len(rows) == 0 {
		return Event{}, fmt.Errorf("%w: %s", ErrNotFound, what)
	}
	evs, err := s.fetch(ctx, rows)
	if err != nil {
		return Event{}, err
	}
	return evs[0], nil
}

// Head returns the highest committed position: the largest position whose
// appends row is committed (its line is durable in a segment), 0 for an
// empty store. Lower positions may still be reserved (in flight) or
// abandoned; relay lag is Head minus the relay checkpoint.
//
// Head reads the log by one global position: a store of more than one
// shard answers *ShardsNotSupportedError (Heads serves any number;
// ShardLog(i).Head one shard's).
func (s *Store) Head(ctx context.Context) (int64, error) {
	if err := s.readerByPosition("Head (the log's one head)"); err != nil {
		return 0, err
	}
	return s.ShardLog(0).Head(ctx)
}

// ShardLog is the log of one shard of a store: its positions 1, 2, … and
// the readers by position the relay's leader of that shard needs (its
// head, head with the database clock, position at a time, index rows and
// segments). In a store of one shard, ShardLog(0) is the whole log and its
// readers are the Store's readers by global position (Head, HeadWithClock,
// PositionAt, Index, Segments), which call it. Get one with
// Store.ShardLog; a shard outside 0..Shards()-1 answers
// *ShardOutOfRangeError from every reader.
type ShardLog struct {
	s     *Store
	shard int
}

// ShardOutOfRangeError: a ShardLog reader was asked for a shard the store
// does not have.
type ShardOutOfRangeError struct {
	Shard, Shards int
}

func (e *ShardOutOfRangeError) Error() string {
	return fmt.Sprintf("eventstore: shard %d: the store has %d shard(s), 0..%d", e.Shard, e.Shards, e.Shards-1)
}

// ShardLog returns the log of shard i (0 <= i < Shards()), read on the
// Postgres server that holds it (EVENT_STORE_SHARD_MAP).
func (s *Store) ShardLog(i int) ShardLog { return ShardLog{s: s.serverOf(i), shard: i} }

// Shard is the shard this log reads.
func (l ShardLog) Shard() int { return l.shard }

// checked is the precondition of every reader: the store's layout is
// checked (layoutChecked) and the shard exists.
func (l ShardLog) checked() error {
	if err := l.s.layoutChecked(); err != nil {
		return err
	}
	if l.shard < 0 || l.shard >= l.s.shards {
		return &ShardOutOfRangeError{Shard: l.shard, Shards: l.s.shards}
	}
	return nil
}

// Head returns the shard's highest committed position (0 when none):
// Store.Head for one shard.
func (l ShardLog) Head(ctx context.Context) (int64, error) {
	if err := l.checked(); err != nil {
		return 0, err
	}
	var head int64
	err := l.s.pool.QueryRow(ctx, `SELECT coalesce(max(position), 0) FROM sluice.appends WHERE shard = $1 AND state = '`+StateCommitted+`'`, Replan, l.shard).Scan(&head)
	if err != nil {
		return 0, fmt.Errorf("eventstore: head of shard %d: %w", l.shard, err)
	}
	return head, nil
}

// Segments lists up to limit segments holding positions after
// afterPosition, in position order, from the object listing (keys parsed
// into first/last). A segment straddling afterPosition (first <=
// afterPosition < last) is found through the index and listed first. Objects
// under segments/ whose key is not a segment key are skipped with a warning.
//
// A store of more than one shard answers *ShardsNotSupportedError: its
// segments are not in the order of one position (ShardLog(i).Segments
// lists one shard's through the index).
func (s *Store) Segments(ctx context.Context, afterPosition int64, limit int) ([]SegmentInfo, error) {
	if err := s.readerByPosition("Segments (the listing by global position)"); err != nil {
		return nil, err
	}
	return s.ShardLog(0).list(ctx, afterPosition, limit)
}

// Segments returns up to limit segments holding positions of this shard
// after afterPosition, in the order of the shard's positions.
//
// In a store of one shard it is Store.Segments: the object listing after
// afterPosition. In a store of more shards a segment holds the blocks of
// many shards and its key names only its lowest shard's, so the listing
// cannot find a shard's segments in order; they are found through the
// index instead: the shard's committed rows after afterPosition, in
// position order, each naming its segment (a walk of the primary key
// (shard, position) that reads the rows of the segments it returns and
// no others, whatever the size of the store). First and Last are then the
// shard's positions in the segment (First the first after afterPosition),
// Shard is the shard, and Size and LastModified are not known (zero). A
// segment written but not committed (its writer died between the PUT and
// the commit) is not found here until a repair commits its rows
// (Store.Repair; the relay repairs reservations older than the append
// timeout). Offset and Length are where the shard's lines First..Last are
// in the segment (the rows' byte ranges), for ReadSegment.
func (l ShardLog) Segments(ctx context.Context, afterPosition int64, limit int) ([]SegmentInfo, error) {
	if err := l.checked(); err != nil {
		return nil, err
	}
	if l.s.shards <= 1 {
		return l.list(ctx, afterPosition, limit)
	}
	if limit <= 0 {
		limit = 1000
	}
	const page = 2000
	var out []SegmentInfo
	after := max(afterPosition, 0)
	for {
		rows, err := l.s.pool.Query(ctx, `SELECT position, segment_key, byte_offset, byte_length FROM sluice.appends
			WHERE shard = $1 AND position > $2 AND state = '`+StateCommitted+`' ORDER BY position LIMIT $3`, Replan, l.shard, after, page)
		if err != nil {
			return nil, fmt.Errorf("eventstore: segments of shard %d: %w", l.shard, err)
		}
		n := 0
		var pos, off, length int64
		var key string
		_, err = pgx.ForEachRow(rows, []any{&pos, &key, &off, &length}, func() error {
			n++
			after = pos
			if k := len(out); k > 0 && out[k-1].Key == key && out[k-1].Last == pos-1 {
				out[k-1].Last = pos
				out[k-1].addLine(off, length)
				return nil
			}
			out = append(out, SegmentInfo{Key: key, First: pos, Last: pos, Shard: l.shard, Offset: off, Length: length})
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("eventstore: segments of shard %d: %w", l.shard, err)
		}
		// The last segment may continue on the next page: stop once more
		// than limit segments began (the extra one is complete up to where
		// the next began) or the rows ran out.
		if n < page {
			break
		}
		if len(out) > limit {
			break
		}
	}
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// list is the object listing of a store of one shard (Store.Segments).
func (l ShardLog) list(ctx context.Context, afterPosition int64, limit int) ([]SegmentInfo, error) {
	if limit <= 0 {
		limit = 1000
	}
	var out []SegmentInfo
	if afterPosition > 0 {
		var key string
		err := l.s.pool.QueryRow(ctx, `SELECT segment_key FROM sluice.appends WHERE shard = 0 AND position = $1 AND state = '`+StateCommitted+`'`, Replan, afterPosition+1).Scan(&key)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return nil, fmt.Errorf("eventstore: segments: %w", err)
		default:
			if first, last, perr := ParseSegmentKey(key); perr == nil && first <= afterPosition {
				oi, err := l.s.bucket.Stat(ctx, key)
				if err != nil {
					return nil, fmt.Errorf("eventstore: segments: %s: %w", key, err)
				}
				out = append(out, SegmentInfo{Key: key, First: first, Last: last, Size: oi.Size, LastModified: oi.LastModified})
			}
		}
	}
	startAfter := fmt.Sprintf("%s%020d", SegmentPrefix, afterPosition+1)
	if afterPosition <= 0 {
		startAfter = ""
	}
	for len(out) < limit {
		objs, err := l.s.bucket.List(ctx, SegmentPrefix, startAfter, limit-len(out))
		if err != nil {
			return nil, fmt.Errorf("eventstore: segments: list: %w", err)
		}
		for _, o := range objs {
			first, last, err := ParseSegmentKey(o.Key)
			if err != nil {
				l.s.log.Warn("eventstore: skipping an object under segments/ that is not a segment", "key", o.Key)
				continue
			}
			out = append(out, SegmentInfo{Key: o.Key, First: first, Last: last, Size: o.Size, LastModified: o.LastModified})
		}
		if len(objs) == 0 {
			break
		}
		startAfter = objs[len(objs)-1].Key
	}
	return out, nil
}

// ReadSegment reads one whole segment and returns its envelopes with their
// lines byte for byte (the relay publishes Raw as the record value). It
// checks that the lines carry exactly the positions the key names (in a
// store of more than one shard: parseBlock's rules; a key of another
// number of shards is a *ShardsMismatchError).
func (s *Store) ReadSegment(ctx context.Context, key string) ([]Event, error) {
	if err := s.layoutChecked(); err != nil {
		return nil, err
	}
	name, err := s.nameOf(key)
	if err != nil {
		return nil, err
	}
	body, _, err := s.bucket.Get(ctx, key)
	if err != nil {
		if errors.Is(err, objstore.ErrNotFound) {
			return nil, fmt.Errorf("%w: segment %s: %w", ErrNotFound, key, err)
		}
		return nil, fmt.Errorf("eventstore: read segment %s: %w", key, err)
	}
	d := s.lineDecoder()
	lines, err := parseBlockWith(d, name, key, body)
	s.lineDecoders.Put(d)
	if err != nil {
		return nil, err
	}
	out := make([]Event, len(lines))
	for i, l := range lines {
		out[i] = Event{Envelope: l.env, Raw: l.raw, SegmentKey: key, Offset: l.offset, Shard: l.shard}
	}
	return out, nil
}

// IndexEntry is one row of the index (sluice.appends), for operators and
// the relay's gap handling.
type IndexEntry struct {
	// Shard is the row's shard (0 in a store of one shard); Position is
	// its position in that shard.
	Shard          int
	Position       int64
	EventID        string
	Kind           envelope.Kind
	AggregateType  string
	AggregateID    string
	SequenceNumber int64
	// State is reserved, committed or abandoned.
	State      string
	SegmentKey string
	// ByteOffset and ByteLength locate the line (committed rows).
	ByteOffset, ByteLength int64
	WriterID               string
	ReservedAt             time.Time
	CommittedAt            time.Time // zero unless committed
}

// IndexQuery selects index rows by position.
type IndexQuery struct {
	// FromPosition..ToPosition, inclusive; ToPosition 0: no upper bound.
	FromPosition, ToPosition int64
	// UncommittedOnly returns only reserved and abandoned rows (the relay's
	// gap query; found through appends_open).
	UncommittedOnly bool
	// Limit bounds the rows returned (default 1000).
	Limit int
}

const indexEntryColumns = `a.position, a.event_id::text, a.kind, a.aggregate_type, a.aggregate_id, a.sequence_number, a.state,
	a.segment_key, coalesce(a.byte_offset, 0), coalesce(a.byte_length, 0), a.writer_id, a.reserved_at, a.committed_at`

// sqlIndexRows reads a shard's rows in $1..$2; sqlIndexUncommitted only
// those not committed, found through appends_open: no index of appends
// names state (docs/eventstore.md#open-blocks-and-hot-commits).
const (
	sqlIndexRows = `SELECT ` + indexEntryColumns + `
		FROM sluice.appends a WHERE a.shard = $4 AND a.position BETWEEN $1 AND $2 ORDER BY a.position LIMIT $3`
	sqlIndexUncommitted = `SELECT ` + indexEntryColumns + `
		FROM sluice.appends a WHERE a.shard = $4 AND a.state <> '` + StateCommitted + `'
		 AND (a.shard, a.position) IN (SELECT o.shard, p FROM sluice.appends_open o
		                                CROSS JOIN LATERAL generate_series(greatest(o.first, $1), least(o.last, $2)) p
		                               WHERE o.shard = $4 AND o.last >= $1 AND o.first <= $2)
		ORDER BY a.position LIMIT $3`
)

// Index returns index rows in position order. A store of more than one
// shard answers *ShardsNotSupportedError: a position names no row there
// without its shard (ShardLog(i).Index reads one shard's rows).
func (s *Store) Index(ctx context.Context, q IndexQuery) ([]IndexEntry, error) {
	if err := s.readerByPosition("Index (rows by global position)"); err != nil {
		return nil, err
	}
	return s.ShardLog(0).Index(ctx, q)
}

// Index returns the shard's index rows in position order (Store.Index for
// one shard).
func (l ShardLog) Index(ctx context.Context, q IndexQuery) ([]IndexEntry, error) {
	if err := l.checked(); err != nil {
		return nil, err
	}
	if q.ToPosition <= 0 {
		q.ToPosition = math.MaxInt64
	}
	if q.Limit <= 0 {
		q.Limit = 1000
	}
	sql := sqlIndexRows
	if q.UncommittedOnly {
		sql = sqlIndexUncommitted
	}
	rows, err := l.s.pool.Query(ctx, sql, Replan, q.FromPosition, q.ToPosition, q.Limit, l.shard)
	if err != nil {
		return nil, fmt.Errorf("eventstore: index: %w", err)
	}
	defer rows.Close()
	var out []IndexEntry
	for rows.Next() {
		var e IndexEntry
		var kind string
		var committed *time.Time
		if err := rows.Scan(&e.Position, &e.EventID, &kind, &e.AggregateType, &e.AggregateID, &e.SequenceNumber, &e.State,
			&e.SegmentKey, &e.ByteOffset, &e.ByteLength, &e.WriterID, &e.ReservedAt, &committed); err != nil {
			return nil, fmt.Errorf("eventstore: index: %w", err)
		}
		e.Kind = envelope.Kind(kind)
		e.Shard = l.shard
		if committed != nil {
			e.CommittedAt = *committed
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("eventstore: index: %w", err)
	}
	return out, nil
}
