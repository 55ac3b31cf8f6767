package eventstore

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/shared/envelope"
)

// The readers of one shard (ShardLog) serve a store of four shards: each
// shard's head, head with clock, index rows and segments are that shard's
// and only its; the segments of a shard come from the index (no LIST), in
// the order of its positions, each holding exactly the positions it is
// listed with; paging by the last position returned walks the same
// segments; a shard the store does not have is refused. In a store of one
// shard, ShardLog(0) is the Store's readers by global position.
func TestShardLogReaders(t *testing.T) {
	const shards = 4
	e := newEnv(t)
	s := e.store(t, shardedConfig(shards))
	ctx := ctxT(t)
	before := time.Now().Add(-time.Hour)
	ids := idsByShard("Order", "sl", shards, 3)
	// Groups of every shard (one Append: one group, one segment listed
	// under shard 0), and groups of single shards.
	for round := range 3 {
		var envs []envelope.Envelope
		for sh := range shards {
			for _, id := range ids[sh] {
				envs = append(envs, command("Order", id, round))
			}
		}
		mustAppend(t, s, envs...)
		mustAppend(t, s, command("Order", ids[2][round], "alone"), command("Order", ids[2][(round+1)%3], "alone"))
	}
	heads, err := s.Heads(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for sh := range shards {
		t.Run(fmt.Sprintf("shard %d", sh), func(t *testing.T) {
			l := s.ShardLog(sh)
			want := heads[sh].Position
			if h, err := l.Head(ctx); err != nil || h != want || want == 0 {
				t.Fatalf("Head = %d, %v; Heads says %d", h, err, want)
			}
			if hc, err := l.HeadWithClock(ctx); err != nil || hc.Position != want || hc.Now.IsZero() {
				t.Fatalf("HeadWithClock = %+v, %v", hc, err)
			}
			if p, err := l.PositionAt(ctx, before); err != nil || p != 0 {
				t.Fatalf("PositionAt(an hour ago) = %d, %v; want 0", p, err)
			}
			if p, err := l.PositionAt(ctx, time.Now().Add(time.Hour)); err != nil || p != want {
				t.Fatalf("PositionAt(in an hour) = %d, %v; want the last position %d", p, err, want)
			}
			rows, err := l.Index(ctx, IndexQuery{FromPosition: 1})
			if err != nil || int64(len(rows)) != want {
				t.Fatalf("Index: %d rows, %v; want %d", len(rows), err, want)
			}
			for i, r := range rows {
				if r.Position != int64(i+1) || r.Shard != sh || ShardOf(r.AggregateType, r.AggregateID, shards) != sh || r.State != StateCommitted {
					t.Fatalf("row %d: %+v", i, r)
				}
			}
			lists := e.bucket.lists.Load()
			all, err := l.Segments(ctx, 0, 100)
			if err != nil {
				t.Fatal(err)
			}
			if n := e.bucket.lists.Load() - lists; n != 0 {
				t.Fatalf("Segments of a shard listed the bucket %d times; want the index only", n)
			}
			next := int64(1)
			for _, sg := range all {
				if sg.First != next || sg.Last < sg.First || sg.Shard != sh {
					t.Fatalf("segments %+v: want contiguous blocks of shard %d from 1", all, sh)
				}
				evs, err := s.ReadSegment(ctx, sg.Key)
				if err != nil {
					t.Fatal(err)
				}
				var got []int64
				for _, ev := range evs {
					if ev.Shard == sh {
						got = append(got, ev.Envelope.Position)
					}
				}
				if len(got) == 0 || got[0] != sg.First || got[len(got)-1] != sg.Last || int64(len(got)) != sg.Last-sg.First+1 {
					t.Fatalf("segment %s holds shard %d positions %v, listed as %d..%d", sg.Key, sh, got, sg.First, sg.Last)
				}
				next = sg.Last + 1
			}
			if next-1 != want {
				t.Fatalf("segments end at %d, head %d", next-1, want)
			}
			// One at a time, after the last position returned: the same.
			var paged []SegmentInfo
			for after := int64(0); ; {
				page, err := l.Segments(ctx, after, 1)
				if err != nil {
					t.Fatal(err)
				}
				if len(page) == 0 {
					break
				}
				if len(page) != 1 {
					t.Fatalf("limit 1 returned %d segments", len(page))
				}
				paged = append(paged, page[0])
				after = page[0].Last
			}
			if fmt.Sprint(paged) != fmt.Sprint(all) {
				t.Fatalf("paged %v, want %v", paged, all)
			}
			// After a position inside a segment: the rest of its block.
			if mid := all[0]; mid.Last > mid.First {
				rest, err := l.Segments(ctx, mid.First, 1)
				if err != nil || len(rest) != 1 || rest[0].Key != mid.Key || rest[0].First != mid.First+1 || rest[0].Last != mid.Last {
					t.Fatalf("Segments after %d: %+v, %v", mid.First, rest, err)
				}
			}
		})
	}
	t.Run("a shard the store does not have", func(t *testing.T) {
		for _, sh := range []int{-1, shards} {
			_, err := s.ShardLog(sh).Head(ctx)
			var oe *ShardOutOfRangeError
			if !errors.As(err, &oe) || oe.Shards != shards {
				t.Fatalf("ShardLog(%d).Head: %v, want a *ShardOutOfRangeError", sh, err)
			}
		}
	})
	t.Run("one shard: the store's readers", func(t *testing.T) {
		one := newEnv(t)
		s1 := one.store(t, testConfig())
		for i := range 3 {
			mustAppend(t, s1, command("Order", "one", i))
		}
		l := s1.ShardLog(0)
		h, err1 := s1.Head(ctx)
		lh, err2 := l.Head(ctx)
		segs, err3 := s1.Segments(ctx, 0, 10)
		lsegs, err4 := l.Segments(ctx, 0, 10)
		if err := errors.Join(err1, err2, err3, err4); err != nil || h != 3 || lh != 3 || len(segs) != 3 || fmt.Sprint(segs) != fmt.Sprint(lsegs) {
			t.Fatalf("Head %d / %d, Segments %v / %v, %v", h, lh, segs, lsegs, err)
		}
	})
}
