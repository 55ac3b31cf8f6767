package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/internal/testenv"
)

// segmentReads is a bucket that records every read of a segment: its key
// and the bytes returned ([0, size) for a whole GET).
type segmentReads struct {
	objstore.Bucket
	mu    sync.Mutex
	reads []segmentRead
}

type segmentRead struct {
	key    string
	off, n int64
	whole  bool
}

func (b *segmentReads) Get(ctx context.Context, key string) ([]byte, objstore.ObjectInfo, error) {
	body, oi, err := b.Bucket.Get(ctx, key)
	if err == nil && strings.HasPrefix(key, eventstore.SegmentPrefix) {
		b.mu.Lock()
		b.reads = append(b.reads, segmentRead{key: key, n: int64(len(body)), whole: true})
		b.mu.Unlock()
	}
	return body, oi, err
}

func (b *segmentReads) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	body, err := b.Bucket.GetRange(ctx, key, off, n)
	if err == nil && strings.HasPrefix(key, eventstore.SegmentPrefix) {
		b.mu.Lock()
		b.reads = append(b.reads, segmentRead{key: key, off: off, n: int64(len(body))})
		b.mu.Unlock()
	}
	return body, err
}

func (b *segmentReads) all() []segmentRead {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]segmentRead(nil), b.reads...)
}

// shardSpans parses a segment body of a store of shards and returns, per
// shard, the bytes [start, end) its lines take (without the newline after
// the last), as the store wrote them: each shard's lines contiguous.
func shardSpans(t *testing.T, body []byte, shards int) map[int][2]int64 {
	t.Helper()
	out := map[int][2]int64{}
	off := int64(0)
	for line := range bytes.SplitSeq(body, []byte("\n")) {
		if len(line) > 0 {
			var id struct {
				AggregateType string `json:"aggregate_type"`
				AggregateID   string `json:"aggregate_id"`
			}
			if err := json.Unmarshal(line, &id); err != nil {
				t.Fatalf("segment line at %d: %v", off, err)
			}
			sh := eventstore.ShardOf(id.AggregateType, id.AggregateID, shards)
			sp, ok := out[sh]
			if !ok {
				sp[0] = off
			}
			sp[1] = off + int64(len(line))
			out[sh] = sp
		}
		off += int64(len(line)) + 1
	}
	return out
}

// A shard's leader reads only its own lines of a segment (issue 33, the
// relay per shard pays; docs/scale-out.md#relay-throughput-per-shard-count):
// over a store of four shards, groups holding events of several shards are
// published by one replica leading every shard, and every read of a
// segment it makes is a ranged GET lying inside one shard's lines; each
// shard's lines of each segment are read, and all of them together about
// once (whole reads, as before, would read every segment once per shard it
// holds: four times here). The saving is pinned by the bytes read, not by
// a time.
func TestShardLeaderReadsOnlyItsLines(t *testing.T) {
	const shards = 4
	e := newShardedEnv(t, shards, 30*time.Second)
	// Atomic batches of 200 events over 40 aggregates: one group commit,
	// one segment each, holding events of (nearly always) every shard.
	list := seedInBatches(t, e.store, mixedEnvelopes(1000, 40, ""), 200, 1)
	stored := make(map[string]eventstore.Event, len(list))
	segs := map[string]bool{}
	for _, ev := range list {
		stored[ev.Envelope.EventID] = ev
		segs[ev.SegmentKey] = true
	}
	spans := map[string]map[int][2]int64{}
	var segBytes int64
	multi := 0
	for key := range segs {
		body, _, err := e.bucket.Get(ctxT(t, 10*time.Second), key)
		if err != nil {
			t.Fatal(err)
		}
		segBytes += int64(len(body))
		spans[key] = shardSpans(t, body, shards)
		if len(spans[key]) > 1 {
			multi++
		}
	}
	if multi == 0 {
		t.Fatalf("none of the %d segments holds lines of more than one shard: nothing to save", len(segs))
	}

	reads := &segmentReads{Bucket: e.bucket}
	p := startReplicaOn(t, e, "replica-a", reads)
	testenv.WaitFor(t, 2*time.Minute, "every shard published to its head", func() bool { return e.allPublished(t) })
	p.stop()

	var readBytes int64
	covered := map[string]map[int]int64{} // key → shard → bytes read of its lines
	for _, rd := range reads.all() {
		readBytes += rd.n
		if rd.whole {
			t.Errorf("segment %s read whole (%d bytes): a shard's leader reads its own lines only", rd.key, rd.n)
			continue
		}
		owner := -1
		for sh, sp := range spans[rd.key] {
			if rd.off >= sp[0] && rd.off+rd.n <= sp[1] {
				owner = sh
			}
		}
		if owner < 0 {
			t.Errorf("read of %s [%d+%d] is not inside one shard's lines %v", rd.key, rd.off, rd.n, spans[rd.key])
			continue
		}
		if covered[rd.key] == nil {
			covered[rd.key] = map[int]int64{}
		}
		covered[rd.key][owner] += rd.n
	}
	for key, byShard := range spans {
		for sh, sp := range byShard {
			if got := covered[key][sh]; got < sp[1]-sp[0] {
				t.Errorf("shard %d's lines of %s: %d of %d bytes read", sh, key, got, sp[1]-sp[0])
			}
		}
	}
	t.Logf("%d segments (%d of several shards), %d bytes; the relay read %d bytes (%.2f×)", len(segs), multi, segBytes, readBytes, float64(readBytes)/float64(segBytes))
	// A line read again (a cycle retried) is allowed; whole reads would be
	// one per shard a segment holds.
	if readBytes > 2*segBytes {
		t.Errorf("the relay read %d bytes of %d bytes of segments: more than twice", readBytes, segBytes)
	}
	exactlyOnce(t, stored, verify(t, e, stored, e.consumeAll(t, e.commandsTopic(), e.eventsTopic()), ""))
}
