package eventstore

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/eventstore/objstore/filestore"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/shared/envelope"
)

// ShardLog.ReadSegment reads a shard's own lines of a segment of several
// shards with one ranged GET of exactly their bytes, on both backends
// (MinIO and the file backend): the events equal the shard's events of the
// whole segment, byte for byte and at the same offsets; the shards' reads
// of one segment together carry no more bytes than the segment (whole
// reads carried it once per shard). A store of one shard, and a segment
// without a byte range, keep the whole read. What a ranged read returns is
// checked: another shard's lines, positions the lines do not carry, a
// range cut inside a line or past the end are ErrCorruptSegment, a missing
// segment ErrNotFound.
func TestShardLogReadsOwnLines(t *testing.T) {
	const shards = 4
	for _, backend := range []string{"s3", "file"} {
		t.Run(backend, func(t *testing.T) {
			e := newEnv(t)
			if backend == "file" {
				fb, err := filestore.New(t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = fb.Close() })
				e.url, e.pool = testenv.NewMigratedDatabase(t)
				e.bucket = &countingBucket{Bucket: fb}
			}
			s := e.store(t, shardedConfig(shards))
			ctx := ctxT(t)
			ids := idsByShard("Order", "own-"+backend, shards, 3)
			var envs []envelope.Envelope
			for sh := range shards {
				for _, id := range ids[sh] {
					envs = append(envs, command("Order", id, sh))
				}
			}
			key := mustAppend(t, s, envs...)[0].Event.SegmentKey
			mustAppend(t, s, command("Order", ids[2][0], "alone"))
			whole, err := s.ReadSegment(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			oi, err := e.bucket.Stat(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			var rangeBytes int64
			for sh := range shards {
				l := s.ShardLog(sh)
				segs, err := l.Segments(ctx, 0, 10)
				if err != nil || len(segs) == 0 || segs[0].Key != key || segs[0].Length <= 0 {
					t.Fatalf("shard %d: Segments = %+v, %v; want %s first, with a byte range", sh, segs, err, key)
				}
				gets, ranges := e.bucket.gets.Load(), e.bucket.ranges.Load()
				got, err := l.ReadSegment(ctx, segs[0])
				if err != nil {
					t.Fatal(err)
				}
				if g, r := e.bucket.gets.Load()-gets, e.bucket.ranges.Load()-ranges; g != 0 || r != 1 {
					t.Fatalf("shard %d: %d whole GETs and %d ranged ones; want one ranged GET", sh, g, r)
				}
				rangeBytes += segs[0].Length
				want := slices.DeleteFunc(slices.Clone(whole), func(ev Event) bool { return ev.Shard != sh })
				if fmt.Sprint(eventsOf(got)) != fmt.Sprint(eventsOf(want)) || len(want) != 3 {
					t.Fatalf("shard %d: ranged read %v, want the whole read's %v", sh, eventsOf(got), eventsOf(want))
				}
			}
			if rangeBytes > oi.Size {
				t.Fatalf("the shards' ranged reads carried %d bytes of a %d-byte segment", rangeBytes, oi.Size)
			}

			seg1, err := s.ShardLog(1).Segments(ctx, 0, 1)
			if err != nil {
				t.Fatal(err)
			}
			sg := seg1[0]
			for _, c := range []struct {
				name  string
				shard int
				seg   func(SegmentInfo) SegmentInfo
				want  error
			}{
				{"another shard's lines", 2, func(s SegmentInfo) SegmentInfo { return s }, ErrCorruptSegment},
				{"positions the lines do not carry", 1, func(s SegmentInfo) SegmentInfo { s.First, s.Last = s.First+1, s.Last+1; return s }, ErrCorruptSegment},
				{"one line fewer than named", 1, func(s SegmentInfo) SegmentInfo { s.Last--; return s }, ErrCorruptSegment},
				{"cut inside a line", 1, func(s SegmentInfo) SegmentInfo { s.Length--; return s }, ErrCorruptSegment},
				{"begun inside a line", 1, func(s SegmentInfo) SegmentInfo { s.Offset++; s.Length--; return s }, ErrCorruptSegment},
				{"past the end", 1, func(s SegmentInfo) SegmentInfo { s.Length = oi.Size; return s }, ErrCorruptSegment},
				{"a missing segment", 1, func(s SegmentInfo) SegmentInfo {
					s.Key = segmentName{shards: shards, shard: 1, first: 900, last: 900}.key()
					return s
				}, ErrNotFound},
			} {
				t.Run(c.name, func(t *testing.T) {
					_, err := s.ShardLog(c.shard).ReadSegment(ctx, c.seg(sg))
					if !errors.Is(err, c.want) {
						t.Fatalf("error %v, want %v", err, c.want)
					}
				})
			}
			t.Run("past the end is the backend's invalid range", func(t *testing.T) {
				bad := sg
				bad.Length = oi.Size
				_, err := s.ShardLog(1).ReadSegment(ctx, bad)
				if !errors.Is(err, objstore.ErrInvalidRange) {
					t.Fatalf("error %v, want objstore.ErrInvalidRange too", err)
				}
			})
			t.Run("no byte range: the whole segment, the shard's events", func(t *testing.T) {
				gets, ranges := e.bucket.gets.Load(), e.bucket.ranges.Load()
				got, err := s.ShardLog(1).ReadSegment(ctx, SegmentInfo{Key: key})
				if err != nil {
					t.Fatal(err)
				}
				if g, r := e.bucket.gets.Load()-gets, e.bucket.ranges.Load()-ranges; g != 1 || r != 0 {
					t.Fatalf("%d whole GETs and %d ranged ones; want one whole GET", g, r)
				}
				want, _ := s.ShardLog(1).ReadSegment(ctx, sg)
				if fmt.Sprint(eventsOf(got)) != fmt.Sprint(eventsOf(want)) {
					t.Fatalf("whole read %v, want %v", eventsOf(got), eventsOf(want))
				}
			})
		})
	}
	t.Run("one shard: the whole segment", func(t *testing.T) {
		e := newEnv(t)
		s := e.store(t, testConfig())
		ctx := ctxT(t)
		rs := mustAppend(t, s, command("Order", "one-a", 1), command("Order", "one-b", 2), command("Order", "one-c", 3))
		segs, err := s.ShardLog(0).Segments(ctx, 0, 10)
		if err != nil || len(segs) != 1 {
			t.Fatalf("Segments = %+v, %v", segs, err)
		}
		seg := segs[0]
		seg.Offset, seg.Length = rs[1].Event.Offset, int64(len(rs[1].Event.Raw)) // a range, ignored
		gets, ranges := e.bucket.gets.Load(), e.bucket.ranges.Load()
		got, err := s.ShardLog(0).ReadSegment(ctx, seg)
		if err != nil || len(got) != 3 {
			t.Fatalf("read %d events, %v", len(got), err)
		}
		if g, r := e.bucket.gets.Load()-gets, e.bucket.ranges.Load()-ranges; g != 1 || r != 0 {
			t.Fatalf("%d whole GETs and %d ranged ones; want one whole GET", g, r)
		}
	})
}

// eventsOf describes events by what a reader relies on: position, shard,
// offset, event id and the line.
func eventsOf(evs []Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = fmt.Sprintf("%d/%d@%d %s %s %s", ev.Shard, ev.Envelope.Position, ev.Offset, ev.Envelope.EventID, ev.SegmentKey, ev.Raw)
	}
	return out
}
