package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/shared/failure"
)

// objWatch makes object storage visible to the relay's readiness, metrics
// and log (issue 26: a store that hangs must be as visible as one that
// refuses). Every object-storage call of the relay runs under
// ObjectStoreTimeout; a call outstanding for longer, or a last call that
// failed as an outage, turns readiness red; the next successful call turns
// it green again.
type objWatch struct {
	timeout time.Duration

	mu       sync.Mutex
	next     uint64
	inflight map[uint64]objCall
	lastErr  error // the last call's outage, nil after a success
	// lastLog and suppressed rate-limit the warning (one per objLogEvery).
	lastLog    time.Time
	suppressed int
}

type objCall struct {
	op, key string
	start   time.Time
}

// objLogEvery is the shortest interval between two object-storage
// warnings; the calls failing meanwhile are counted in the next one.
const objLogEvery = 10 * time.Second

func (w *objWatch) init(timeout time.Duration) {
	w.timeout = timeout
	w.inflight = map[uint64]objCall{}
}

// stalled is the readiness side: an error while a call has been
// outstanding longer than the timeout, or the last call failed as an
// outage.
func (w *objWatch) stalled() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	for _, c := range w.inflight {
		if d := now.Sub(c.start); d > w.timeout {
			return fmt.Errorf("object storage: %s %s has not answered for %s (timeout %s)", c.op, c.key, d.Round(time.Millisecond), w.timeout)
		}
	}
	if w.lastErr != nil {
		return fmt.Errorf("object storage: %w", w.lastErr)
	}
	return nil
}

// watchCall runs fn, one object-storage call of operation op on key, under
// the object-store timeout, and accounts for it: in-flight tracking for
// readiness, sluice_relay_objectstore_errors_total and sluice_relay_objectstore_stalled,
// a rate-limited warning. A call cancelled by its caller (ctx done) counts
// for nothing; objstore.ErrNotFound is an answer, not a failure.
func watchCall[T any](ctx context.Context, r *Relay, op, key string, fn func(context.Context) (T, error)) (T, error) {
	w := &r.obj
	w.mu.Lock()
	id := w.next
	w.next++
	w.inflight[id] = objCall{op: op, key: key, start: time.Now()}
	w.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, w.timeout)
	v, err := fn(cctx)
	timedOut := cctx.Err() != nil && ctx.Err() == nil
	cancel()
	w.mu.Lock()
	delete(w.inflight, id)
	w.mu.Unlock()
	if ctx.Err() != nil {
		return v, err
	}
	if err != nil && timedOut && !errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("%w: %w", err, context.DeadlineExceeded)
	}
	if err == nil || errors.Is(err, objstore.ErrNotFound) {
		w.mu.Lock()
		recovered := w.lastErr != nil
		w.lastErr = nil
		w.mu.Unlock()
		if recovered {
			r.m.objStalled.Set(0)
			r.log.Info("relay: object storage answers again", "op", op)
		}
		return v, err
	}
	if timedOut {
		err = fmt.Errorf("relay: object storage %s %s: no answer within %s: %w", op, key, w.timeout, err)
	}
	class := failure.Classify(ctx, err)
	r.m.objErrs.WithLabelValues(op, class.String()).Inc()
	w.mu.Lock()
	if class == failure.Outage {
		w.lastErr = err
	}
	logNow := time.Since(w.lastLog) >= objLogEvery
	suppressed := w.suppressed
	if logNow {
		w.lastLog, w.suppressed = time.Now(), 0
	} else {
		w.suppressed++
	}
	w.mu.Unlock()
	if class == failure.Outage {
		r.m.objStalled.Set(1)
	}
	if logNow {
		r.log.Warn("relay: object storage call failed; retrying (the checkpoint does not move)",
			"op", op, "key", key, "class", class.String(), "failed_since_last_warning", suppressed, "err", err)
	}
	return v, err
}

// segments lists the shard's segments after position after: object
// storage's listing for a store of one shard, the index for more
// (eventstore.ShardLog.Segments), which is a Postgres query and not
// watched as object storage.
func (r *Relay) segments(ctx context.Context, after int64, n int) ([]eventstore.SegmentInfo, error) {
	if r.shards > 1 {
		segs, err := r.sl.Segments(ctx, after, n)
		if err != nil {
			return nil, fmt.Errorf("relay: %w", err)
		}
		return segs, nil
	}
	return watchCall(ctx, r, "list", eventstore.SegmentPrefix, func(ctx context.Context) ([]eventstore.SegmentInfo, error) {
		return r.sl.Segments(ctx, after, n)
	})
}

// readSegment GETs a segment (object storage) and returns its events of
// this relay's shard: over a store of more than one shard, a ranged GET of
// the shard's lines when seg carries their byte range, else the whole
// segment, keeping the shard's (eventstore.ShardLog.ReadSegment says which
// and why).
func (r *Relay) readSegment(ctx context.Context, seg eventstore.SegmentInfo) ([]eventstore.Event, error) {
	return watchCall(ctx, r, "get", seg.Key, func(ctx context.Context) ([]eventstore.Event, error) {
		return r.sl.ReadSegment(ctx, seg)
	})
}

// checkpointLoad reads the checkpoint (object storage).
func (r *Relay) checkpointLoad(ctx context.Context) (cp Checkpoint, etag string, found bool, err error) {
	type loaded struct {
		cp    Checkpoint
		etag  string
		found bool
	}
	l, err := watchCall(ctx, r, "checkpoint", r.cps.key, func(ctx context.Context) (loaded, error) {
		cp, etag, found, err := r.cps.Load(ctx)
		return loaded{cp, etag, found}, err
	})
	return l.cp, l.etag, l.found, err
}

// checkpointSave writes the checkpoint conditionally (object storage).
func (r *Relay) checkpointSave(ctx context.Context, cp Checkpoint, etag string) (string, error) {
	return watchCall(ctx, r, "checkpoint", r.cps.key, func(ctx context.Context) (string, error) {
		return r.cps.Save(ctx, cp, etag)
	})
}

// checkpointStat reads the checkpoint's metadata (object storage).
func (r *Relay) checkpointStat(ctx context.Context) (objstore.ObjectInfo, error) {
	return watchCall(ctx, r, "checkpoint", r.cps.key, func(ctx context.Context) (objstore.ObjectInfo, error) {
		return r.cps.bucket.Stat(ctx, r.cps.key)
	})
}
