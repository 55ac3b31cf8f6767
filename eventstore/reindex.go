package eventstore

import (
	"context"
	"fmt"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/shared/envelope"
)

// ReindexReport summarises a Reindex run.
type ReindexReport struct {
	Segments int
	// Events is the number of appends rows rebuilt (all committed).
	Events int64
	// Duplicates counts lines whose position, event_id or slot was already
	// taken by an earlier segment (a revived event written twice); the
	// first segment in key order wins.
	Duplicates int64
	Aggregates int64
	// NextPosition is log_head after the rebuild (shard 0's).
	NextPosition int64
	// NextPositions are the next free positions of every shard after the
	// rebuild, by shard.
	NextPositions []int64
}

// writerReindex is the writer_id of rows rebuilt by Reindex.
const writerReindex = "reindex"

// Reindex rebuilds the index from the segments alone (docs/eventstore.md;
// `sluice store reindex`): in one transaction that locks the three tables
// (appends are blocked meanwhile), it lists and reads every segment,
// recomputes each line's canonical hash, and replaces sluice.appends with
// one committed row per line (byte ranges from the segment; reserved_at and
// committed_at from the object's modification time; in a store of more
// than one shard each line's shard is ShardOf its aggregate). sequences
// and every shard's log_head row are set from the segments but never
// lowered: a slot or position
// a relay or consumer may already have passed (abandoned) is not handed out
// again. On a wiped schema the result is exactly what the segments say.
// Reserved rows whose segment exists become committed; reservations that
// never reached a segment disappear (they hold no event). Run it with the
// writers stopped: a group between reservation and commit while it runs
// fails its commit and its caller retries. A segment of another number of
// shards than the store's fails it with a *ShardsMismatchError (nothing
// is changed).
func (s *Store) Reindex(ctx context.Context) (ReindexReport, error) {
	return s.ReindexWithProgress(ctx, nil)
}

// ReindexWithProgress is Reindex calling progress (if not nil) after each
// page of segments is read (`sluice store reindex` draws its bar from it).
func (s *Store) ReindexWithProgress(ctx context.Context, progress func(ReindexProgress)) (ReindexReport, error) {
	if s.parts != nil {
		return s.reindexServers(ctx, progress)
	}
	var rep ReindexReport
	if err := s.layoutChecked(); err != nil {
		return rep, err
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return rep, fmt.Errorf("eventstore: reindex: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	for _, q := range []string{
		`LOCK TABLE sluice.log_head, sluice.sequences, sluice.appends, sluice.appends_open IN ACCESS EXCLUSIVE MODE`,
		`CREATE TEMP TABLE reindex_appends (LIKE sluice.appends) ON COMMIT DROP`,
	} {
		if _, err := tx.Exec(ctx, q); err != nil {
			return rep, fmt.Errorf("eventstore: reindex: %w", err)
		}
	}
	cols := []string{"shard", "position", "event_id", "kind", "aggregate_type", "aggregate_id", "sequence_number", "state",
		"segment_key", "byte_offset", "byte_length", "canonical_hash", "occurred_at", "writer_id", "reserved_at", "committed_at"}
	var lines int64
	startAfter := ""
	for {
		page, err := s.bucket.List(ctx, SegmentPrefix, startAfter, 1000)
		if err != nil {
			return rep, fmt.Errorf("eventstore: reindex: list: %w", err)
		}
		if len(page) == 0 {
			break
		}
		startAfter = page[len(page)-1].Key
		var segs []SegmentInfo
		for _, o := range page {
			n, err := parseSegmentName(o.Key)
			if err != nil {
				s.log.Warn("eventstore: reindex: skipping an object that is not a segment", "key", o.Key)
				continue
			}
			if n.shards != s.shards {
				// A segment of another layout: rebuilding this store's
				// index from it would address its events in the wrong shards.
				return rep, fmt.Errorf("eventstore: reindex: %w", &ShardsMismatchError{Stored: n.shards, Configured: s.shards, Where: "segment " + o.Key})
			}
			if !s.holds(n.shard) {
				continue // another server's group wrote it (EVENT_STORE_SHARD_MAP): its lowest shard is that server's
			}
			segs = append(segs, SegmentInfo{Key: o.Key, Shard: n.shard, First: n.first, Last: n.last, Size: o.Size, LastModified: o.LastModified})
		}
		rows, err := s.reindexRows(ctx, segs)
		if err != nil {
			return rep, err
		}
		n, err := tx.CopyFrom(ctx, pgx.Identifier{"reindex_appends"}, cols, pgx.CopyFromRows(rows))
		if err != nil {
			return rep, fmt.Errorf("eventstore: reindex: copy: %w", err)
		}
		lines += n
		rep.Segments += len(segs)
		if progress != nil {
			progress(ReindexProgress{Segments: rep.Segments, Lines: lines})
		}
	}
	tag, err := tx.Exec(ctx, `TRUNCATE sluice.appends, sluice.appends_open`) // every row it inserts is committed
	if err != nil {
		return rep, fmt.Errorf("eventstore: reindex: %w (%s)", err, tag)
	}
	tag, err = tx.Exec(ctx, `INSERT INTO sluice.appends SELECT * FROM reindex_appends ORDER BY shard, position, segment_key ON CONFLICT DO NOTHING`)
	if err != nil {
		return rep, fmt.Errorf("eventstore: reindex: insert: %w", err)
	}
	rep.Events = tag.RowsAffected()
	rep.Duplicates = lines - rep.Events
	tag, err = tx.Exec(ctx, `
INSERT INTO sluice.sequences AS s (aggregate_type, aggregate_id, last_sequence, updated_at)
SELECT aggregate_type, aggregate_id, max(sequence_number), max(committed_at) FROM sluice.appends GROUP BY 1, 2
ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE
SET last_sequence = greatest(s.last_sequence, EXCLUDED.last_sequence),
    updated_at = CASE WHEN EXCLUDED.last_sequence > s.last_sequence THEN EXCLUDED.updated_at ELSE s.updated_at END`)
	if err != nil {
		return rep, fmt.Errorf("eventstore: reindex: sequences: %w", err)
	}
	rep.Aggregates = tag.RowsAffected()
	rows, err := tx.Query(ctx, `
INSERT INTO sluice.log_head AS h (shard, next_position)
SELECT g.s, coalesce((SELECT max(a.position) FROM sluice.appends a WHERE a.shard = g.s), 0) + 1
  FROM unnest($1::int[]) AS g(s)
ON CONFLICT (shard) DO UPDATE SET next_position = greatest(h.next_position, EXCLUDED.next_position)
RETURNING shard, next_position`, s.heldShards())
	if err != nil {
		return rep, fmt.Errorf("eventstore: reindex: log_head: %w", err)
	}
	// RETURNING's order is not the insert's: place each by its shard.
	rep.NextPositions = make([]int64, s.shards)
	var shard int
	var next int64
	if _, err := pgx.ForEachRow(rows, []any{&shard, &next}, func() error {
		if shard < 0 || shard >= s.shards || !s.holds(shard) {
			return fmt.Errorf("head row of shard %d in a store of %d shards (this server: %s)", shard, s.shards, shardRanges(s.heldShards()))
		}
		rep.NextPositions[shard] = next
		return nil
	}); err != nil {
		return rep, fmt.Errorf("eventstore: reindex: log_head: %w", err)
	}
	rep.NextPosition = rep.NextPositions[0]
	// Everything is written: a cancel now (Ctrl-C) must not cut the commit
	// off midway, which would leave it unknown whether the index was
	// replaced. Cancelled before this, the transaction rolls back.
	if err := tx.Commit(context.WithoutCancel(ctx)); err != nil {
		return rep, fmt.Errorf("eventstore: reindex: commit: %w", err)
	}
	return rep, nil
}

// reindexRows reads segments in parallel and returns their appends rows in
// segment order.
func (s *Store) reindexRows(ctx context.Context, segs []SegmentInfo) ([][]any, error) {
	per := make([][][]any, len(segs))
	errs := make([]error, len(segs))
	sem := make(chan struct{}, s.cfg.ReadConcurrency)
	var wg sync.WaitGroup
	for i, sg := range segs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			per[i], errs[i] = s.segmentRows(ctx, sg)
		}()
	}
	wg.Wait()
	var out [][]any
	for i := range segs {
		if errs[i] != nil {
			return nil, errs[i]
		}
		out = append(out, per[i]...)
	}
	return out, nil
}

func (s *Store) segmentRows(ctx context.Context, sg SegmentInfo) ([][]any, error) {
	body, _, err := s.bucket.Get(ctx, sg.Key)
	if err != nil {
		return nil, fmt.Errorf("eventstore: reindex: read %s: %w", sg.Key, err)
	}
	lines, err := parseBlock(segmentName{shards: s.shards, shard: sg.Shard, first: sg.First, last: sg.Last}, sg.Key, body)
	if err != nil {
		return nil, fmt.Errorf("eventstore: reindex: %w", err)
	}
	out := make([][]any, 0, len(lines))
	for _, l := range lines {
		e := l.env
		id, err := uuid.Parse(e.EventID)
		if err != nil {
			return nil, fmt.Errorf("%w: reindex: %s position %d: event_id: %w", ErrCorruptSegment, sg.Key, e.Position, err)
		}
		h, err := envelope.CanonicalHash(e)
		if err != nil {
			return nil, fmt.Errorf("%w: reindex: %s position %d: %w", ErrCorruptSegment, sg.Key, e.Position, err)
		}
		out = append(out, []any{int32(l.shard), e.Position, [16]byte(id), string(e.Kind), e.AggregateType, e.AggregateID, e.SequenceNumber,
			stateCommitted, sg.Key, l.offset, int32(len(l.raw)), h[:], e.OccurredAt.Time(), writerReindex, sg.LastModified, sg.LastModified})
	}
	return out, nil
}
