package eventstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/eventstore/objstore"
)

// ReadSegment returns the events of this shard in seg, a segment as
// Segments returns it, with their lines byte for byte (the relay publishes
// Raw as the record value), in position order.
//
// Which read (docs/scale-out.md#relay-throughput-per-shard-count):
//
//   - A store of more than one shard, with the shard's byte range known
//     (seg.Length > 0: Segments, or the caller's index rows): one ranged
//     GET of bytes [Offset, Offset+Length), the shard's lines First..Last
//     and nothing else. A segment holds the lines of the k shards of its
//     group commit, each shard's contiguous (parseBlock), and each of those
//     shards' leaders reads it: whole, the k leaders together transfer and
//     decode every line k times (measured on 2026-11-27, 50,000 events in
//     segments of 500 with k = N: 103–149k events/s at N = 1, 85–98k at 2,
//     49–62k at 4), while ranged they transfer and decode each line once
//     and still send k requests, as before. A ranged GET is one request like
//     a whole GET (the same server work per request, about 0.3 ms on this
//     machine's MinIO, fetch.go) and never carries more bytes, so there is
//     no share of the segment above which the whole GET costs less: when
//     the shard's lines are the whole segment (a group of one shard) the
//     range is the object and both cost the same. The ranged read is
//     therefore taken whenever the range is known.
//   - A store of one shard: the whole segment (Store.ReadSegment), which
//     is this shard's lines already. The object listing, its plan, gives
//     no byte ranges, and the whole read checks every line against the
//     positions the key names. Its events may begin before seg.First (a
//     checkpoint inside a segment); the caller skips what it has.
//   - No range known (Length 0) in a store of more shards: the whole
//     segment, keeping the shard's events (the lines of the other shards
//     are their leaders').
//
// What is read is checked either way: the ranged read holds exactly the
// bytes asked for (objstore.ErrInvalidRange otherwise), every line decodes,
// is of this shard and carries the positions First..Last in order, and
// lines of the shard the key names lie in the key's block; anything else is
// ErrCorruptSegment. A missing segment wraps ErrNotFound.
func (l ShardLog) ReadSegment(ctx context.Context, seg SegmentInfo) ([]Event, error) {
	if err := l.checked(); err != nil {
		return nil, err
	}
	if l.s.shards <= 1 {
		return l.s.ReadSegment(ctx, seg.Key)
	}
	if seg.Length <= 0 {
		evs, err := l.s.ReadSegment(ctx, seg.Key)
		if err != nil {
			return nil, err
		}
		mine := evs[:0:0]
		for _, ev := range evs {
			if ev.Shard == l.shard {
				mine = append(mine, ev)
			}
		}
		return mine, nil
	}
	return l.readLines(ctx, seg)
}

// readLines is ReadSegment's ranged read of the shard's lines First..Last
// at [Offset, Offset+Length) of the segment.
func (l ShardLog) readLines(ctx context.Context, seg SegmentInfo) ([]Event, error) {
	name, err := l.s.nameOf(seg.Key)
	if err != nil {
		return nil, err
	}
	if seg.First < 1 || seg.Last < seg.First || seg.Offset < 0 {
		return nil, fmt.Errorf("eventstore: read shard %d of %s: positions %d..%d at byte %d: not a range of lines", l.shard, seg.Key, seg.First, seg.Last, seg.Offset)
	}
	body, err := l.s.bucket.GetRange(ctx, seg.Key, seg.Offset, seg.Length)
	if err != nil {
		if errors.Is(err, objstore.ErrNotFound) {
			return nil, fmt.Errorf("%w: segment %s: %w", ErrNotFound, seg.Key, err)
		}
		if errors.Is(err, objstore.ErrInvalidRange) {
			return nil, fmt.Errorf("%w: %s: shard %d positions %d..%d at [%d+%d]: %w", ErrCorruptSegment, seg.Key, l.shard, seg.First, seg.Last, seg.Offset, seg.Length, err)
		}
		return nil, fmt.Errorf("eventstore: read shard %d of segment %s: %w", l.shard, seg.Key, err)
	}
	d := l.s.lineDecoder()
	lines, err := parseShardLines(d, name, seg, l.shard, body)
	l.s.lineDecoders.Put(d)
	if err != nil {
		return nil, err
	}
	out := make([]Event, len(lines))
	for i, ln := range lines {
		out[i] = Event{Envelope: ln.env, Raw: ln.raw, SegmentKey: seg.Key, Offset: ln.offset, Shard: l.shard}
	}
	return out, nil
}

// parseShardLines checks the bytes of a ranged read (readLines) and splits
// them into lines: exactly seg.Length bytes, every line of shard, the
// positions exactly seg.First..seg.Last, and, for the shard the key names,
// inside the key's block. Offsets are the segment's.
func parseShardLines(d *lineDecoder, n segmentName, seg SegmentInfo, shard int, body []byte) ([]segmentLine, error) {
	if int64(len(body)) != seg.Length {
		return nil, fmt.Errorf("%w: %s: read %d bytes at %d, want %d", ErrCorruptSegment, seg.Key, len(body), seg.Offset, seg.Length)
	}
	lines, err := parseSegment(d, seg.Key, body, 0, 0)
	if err != nil {
		return nil, fmt.Errorf("%w (the lines of shard %d at byte %d)", err, shard, seg.Offset)
	}
	if int64(len(lines)) != seg.Last-seg.First+1 {
		return nil, fmt.Errorf("%w: %s: %d lines at [%d+%d], the index names shard %d positions %d..%d",
			ErrCorruptSegment, seg.Key, len(lines), seg.Offset, seg.Length, shard, seg.First, seg.Last)
	}
	for i := range lines {
		ln := &lines[i]
		ln.offset += seg.Offset
		ln.shard = ShardOf(ln.env.AggregateType, ln.env.AggregateID, n.shards)
		want := seg.First + int64(i)
		if ln.shard != shard || ln.env.Position != want {
			return nil, fmt.Errorf("%w: %s at byte %d holds shard %d position %d, the index says shard %d position %d",
				ErrCorruptSegment, seg.Key, ln.offset, ln.shard, ln.env.Position, shard, want)
		}
	}
	if shard == n.shard && (seg.First < n.first || seg.Last > n.last) {
		return nil, fmt.Errorf("%w: %s names shard %d positions %d..%d, the index says %d..%d are in it",
			ErrCorruptSegment, seg.Key, n.shard, n.first, n.last, seg.First, seg.Last)
	}
	return lines, nil
}

// Add widens s to hold a committed index row of its shard: the row's
// position and its line's byte range. A zero s becomes the row's segment.
// The relay builds the ranged reads of its plans with it from the rows it
// read (rows of one segment and shard: their lines are contiguous).
func (s *SegmentInfo) Add(row IndexEntry) {
	if s.Key == "" {
		*s = SegmentInfo{Key: row.SegmentKey, First: row.Position, Last: row.Position, Shard: row.Shard, Offset: row.ByteOffset, Length: row.ByteLength}
		return
	}
	s.First, s.Last = min(s.First, row.Position), max(s.Last, row.Position)
	s.addLine(row.ByteOffset, row.ByteLength)
}

// addLine widens the byte range of s to hold a line at [off, off+length).
func (s *SegmentInfo) addLine(off, length int64) {
	end := max(s.Offset+s.Length, off+length)
	s.Offset = min(s.Offset, off)
	s.Length = end - s.Offset
}
