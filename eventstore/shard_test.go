package eventstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/eventstore/objstore/filestore"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/failure"
)

// ShardOf is part of the store's format: every stored event's shard
// depends on it. These values were computed independently (Python's
// hashlib: the first four bytes of SHA-256 of "type:id", big-endian,
// modulo n); a change of the function fails here before it moves an
// aggregate to another shard.
func TestShardOfGolden(t *testing.T) {
	for _, c := range []struct {
		typ, id string
		n, want int
	}{
		{"Order", "o-1", 1, 0},                   // no hash at all
		{"Order", "o-1", 2, 1},                   // 0xeda17d31
		{"Order", "o-1", 4, 1},                   // 0xeda17d31
		{"Order", "o-2", 4, 1},                   // 0x43399f69
		{"Order", "o-3", 4, 2},                   // 0x4db4583e
		{"Order", "o-4", 4, 2},                   // 0x756b86ba
		{"Order", "o-1", 7, 2},                   // 0xeda17d31
		{"Order", "o-1", 1024, 305},              // 0xeda17d31
		{"Instance", "shop:order:42", 4, 2},      // 0x31ff913e
		{"Instance", "shop:order:42", 16, 14},    // 0x31ff913e
		{"Instance", "shop:order:42", 64, 62},    // 0x31ff913e
		{"Cart", "\u00dcn\u00efcode", 4, 0},      // 0x1b8ee868
		{"Cart", "\u00dcn\u00efcode", 1024, 104}, // 0x1b8ee868
		{"A", "b", 3, 1},                         // 0x2613e50c
	} {
		t.Run(fmt.Sprintf("%s:%s/%d", c.typ, c.id, c.n), func(t *testing.T) {
			if got := ShardOf(c.typ, c.id, c.n); got != c.want {
				t.Fatalf("ShardOf(%q, %q, %d) = %d, want %d", c.typ, c.id, c.n, got, c.want)
			}
		})
	}
}

// ShardOf spreads aggregates evenly: 20,000 sequential ids (the worst
// case for a weak hash) land within 5 % of the mean in every shard (four
// standard deviations where shards are small).
func TestShardOfSpreads(t *testing.T) {
	const ids = 20000
	for _, n := range []int{2, 4, 16, 64} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			count := make([]int, n)
			for i := range ids {
				s := ShardOf("Instance", fmt.Sprintf("shop:order:%d", i), n)
				if s < 0 || s >= n {
					t.Fatalf("shard %d of %d", s, n)
				}
				count[s]++
			}
			mean := float64(ids) / float64(n)
			tol := max(0.05*mean, 4*math.Sqrt(mean)) // 5 %, or four standard deviations where the shards are small
			for s, c := range count {
				if d := float64(c) - mean; d > tol || d < -tol {
					t.Errorf("shard %d holds %d of %d ids, mean %.0f ± %.0f", s, c, ids, mean, tol)
				}
			}
		})
	}
}

// Segment keys: one shard keeps the layout from before shards byte for
// byte; more name the store's number of shards and the lowest shard's
// block, and parse back; anything else is refused.
func TestSegmentNames(t *testing.T) {
	for _, c := range []struct {
		name segmentName
		key  string
	}{
		{segmentName{shards: 1, first: 1, last: 7}, "segments/00000000000000000001-00000000000000000007.jsonl"},
		{segmentName{shards: 4, shard: 2, first: 10, last: 12}, "segments/n4/0002-00000000000000000010-00000000000000000012.jsonl"},
		{segmentName{shards: 1024, shard: 1023, first: 1, last: 1}, "segments/n1024/1023-00000000000000000001-00000000000000000001.jsonl"},
	} {
		t.Run(c.key, func(t *testing.T) {
			if got := c.name.key(); got != c.key {
				t.Fatalf("key %q, want %q", got, c.key)
			}
			back, err := parseSegmentName(c.key)
			if err != nil || back != c.name {
				t.Fatalf("parse %q = %+v, %v; want %+v", c.key, back, err, c.name)
			}
		})
	}
	for _, bad := range []string{
		"segments/n4/0004-00000000000000000001-00000000000000000001.jsonl", // shard >= shards
		"segments/n1/0000-00000000000000000001-00000000000000000001.jsonl", // one shard has the old form
		"segments/n04/0000-00000000000000000001-00000000000000000001.jsonl",
		"segments/n2000/0000-00000000000000000001-00000000000000000001.jsonl",
		"segments/n4/0001-00000000000000000005-00000000000000000004.jsonl",
		"segments/n4/0001-00000000000000000000-00000000000000000004.jsonl",
		"segments/n4/001-00000000000000000001-00000000000000000004.jsonl",
		"segments/n4/0001-00000000000000000001-00000000000000000004.json",
		"segments/n4-0001-00000000000000000001-00000000000000000004.jsonl",
		"segments/00000000000000000002-00000000000000000001.jsonl",
	} {
		t.Run("refuses "+bad, func(t *testing.T) {
			if n, err := parseSegmentName(bad); err == nil {
				t.Fatalf("parsed %+v", n)
			}
		})
	}
}

// idsByShard returns k aggregate ids of type typ per shard of n, named
// prefix-0, prefix-1, … in order.
func idsByShard(typ, prefix string, n, k int) [][]string {
	out := make([][]string, n)
	for i, full := 0, 0; full < n; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		s := ShardOf(typ, id, n)
		if len(out[s]) < k {
			out[s] = append(out[s], id)
			if len(out[s]) == k {
				full++
			}
		}
	}
	return out
}

// parseBlock checks a segment of several shards against its key: the
// lines by shard, each shard's positions contiguous, the key naming the
// lowest shard's block.
func TestParseBlockOfShards(t *testing.T) {
	ids := idsByShard("Order", "p", 4, 2)
	line := func(id string, pos int64) string {
		tmpl, err := newLineTemplate(command("Order", id, 1))
		if err != nil {
			t.Fatal(err)
		}
		return string(tmpl.appendLine(nil, 1, pos))
	}
	good := []string{line(ids[1][0], 7), line(ids[1][1], 8), line(ids[3][0], 2)}
	name := segmentName{shards: 4, shard: 1, first: 7, last: 8}
	for _, c := range []struct {
		name  string
		seg   segmentName
		lines []string
		want  string // "" = accepted
	}{
		{"two shards", name, good, ""},
		{"key names another block", segmentName{shards: 4, shard: 1, first: 7, last: 9}, good, "its key names shard 1 positions 7..9"},
		{"key names another shard", segmentName{shards: 4, shard: 3, first: 2, last: 2}, good, "begins with shard 1"},
		{"shards out of order", name, []string{good[0], good[1], line(ids[0][0], 1)}, "after shard 1"},
		{"a hole in a shard", name, []string{good[0], line(ids[1][1], 9)}, "position 9 after shard 1 position 7"},
		{"empty", name, nil, "holds no line"},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := strings.Join(c.lines, "\n")
			if len(c.lines) > 0 {
				body += "\n"
			}
			lines, err := parseBlock(c.seg, c.seg.key(), []byte(body))
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got := blocksOf(lines); fmt.Sprint(got) != fmt.Sprint([]shardBlock{{1, 7, 8}, {3, 2, 2}}) {
					t.Fatalf("blocks %+v", got)
				}
				return
			}
			if !errors.Is(err, ErrCorruptSegment) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want ErrCorruptSegment with %q", err, c.want)
			}
		})
	}
}

func shardedConfig(n int) Config {
	c := testConfig()
	c.Shards = n
	return c
}

// shardRow is an appends row with its shard.
type shardRow struct {
	shard                int
	position, seq        int64
	eventID, state, key  string
	aggType, aggID, kind string
	offset, length       int64
}

func shardRows(t testing.TB, pool *pgxpool.Pool) []shardRow {
	t.Helper()
	rows, err := pool.Query(ctxT(t), `SELECT shard, position, sequence_number, event_id::text, state, segment_key, aggregate_type, aggregate_id, kind,
		coalesce(byte_offset, -1), coalesce(byte_length, 0) FROM sluice.appends ORDER BY shard, position`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (shardRow, error) {
		var x shardRow
		err := r.Scan(&x.shard, &x.position, &x.seq, &x.eventID, &x.state, &x.key, &x.aggType, &x.aggID, &x.kind, &x.offset, &x.length)
		return x, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func nextPositions(t testing.TB, pool *pgxpool.Pool) map[int]int64 {
	t.Helper()
	rows, err := pool.Query(ctxT(t), `SELECT shard, next_position FROM sluice.log_head`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]int64{}
	var sh int
	var next int64
	if _, err := pgx.ForEachRow(rows, []any{&sh, &next}, func() error { out[sh] = next; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// Appends to a store of four shards from concurrent goroutines, through
// two writers (two Stores, as two processes: their reservations lock head
// rows at the same time): every aggregate keeps its order and contiguous
// sequences; every shard's positions are 1..n without a hole, each row in
// its aggregate's shard; one segment object per group commit, whatever
// shards the group holds (PUTs counted at the bucket); every segment's
// lines are its rows.
func TestShardedAppendsConcurrent(t *testing.T) {
	const shards, writers, rounds = 4, 8, 30
	e := newEnv(t)
	s := e.store(t, shardedConfig(shards))
	ctx := ctxT(t)
	if s.Shards() != shards {
		t.Fatalf("Shards() = %d", s.Shards())
	}

	// One Append holding one aggregate of every shard is one group: one PUT.
	first := idsByShard("Order", "first", shards, 1)
	var envs []envelope.Envelope
	for sh := shards - 1; sh >= 0; sh-- { // arrival order is not shard order
		envs = append(envs, command("Order", first[sh][0], sh))
	}
	rs := mustAppend(t, s, envs...)
	for i, r := range rs {
		sh := shards - 1 - i
		if r.Event.Shard != sh || r.Event.Envelope.Position != 1 || r.Event.SegmentKey != rs[0].Event.SegmentKey {
			t.Fatalf("envelope %d: shard %d position %d segment %s; want shard %d position 1, one segment", i, r.Event.Shard,
				r.Event.Envelope.Position, r.Event.SegmentKey, sh)
		}
	}
	if got := e.bucket.creates.Load(); got != 1 {
		t.Fatalf("one group over %d shards made %d PUTs, want 1", shards, got)
	}

	other := e.store(t, named(shardedConfig(shards), "second-writer"))
	var wg sync.WaitGroup
	errc := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := s
			if w%2 == 1 {
				st = other
			}
			aggs := []string{fmt.Sprintf("w%d-a", w), fmt.Sprintf("w%d-b", w), fmt.Sprintf("w%d-c", w)}
			for n := range rounds {
				var envs []envelope.Envelope
				if n%5 == 0 {
					for _, a := range aggs {
						envs = append(envs, command("Order", a, map[string]any{"n": n}))
					}
				} else {
					envs = append(envs, command("Order", aggs[n%3], map[string]any{"n": n}))
				}
				rs, err := st.Append(ctx, envs...)
				if err != nil {
					errc <- err
					return
				}
				for _, r := range rs {
					ev := r.Event.Envelope
					if r.Err != nil {
						errc <- r.Err
						return
					}
					if want := ShardOf(ev.AggregateType, ev.AggregateID, shards); r.Event.Shard != want {
						errc <- fmt.Errorf("%s in shard %d, ShardOf says %d", ev.AggregateID, r.Event.Shard, want)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}

	t.Run("per aggregate order and sequences", func(t *testing.T) {
		for w := range writers {
			for k, suffix := range []string{"a", "b", "c"} {
				id := fmt.Sprintf("w%d-%s", w, suffix)
				evs, err := s.Stream(ctx, "Order", id, 1, 0, "")
				if err != nil {
					t.Fatal(err)
				}
				var want []int
				for n := range rounds {
					if n%5 == 0 || n%3 == k {
						want = append(want, n)
					}
				}
				if len(evs) != len(want) {
					t.Fatalf("%s: %d events, want %d", id, len(evs), len(want))
				}
				for j, ev := range evs {
					var data struct{ N int }
					if err := json.Unmarshal(ev.Envelope.Data, &data); err != nil {
						t.Fatal(err)
					}
					if ev.Envelope.SequenceNumber != int64(j+1) || data.N != want[j] {
						t.Fatalf("%s event %d: seq %d data %s, want seq %d n %d", id, j, ev.Envelope.SequenceNumber, ev.Envelope.Data, j+1, want[j])
					}
				}
			}
		}
	})
	rows := shardRows(t, e.pool)
	t.Run("each shard's positions contiguous", func(t *testing.T) {
		count := map[int]int64{}
		for _, r := range rows {
			if r.state != StateCommitted {
				t.Fatalf("row %+v not committed", r)
			}
			if want := ShardOf(r.aggType, r.aggID, shards); r.shard != want {
				t.Fatalf("row %+v in shard %d, ShardOf says %d", r, r.shard, want)
			}
			count[r.shard]++
			if r.position != count[r.shard] {
				t.Fatalf("shard %d: position %d where %d was due (a hole or a repeat)", r.shard, r.position, count[r.shard])
			}
		}
		next := nextPositions(t, e.pool)
		heads, err := s.Heads(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(heads) != shards {
			t.Fatalf("Heads: %+v", heads)
		}
		for sh := range shards {
			if count[sh] == 0 || next[sh] != count[sh]+1 || heads[sh] != (ShardHead{Shard: sh, Position: count[sh]}) {
				t.Errorf("shard %d: %d rows, next position %d, head %+v", sh, count[sh], next[sh], heads[sh])
			}
		}
	})
	t.Run("one segment object per group", func(t *testing.T) {
		keys := map[string][]shardRow{}
		multi := 0
		for _, r := range rows {
			keys[r.key] = append(keys[r.key], r)
		}
		for key, krs := range keys {
			evs, err := s.ReadSegment(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) != len(krs) {
				t.Fatalf("%s: %d lines, %d rows", key, len(evs), len(krs))
			}
			shardsIn := map[int]bool{}
			for j, ev := range evs {
				r := krs[j]
				if ev.Envelope.EventID != r.eventID || ev.Shard != r.shard || ev.Envelope.Position != r.position || ev.Offset != r.offset || int64(len(ev.Raw)) != r.length {
					t.Fatalf("%s line %d: %s shard %d position %d, row %+v", key, j, ev.Envelope.EventID, ev.Shard, ev.Envelope.Position, r)
				}
				shardsIn[r.shard] = true
			}
			if len(shardsIn) > 1 {
				multi++
			}
		}
		if puts, groups := e.bucket.creates.Load(), s.stats.groups.Load()+other.stats.groups.Load(); puts != int64(len(keys)) || groups != int64(len(keys)) {
			t.Fatalf("%d PUTs and %d groups for %d segments: want one PUT per group", puts, groups, len(keys))
		}
		if multi == 0 {
			t.Fatal("no segment holds more than one shard")
		}
		t.Logf("%d rows in %d segments, %d of them over several shards", len(rows), len(keys), multi)
	})
	t.Run("head lock wait observed per shard", func(t *testing.T) {
		for sh := range shards {
			h := s.m.headWait.WithLabelValues(fmt.Sprint(sh)).(prometheus.Histogram)
			if c := histCount(t, h); c == 0 { // the first group touched every shard through s
				t.Errorf("shard %d: no head lock wait observed", sh)
			}
		}
	})
}

// Idempotency and optimistic concurrency hold per envelope in groups that
// span shards: a retry returns the stored events at their (shard,
// position); a stale expected_seq refuses its envelope only; slots work
// across shards.
func TestShardedIdempotencyAndConcurrency(t *testing.T) {
	const shards = 4
	e := newEnv(t)
	s := e.store(t, shardedConfig(shards))
	ids := idsByShard("Order", "occ", shards, 1)
	agg := func(sh int) string { return ids[sh][0] }
	var batch []envelope.Envelope
	for sh := range shards {
		batch = append(batch, command("Order", agg(sh), sh))
	}
	var stored []Result
	for _, step := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"a group over every shard", func(t *testing.T) {
			stored = mustAppend(t, s, batch...)
			for sh, r := range stored {
				if r.Event.Shard != sh || r.Event.Envelope.SequenceNumber != 1 || r.Event.Envelope.Position != 1 {
					t.Fatalf("shard %d: %s in shard %d", sh, describe(r), r.Event.Shard)
				}
			}
		}},
		{"the retry is idempotent", func(t *testing.T) {
			again := mustAppend(t, s, batch...)
			for sh, r := range again {
				w := stored[sh]
				if !r.Duplicate || r.Event.Shard != w.Event.Shard || r.Event.Envelope.Position != w.Event.Envelope.Position ||
					r.Event.SegmentKey != w.Event.SegmentKey || string(r.Event.Raw) != string(w.Event.Raw) {
					t.Fatalf("retry %d: %s (dup %v) shard %d, want the stored event", sh, describe(r), r.Duplicate, r.Event.Shard)
				}
			}
		}},
		{"a stale expected_seq refuses only its envelope", func(t *testing.T) {
			stale := command("Order", agg(0), "stale")
			stale.ExpectedSeq = expect(5)
			held := command("Order", agg(1), "held")
			held.ExpectedSeq = expect(1)
			free := command("Order", agg(2), "free")
			rs, err := s.Append(ctxT(t), stale, held, free)
			if err != nil {
				t.Fatal(err)
			}
			var ce *ConflictError
			if !errors.As(rs[0].Err, &ce) || ce.ActualSeq != 1 || ce.ExpectedSeq != 5 {
				t.Fatalf("stale: %s", describe(rs[0]))
			}
			for k, r := range rs[1:] {
				if r.Err != nil || r.Event.Envelope.SequenceNumber != 2 || r.Event.Envelope.Position != 2 || r.Event.Shard != k+1 {
					t.Fatalf("envelope %d: %s shard %d, want seq 2 at position 2 of shard %d", k+1, describe(r), r.Event.Shard, k+1)
				}
			}
			if rs[1].Event.SegmentKey != rs[2].Event.SegmentKey {
				t.Fatalf("one group, two segments: %s, %s", rs[1].Event.SegmentKey, rs[2].Event.SegmentKey)
			}
		}},
		{"expected_seq holds in two shards at once", func(t *testing.T) {
			a := command("Order", agg(0), "a")
			a.ExpectedSeq = expect(1)
			d := command("Order", agg(3), "d")
			d.ExpectedSeq = expect(1)
			rs := mustAppend(t, s, a, d)
			if rs[0].Event.Envelope.SequenceNumber != 2 || rs[1].Event.Envelope.SequenceNumber != 2 {
				t.Fatalf("%s / %s", describe(rs[0]), describe(rs[1]))
			}
		}},
		{"a domain event into its command's slot beside other shards", func(t *testing.T) {
			d := domainEvent("Order", agg(2), "done")
			d.SequenceNumber = 1
			d.Metadata.SetString(envelope.MetaCausationID, stored[2].Event.Envelope.EventID)
			other := command("Order", agg(1), "other")
			rs := mustAppend(t, s, other, d)
			if rs[1].Event.Envelope.SequenceNumber != 1 || rs[1].Event.Shard != 2 || rs[1].Event.Envelope.Kind != envelope.KindDomain {
				t.Fatalf("domain event: %s shard %d", describe(rs[1]), rs[1].Event.Shard)
			}
			evs, err := s.Stream(ctxT(t), "Order", agg(2), 1, 1, "")
			if err != nil || len(evs) != 2 || evs[0].Envelope.Kind != envelope.KindCommand || evs[1].Envelope.EventID != d.EventID {
				t.Fatalf("slot 1 of %s: %d events, %v", agg(2), len(evs), err)
			}
			if ev, err := s.ByEventID(ctxT(t), d.EventID); err != nil || ev.Shard != 2 || string(ev.Raw) != string(rs[1].Event.Raw) {
				t.Fatalf("ByEventID: shard %d, %v", ev.Shard, err)
			}
			if ev, err := s.Command(ctxT(t), "Order", agg(2), 1); err != nil || ev.Envelope.EventID != stored[2].Event.Envelope.EventID {
				t.Fatalf("Command: %v", err)
			}
		}},
	} {
		t.Run(step.name, step.run)
	}
}

// The readers by one global position refuse a store of more than one
// shard with a *ShardsNotSupportedError; stream reads and Heads serve it.
func TestShardedReadersRefuse(t *testing.T) {
	e := newEnv(t)
	s := e.store(t, shardedConfig(4))
	r := mustAppend(t, s, command("Order", "r-1", 1))[0]
	ctx := ctxT(t)
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"Head", func() error { _, err := s.Head(ctx); return err }},
		{"HeadWithClock", func() error { _, err := s.HeadWithClock(ctx); return err }},
		{"PositionAt", func() error { _, err := s.PositionAt(ctx, r.Event.Envelope.OccurredAt.Time()); return err }},
		{"Segments", func() error { _, err := s.Segments(ctx, 0, 10); return err }},
		{"Index", func() error { _, err := s.Index(ctx, IndexQuery{FromPosition: 1}); return err }},
		{"RequireOneShard", func() error { return s.RequireOneShard("a test reader") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			var se *ShardsNotSupportedError
			if !errors.As(err, &se) || se.Shards != 4 || !strings.Contains(err.Error(), "read it by cursor") {
				t.Fatalf("error %v, want a *ShardsNotSupportedError naming the reads by cursor", err)
			}
		})
	}
	t.Run("stream reads serve it", func(t *testing.T) {
		if evs, err := s.Stream(ctx, "Order", "r-1", 1, 0, ""); err != nil || len(evs) != 1 || string(evs[0].Raw) != string(r.Event.Raw) {
			t.Fatalf("Stream: %d events, %v", len(evs), err)
		}
		if evs, err := s.ReadSegment(ctx, r.Event.SegmentKey); err != nil || len(evs) != 1 {
			t.Fatalf("ReadSegment: %v", err)
		}
		if hs, err := s.Heads(ctx); err != nil || len(hs) != 4 || hs[r.Event.Shard].Position != 1 {
			t.Fatalf("Heads: %+v, %v", hs, err)
		}
	})
}

// The number of shards is fixed when the store is created: opening it
// with another is refused with a *ShardsMismatchError naming both numbers
// and the documented way to migrate; a store from before shards (rows,
// no layout row) counts as one shard.
func TestShardsFixedAtCreation(t *testing.T) {
	for _, c := range []struct {
		name            string
		created, opened int
		forget          bool // delete the layout row: a store from before shards
	}{
		{"one shard opened with four", 1, 4, false},
		{"four shards opened with one", 4, 1, false},
		{"four shards opened with two", 4, 2, false},
		{"a store from before shards opened with four", 1, 4, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			s := e.store(t, shardedConfig(c.created))
			mustAppend(t, s, command("Order", "fixed", 1))
			if c.forget {
				if _, err := e.pool.Exec(ctxT(t), `DELETE FROM sluice.eventstore_layout`); err != nil {
					t.Fatal(err)
				}
			}
			_, err := New(shardedConfig(c.opened), Deps{Pool: e.pool, Bucket: e.bucket})
			var me *ShardsMismatchError
			if !errors.As(err, &me) || me.Stored != c.created || me.Configured != c.opened {
				t.Fatalf("New with %d shards: %v, want a *ShardsMismatchError %d/%d", c.opened, err, c.created, c.opened)
			}
			for _, want := range []string{fmt.Sprintf("has %d shard(s)", c.created), fmt.Sprintf("EVENT_STORE_SHARDS is %d", c.opened),
				"replay the events into a new store", "docs/scale-out.md#changing-the-number-of-shards"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("message %q lacks %q", err, want)
				}
			}
			again, err := New(shardedConfig(c.created), Deps{Pool: e.pool, Bucket: e.bucket})
			if err != nil {
				t.Fatalf("reopening with %d shards: %v", c.created, err)
			}
			_ = again.Close()
		})
	}
}

// Reindex rebuilds the index of a store of four shards from its segments
// alone: in place, and on a wiped schema (layout and heads included) it
// reproduces every row, sequence and head. Another number of shards is
// refused over those segments — by New on the empty index, recording
// nothing, and by Reindex — and nothing changes.
func TestShardedReindex(t *testing.T) {
	const shards = 4
	e := newEnv(t)
	s := e.store(t, shardedConfig(shards))
	for g := range 5 {
		var envs []envelope.Envelope
		for i := range 30 {
			envs = append(envs, command("Instance", fmt.Sprintf("db:c:%d", i%9), g*100+i))
		}
		rs := mustAppend(t, s, envs...)
		var doms []envelope.Envelope
		for _, r := range rs[:6] {
			d := domainEvent("Instance", r.Event.Envelope.AggregateID, map[string]any{"g": g})
			d.SequenceNumber = r.Event.Envelope.SequenceNumber
			doms = append(doms, d)
		}
		mustAppend(t, s, doms...)
	}
	before := snapshot(t, e.pool)
	wipe := func(t *testing.T) {
		if _, err := e.pool.Exec(ctxT(t), `TRUNCATE sluice.appends, sluice.sequences, sluice.log_head, sluice.eventstore_layout`); err != nil {
			t.Fatal(err)
		}
	}
	same := func(t *testing.T, rep ReindexReport) {
		after := snapshot(t, e.pool)
		if rep.Events != int64(len(before.appends)) || rep.Duplicates != 0 || len(rep.NextPositions) != shards {
			t.Errorf("report %+v, want %d events", rep, len(before.appends))
		}
		if strings.Join(after.appends, "\n") != strings.Join(before.appends, "\n") {
			t.Fatalf("appends differ:\n got  %v\n want %v", after.appends, before.appends)
		}
		if fmt.Sprint(after.sequences) != fmt.Sprint(before.sequences) || fmt.Sprint(after.heads) != fmt.Sprint(before.heads) {
			t.Fatalf("sequences %v heads %v, want %v %v", after.sequences, after.heads, before.sequences, before.heads)
		}
	}
	t.Run("in place", func(t *testing.T) {
		rep, err := s.Reindex(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		same(t, rep)
	})
	t.Run("wiped schema", func(t *testing.T) {
		wipe(t)
		s2 := e.store(t, shardedConfig(shards)) // records the layout and the head rows again
		rep, err := s2.Reindex(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		same(t, rep)
		r := mustAppend(t, s2, command("Instance", "db:c:0", "next"))[0]
		if want := nextPositions(t, e.pool)[r.Event.Shard] - 1; r.Event.Envelope.Position != want {
			t.Errorf("first append after reindex at %d of shard %d, want %d", r.Event.Envelope.Position, r.Event.Shard, want)
		}
	})
	t.Run("another number of shards refuses", func(t *testing.T) {
		wipe(t)
		// On the empty index, New already refuses: the bucket's segments
		// say four. It records nothing, so that the right number still
		// opens (a store of one recorded here would refuse it for good).
		_, err := New(shardedConfig(1), Deps{Pool: e.pool, Bucket: e.bucket})
		var me *ShardsMismatchError
		if !errors.As(err, &me) || me.Stored != shards || me.Configured != 1 || !strings.Contains(err.Error(), "in the bucket") {
			t.Fatalf("New with one shard over four shards' segments: %v", err)
		}
		var recorded int
		if err := e.pool.QueryRow(ctxT(t), `SELECT count(*) FROM sluice.eventstore_layout`).Scan(&recorded); err != nil || recorded != 0 {
			t.Fatalf("%d layout rows (%v) after the refusal, want none", recorded, err)
		}
		// A store of one shard recorded anyway (its own index) refuses to
		// rebuild from another layout's segments, and changes nothing.
		if _, err := e.pool.Exec(ctxT(t), `INSERT INTO sluice.eventstore_layout (shards) VALUES (1)`); err != nil {
			t.Fatal(err)
		}
		s1 := e.store(t, shardedConfig(1))
		_, err = s1.Reindex(ctxT(t))
		if !errors.As(err, &me) || me.Stored != shards || me.Configured != 1 || !strings.Contains(err.Error(), "segment segments/n4/") {
			t.Fatalf("Reindex of four shards' segments by a store of one: %v", err)
		}
		if rows := shardRows(t, e.pool); len(rows) != 0 {
			t.Fatalf("%d rows written", len(rows))
		}
		if _, err := s1.PlanReindex(ctxT(t), time.Minute); !errors.As(err, &me) {
			t.Fatalf("PlanReindex: %v", err)
		}
	})
}

// Repair settles a crashed reservation of a group over several shards:
// segment present → every shard's rows committed from it; absent and old
// → every shard's rows abandoned.
func TestShardedRepair(t *testing.T) {
	const shards = 4
	ids := idsByShard("Order", "rep", shards, 1)
	group := func(tag string) []envelope.Envelope {
		var envs []envelope.Envelope
		for sh := range shards {
			envs = append(envs, command("Order", ids[sh][0], tag))
		}
		return envs
	}
	for _, c := range []struct {
		name  string
		point string
		want  string
	}{
		{"crashed after the PUT", "after_put", StateCommitted},
		{"crashed before the PUT", "after_reserve", StateAbandoned},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			var crash crashAt
			stop := errors.New("test: crash")
			if c.point == "after_put" {
				crash.afterPut = func(context.Context, string) error { return stop }
			} else {
				crash.afterReserve = func(context.Context, string) error { return stop }
			}
			s := e.store(t, shardedConfig(shards), crash.option())
			envs := group(c.name)
			rs, err := s.Append(ctxT(t), envs...)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rs {
				if r.Err == nil {
					t.Fatal("the crashed group acknowledged an envelope")
				}
			}
			rows := shardRows(t, e.pool)
			if len(rows) != shards {
				t.Fatalf("%d rows, want %d reserved", len(rows), shards)
			}
			key := rows[0].key
			for _, r := range rows {
				if r.state != StateReserved || r.key != key || r.position != 1 {
					t.Fatalf("row %+v, want reserved at position 1 under %s", r, key)
				}
			}
			if _, err := e.pool.Exec(ctxT(t), `UPDATE sluice.appends SET reserved_at = now() - interval '1 hour'`); err != nil {
				t.Fatal(err)
			}
			s2 := e.store(t, shardedConfig(shards))
			rep, err := s2.Repair(ctxT(t), 0)
			if err != nil {
				t.Fatal(err)
			}
			n := int64(shards)
			if (c.want == StateCommitted && rep.Committed != n) || (c.want == StateAbandoned && rep.Abandoned != n) || rep.Blocks != 1 {
				t.Fatalf("repair %+v", rep)
			}
			for _, r := range shardRows(t, e.pool) {
				if r.state != c.want {
					t.Fatalf("row %+v after repair, want %s", r, c.want)
				}
			}
			if c.want == StateCommitted {
				for _, env := range envs {
					ev, err := s2.ByEventID(ctxT(t), env.EventID)
					if err != nil || ev.SegmentKey != key || ev.Shard != ShardOf("Order", env.AggregateID, shards) {
						t.Fatalf("%s after repair: %+v, %v", env.AggregateID, ev, err)
					}
				}
			}
			// The next group takes position 2 in every shard: no position reused.
			for _, r := range mustAppend(t, s2, group("next")...) {
				if r.Event.Envelope.Position != 2 {
					t.Fatalf("after repair: %s", describe(r))
				}
			}
		})
	}
}

// The file backend holds a sharded store's segments too (their keys have
// a folder more, segments/n4/): appends, reads and a reindex from the
// listing work as on S3.
func TestShardedOnFileBackend(t *testing.T) {
	const shards = 4
	_, pool := testenv.NewMigratedDatabase(t)
	b, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	s, err := New(shardedConfig(shards), Deps{Pool: pool, Bucket: b})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ids := idsByShard("Order", "file", shards, 2)
	var envs []envelope.Envelope
	for sh := range shards {
		for _, id := range ids[sh] {
			envs = append(envs, command("Order", id, sh))
		}
	}
	rs := mustAppend(t, s, envs...)
	mustAppend(t, s, command("Order", ids[2][0], "again"))
	before := snapshot(t, pool)
	evs, err := s.ReadSegment(ctxT(t), rs[0].Event.SegmentKey)
	if err != nil || len(evs) != len(envs) || !strings.HasPrefix(rs[0].Event.SegmentKey, "segments/n4/0000-") {
		t.Fatalf("segment %s: %d lines, %v", rs[0].Event.SegmentKey, len(evs), err)
	}
	rep, err := s.Reindex(ctxT(t))
	if err != nil || rep.Segments != 2 || rep.Events != int64(len(envs)+1) {
		t.Fatalf("reindex %+v, %v", rep, err)
	}
	if after := snapshot(t, pool); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("reindex changed the index:\n got  %v\n want %v", after, before)
	}
}

// A Store opened while Postgres does not answer starts anyway (a service
// started during an outage waits, it does not exit): what depends on the
// number of shards answers as unavailable until the background check
// succeeds; then appends work. A mismatch found by that check refuses them
// for good, with the same *ShardsMismatchError New gives.
func TestLayoutCheckedAfterPostgresReturns(t *testing.T) {
	for _, c := range []struct {
		name            string
		created, opened int
	}{
		{"same number of shards", 1, 1},
		{"another number of shards", 4, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			first := e.store(t, shardedConfig(c.created))
			mustAppend(t, first, command("Order", "before", 1))
			proxy := testenv.NewPGProxy(t, e.url)
			pcfg := proxy.PoolConfig()
			pcfg.ConnConfig.ConnectTimeout = time.Second
			pool, err := pgxpool.NewWithConfig(ctxT(t), pcfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			proxy.Stop()
			s, err := New(shardedConfig(c.opened), Deps{Pool: pool, Bucket: e.bucket})
			if err != nil {
				t.Fatalf("New while Postgres is down: %v, want a store that waits", err)
			}
			t.Cleanup(func() { _ = s.Close() })
			if _, err := s.Append(ctxT(t), command("Order", "during", 1)); err == nil || !strings.Contains(err.Error(), "not checked yet") {
				t.Fatalf("append before the layout is checked: %v, want the layout not checked yet", err)
			}
			if _, err := s.Head(ctxT(t)); err == nil || !strings.Contains(err.Error(), "not checked yet") {
				t.Fatalf("head before the layout is checked: %v, want the layout not checked yet", err)
			}
			proxy.Start()
			var last error
			deadline := time.Now().Add(60 * time.Second)
			for time.Now().Before(deadline) {
				if _, last = s.Append(ctxT(t), command("Order", "after", 1)); last == nil || !strings.Contains(last.Error(), "not checked yet") {
					break
				}
				<-s.layoutWait(ctxT(t))
			}
			var me *ShardsMismatchError
			switch {
			case c.created == c.opened && last != nil:
				t.Fatalf("append once Postgres is back: %v", last)
			case c.created != c.opened && (!errors.As(last, &me) || me.Stored != c.created || me.Configured != c.opened):
				t.Fatalf("append once Postgres is back: %v, want a *ShardsMismatchError %d/%d", last, c.created, c.opened)
			}
			// The readiness probe says what appends say, and a refusal is
			// the deployment's: an outage to the callers' classification
			// (a worker pauses, it does not dead-letter every command).
			_, herr := s.Heads(ctxT(t))
			switch {
			case c.created == c.opened && herr != nil:
				t.Fatalf("Heads once the layout is checked: %v", herr)
			case c.created != c.opened && (!errors.As(herr, &me) || failure.Classify(ctxT(t), last) != failure.Outage):
				t.Fatalf("Heads after the refusal: %v (append's error classified %v), want the *ShardsMismatchError, an outage",
					herr, failure.Classify(ctxT(t), last))
			}
		})
	}
}

// layoutWait returns a channel closed once the layout check has ended (or
// ctx is done): for tests that wait for the background check.
func (s *Store) layoutWait(ctx context.Context) <-chan struct{} {
	out := make(chan struct{})
	go func() {
		defer close(out)
		select {
		case <-s.layout.ready:
		case <-ctx.Done():
		}
	}()
	return out
}
