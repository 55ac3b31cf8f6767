package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore"
)

// SetCheckpoint moves the checkpoint to position (`sluice relay checkpoint
// set`). Moving it back re-publishes everything after it (consumers absorb
// the duplicates): the recent-id set is cleared so nothing is suppressed,
// and pending gaps above the new position are dropped (they will be walked
// again). The epoch is kept, so a running leader adopts the new position
// on its next write. It returns the checkpoint before and after.
func SetCheckpoint(ctx context.Context, cps *CheckpointStore, position int64) (old, cur Checkpoint, err error) {
	if position < 0 {
		return Checkpoint{}, Checkpoint{}, fmt.Errorf("relay: checkpoint position %d: must be >= 0", position)
	}
	for range 10 {
		cp, etag, _, err := cps.Load(ctx)
		if err != nil {
			return Checkpoint{}, Checkpoint{}, err
		}
		old = cp
		cur = cp
		cur.Position = position
		cur.RecentEventIDs = []string{}
		cur.PendingGaps = nil
		for _, g := range cp.PendingGaps {
			if g.Last <= position {
				cur.PendingGaps = append(cur.PendingGaps, g)
			} else if g.First <= position {
				g.Last = position
				cur.PendingGaps = append(cur.PendingGaps, g)
			}
		}
		cur.UpdatedAt = time.Now().UTC()
		cur.Holder = "operator"
		_, err = cps.Save(ctx, cur, etag)
		if errors.Is(err, objstore.ErrPreconditionFailed) {
			continue // the relay wrote meanwhile: read again
		}
		return old, cur, err
	}
	return Checkpoint{}, Checkpoint{}, errors.New("relay: checkpoint kept changing; try again (or stop the relay first)")
}

// GapRange is one range reported by `sluice relay gaps`.
type GapRange struct {
	First, Last int64
	// State: pending (abandoned, in the checkpoint, re-checked within the
	// lookback), abandoned (index rows abandoned, outside the lookback or
	// not yet passed), reserved (in flight or its writer died).
	State string
	// Since: when the relay resolved the gap (pending) or the oldest
	// reservation of the range.
	Since time.Time
	// Aggregates names up to five aggregates of the range.
	Aggregates []string
}

// Gaps lists the pending gaps of the checkpoint and every uncommitted range
// of the index (reserved and abandoned rows), in position order. It reads
// the one log of a store of one shard (ShardGaps reads any shard's).
func Gaps(ctx context.Context, store *eventstore.Store, cp Checkpoint) ([]GapRange, error) {
	if err := store.RequireOneShard("relay gaps"); err != nil {
		return nil, err
	}
	return ShardGaps(ctx, store, 0, cp)
}

// ShardGaps is Gaps of one shard: the pending gaps of its checkpoint cp
// and the uncommitted ranges of its index rows, in its positions.
func ShardGaps(ctx context.Context, store *eventstore.Store, shard int, cp Checkpoint) ([]GapRange, error) {
	log := store.ShardLog(shard)
	var out []GapRange
	for _, g := range cp.PendingGaps {
		out = append(out, GapRange{First: g.First, Last: g.Last, State: "pending", Since: g.Since})
	}
	const page = 5000
	var cur *GapRange
	for from := int64(1); ; {
		rows, err := log.Index(ctx, eventstore.IndexQuery{FromPosition: from, UncommittedOnly: true, Limit: page})
		if err != nil {
			return nil, err
		}
		for _, row := range rows {
			agg := row.AggregateType + ":" + row.AggregateID
			if cur != nil && cur.State == row.State && cur.Last+1 == row.Position {
				cur.Last = row.Position
				if len(cur.Aggregates) < 5 && cur.Aggregates[len(cur.Aggregates)-1] != agg {
					cur.Aggregates = append(cur.Aggregates, agg)
				}
				continue
			}
			if cur != nil {
				out = append(out, *cur)
			}
			cur = &GapRange{First: row.Position, Last: row.Position, State: row.State, Since: row.ReservedAt, Aggregates: []string{agg}}
		}
		if len(rows) < page {
			break
		}
		from = rows[len(rows)-1].Position + 1
	}
	if cur != nil {
		out = append(out, *cur)
	}
	return out, nil
}

// RepublishReport summarises a republish.
type RepublishReport struct {
	Segments int
	Records  int
}

// Republish produces the events of positions from..to again, in position
// order, with the relay's routing (or all to topic when set), and waits for
// Kafka to acknowledge them (`sluice relay republish`). It does not touch
// the checkpoint. progress, when set, is called after every flush. It
// reads the one log of a store of one shard (RepublishShard reads any
// shard's).
func Republish(ctx context.Context, store *eventstore.Store, cl *kgo.Client, router *Router, from, to int64, topic string, progress func(RepublishReport, int64)) (RepublishReport, error) {
	if err := store.RequireOneShard("relay republish"); err != nil {
		return RepublishReport{}, err
	}
	return RepublishShard(ctx, store, 0, cl, router, from, to, topic, progress)
}

// RepublishShard is Republish of positions from..to of one shard: its
// segments found through the index (eventstore.ShardLog.Segments), only
// its events of each segment produced.
func RepublishShard(ctx context.Context, store *eventstore.Store, shard int, cl *kgo.Client, router *Router, from, to int64, topic string, progress func(RepublishReport, int64)) (RepublishReport, error) {
	var rep RepublishReport
	log := store.ShardLog(shard)
	if from < 1 || to < from {
		return rep, fmt.Errorf("relay: republish %d..%d: want 1 <= from <= to", from, to)
	}
	var mu sync.Mutex
	var failed error
	after := from - 1
	const flushEvery = 1000
	pending := 0
	flush := func(at int64) error {
		if err := cl.Flush(ctx); err != nil {
			return fmt.Errorf("relay: republish: flush: %w", err)
		}
		mu.Lock()
		ferr := failed
		mu.Unlock()
		if ferr != nil {
			return ferr
		}
		pending = 0
		if progress != nil {
			progress(rep, at)
		}
		return nil
	}
	for after < to {
		segs, err := log.Segments(ctx, after, 200)
		if err != nil {
			return rep, err
		}
		if len(segs) == 0 {
			break
		}
		for _, s := range segs {
			if s.First > to {
				after = to
				break
			}
			evs, err := log.ReadSegment(ctx, s) // the shard's lines alone (a store of more than one shard)
			if err != nil {
				return rep, err
			}
			rep.Segments++
			for _, ev := range evs {
				p := ev.Envelope.Position
				if ev.Shard != shard || p < from || p > to || p <= after {
					continue
				}
				cl.Produce(ctx, router.Record(ev, topic), func(_ *kgo.Record, err error) {
					if err != nil {
						mu.Lock()
						if failed == nil {
							failed = fmt.Errorf("relay: republish position %d: %w", p, err)
						}
						mu.Unlock()
					}
				})
				rep.Records++
				pending++
			}
			after = max(after, s.Last)
			if pending >= flushEvery {
				if err := flush(after); err != nil {
					return rep, err
				}
			}
		}
	}
	return rep, flush(min(after, to))
}

// ShardStatus is one shard's relay state for `sluice relay checkpoint
// show`: its checkpoint, its head and its lease.
type ShardStatus struct {
	Shard int
	// Key is the checkpoint object; Found is false before its first write.
	Key        string
	Found      bool
	Checkpoint Checkpoint
	// Head is the shard's highest committed position.
	Head int64
	// Lease is the shard's lease row; LeaseFound is false before a
	// replica first took it.
	Lease      LeaseInfo
	LeaseFound bool
}

// Lag is the head minus the checkpoint position (0 when ahead).
func (s ShardStatus) Lag() int64 { return max(s.Head-s.Checkpoint.Position, 0) }

// Statuses returns the state of every shard of the relay configured by cfg
// (its name and checkpoint key) over store: one entry for a store of one
// shard.
func Statuses(ctx context.Context, store *eventstore.Store, bucket objstore.Bucket, pool *pgxpool.Pool, cfg Config) ([]ShardStatus, error) {
	cfg.Derive()
	n := max(store.Shards(), 1)
	out := make([]ShardStatus, 0, n)
	for sh := range n {
		st := ShardStatus{Shard: sh, Key: ShardCheckpointKey(cfg.CheckpointKey, sh, n)}
		var err error
		if st.Checkpoint, _, st.Found, err = NewCheckpointStore(bucket, st.Key).Load(ctx); err != nil {
			return nil, err
		}
		if st.Head, err = store.ShardLog(sh).Head(ctx); err != nil {
			return nil, err
		}
		if st.Lease, st.LeaseFound, err = NewLease(pool, ShardLeaseName(cfg.Name, sh, n), "", time.Second).Info(ctx); err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}
