package relay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/eventstore/objstore"
)

// The publishing pipeline (docs/relay.md, "Pipeline and the crash bound"):
//
//   - records are produced in flush batches; while batch k+1 is being
//     produced, the acknowledgements of batch k are outstanding (at most two
//     batches in flight, no producer-wide Flush that would drain the
//     pipeline);
//   - when a batch is acknowledged its positions are marked done and the
//     in-memory checkpoint advances over the contiguous done prefix;
//   - the checkpoint is written in the background (conditional PUT, at most
//     one write in flight, each over the ETag of the previous one) when
//     CheckpointMaxRecords/2 records were processed since the last write or
//     CheckpointInterval passed, and when the relay is caught up;
//   - before a record is produced, the records produced since the snapshot
//     of the last durable checkpoint must be fewer than
//     CheckpointMaxRecords; otherwise the walk drains the pipeline and waits
//     for a durable checkpoint. That bounds what a crash re-publishes.

// batch is one flush batch: records handed to the producer whose
// acknowledgements are counted down by the produce callbacks.
type batch struct {
	mu          sync.Mutex
	recs        []pendingRec
	outstanding int
	sealed      bool
	done        chan struct{} // closed when sealed and every record answered
	tracer      trace.Tracer  // nil: tracing off
}

type pendingRec struct {
	pos   int64
	id    string
	topic string
	late  bool
	err   error
	// rec and seg are kept for the retries of a refused record and its
	// parked row (parking.go).
	rec *kgo.Record
	seg string
}

// newBatch starts a flush batch. Its records grow as they come: a cycle at
// low load produces one or two records, and a batch sized for a whole
// flush (17 KB at the default of 200) was the relay's largest allocation.
func (r *Relay) newBatch() *batch {
	return &batch{recs: make([]pendingRec, 0, min(r.cfg.KafkaFlushBatchSize, 8)), done: make(chan struct{}), tracer: r.tracer}
}

func (b *batch) len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.recs)
}

// produce hands rec (of position pos, event id, stored in segment seg) to
// the producer; its outcome lands in the batch.
func (b *batch) produce(ctx context.Context, cl *kgo.Client, rec *kgo.Record, pos int64, id, seg string, late bool) {
	b.mu.Lock()
	i := len(b.recs)
	b.recs = append(b.recs, pendingRec{pos: pos, id: id, topic: rec.Topic, late: late, rec: rec, seg: seg})
	b.outstanding++
	b.mu.Unlock()
	var span trace.Span
	if b.tracer != nil {
		span = startPublish(ctx, b.tracer, rec, pos)
	}
	cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
		if span != nil {
			endPublish(span, err)
		}
		b.mu.Lock()
		if err != nil {
			b.recs[i].err = err
		}
		b.outstanding--
		closeNow := b.sealed && b.outstanding == 0
		b.mu.Unlock()
		if closeNow {
			close(b.done)
		}
	})
}

// seal marks the batch complete: done closes once every record is answered.
func (b *batch) seal() {
	b.mu.Lock()
	if b.sealed {
		b.mu.Unlock()
		return
	}
	b.sealed = true
	closeNow := b.outstanding == 0
	b.mu.Unlock()
	if closeNow {
		close(b.done)
	}
}

// pipelineDepth is how many sealed flush batches may await Kafka's
// acknowledgements while the next one is produced.
const pipelineDepth = 4

// pipe is a walk's producer pipeline: the batch being filled and the
// sealed ones whose acknowledgements are outstanding, oldest first.
type pipe struct {
	cur    *batch
	sealed []*batch
}

// saveOp is one checkpoint write running in the background.
type saveOp struct {
	cp   Checkpoint
	etag string
	seq  int64 // ls.processed at the snapshot
	done chan struct{}
	tag  string
	err  error
}

// produceRec produces one record through the pipeline: it first makes room
// under the crash bound, and when the current batch is full it waits for
// the previous one and starts a new batch.
func (r *Relay) produceRec(ctx context.Context, ls *leaderState, p *pipe, rec *kgo.Record, pos int64, id, seg string, late bool) error {
	if err := r.ensureBudget(ctx, ls, p); err != nil {
		return err
	}
	if p.cur == nil {
		p.cur = r.newBatch()
	}
	p.cur.produce(ctx, r.client, rec, pos, id, seg, late)
	ls.produced++
	if p.cur.len() < r.cfg.KafkaFlushBatchSize {
		return nil
	}
	p.cur.seal()
	p.sealed = append(p.sealed, p.cur)
	p.cur = nil
	// Process the batches Kafka answered meanwhile, in order; wait for the
	// oldest only when the pipeline is full. A batch leaves the pipe only
	// once answered: when ctx ends meanwhile it stays, and the walk's
	// drain waits for it (drainCtx).
	for len(p.sealed) > 0 {
		b := p.sealed[0]
		if len(p.sealed) <= pipelineDepth {
			select {
			case <-b.done:
			default:
				return nil
			}
		} else if err := r.awaitBatch(ctx, b); err != nil {
			return err
		}
		p.sealed = p.sealed[1:]
		if err := r.finishBatch(ctx, ls, b); err != nil {
			return err
		}
	}
	return nil
}

// drain waits for every batch of the pipeline and processes it, in order.
// The first error is returned after every batch was processed. When the
// leadership is ending gracefully it still waits for the batches in
// flight (awaitBatch, drainCtx), so that their positions are done before
// the final checkpoint.
func (r *Relay) drain(ctx context.Context, ls *leaderState, p *pipe) error {
	if p.cur != nil {
		p.cur.seal()
		p.sealed = append(p.sealed, p.cur)
		p.cur = nil
	}
	var errs []error
	for _, b := range p.sealed {
		if err := r.finishBatch(ctx, ls, b); err != nil {
			errs = append(errs, err)
		}
	}
	p.sealed = nil
	return errors.Join(errs...)
}

// drainCtx is the context a batch in flight is awaited with: ctx, unless ctx
// ended gracefully (a stop, SIGTERM, or a shard released to another
// replica: cause context.Canceled). Then the records in flight were
// handed to Kafka and may well be written: the drain waits for their
// acknowledgements on a context detached from ctx, for at most
// KafkaFlushTimeout, so that their positions are marked done and the final
// checkpoint (finalSave, fenced by the epoch; the lease is renewed until
// it is written) covers them and the next leader publishes none of them
// again. A leadership lost (fenced, the lease not renewed, a test's kill)
// is not graceful: nothing is waited for, the next leader re-publishes
// from the last durable checkpoint.
func (r *Relay) drainCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Err() == nil || !errors.Is(context.Cause(ctx), context.Canceled) {
		return ctx, func() {}
	}
	return context.WithTimeout(context.WithoutCancel(ctx), r.cfg.KafkaFlushTimeout)
}

// ensureBudget keeps the records produced since the last durable
// checkpoint below CheckpointMaxRecords: at the bound it drains the
// pipeline and waits until a checkpoint covering everything is durable.
func (r *Relay) ensureBudget(ctx context.Context, ls *leaderState, p *pipe) error {
	if ls.produced-ls.durable < int64(r.cfg.CheckpointMaxRecords) {
		return nil
	}
	if err := r.drain(ctx, ls, p); err != nil {
		return err
	}
	if err := r.collectSave(ctx, ls); err != nil {
		return err
	}
	if ls.produced-ls.durable < int64(r.cfg.CheckpointMaxRecords) {
		return nil
	}
	ls.dirty = true // every produced record is processed: cover them all
	return r.save(ctx, ls)
}

// finishBatch waits for Kafka to acknowledge b (pausing, never skipping,
// while Kafka is out), marks the acknowledged positions done, advances the
// in-memory checkpoint and starts a checkpoint write when one is due.
func (r *Relay) finishBatch(ctx context.Context, ls *leaderState, b *batch) error {
	if err := r.awaitBatch(ctx, b); err != nil {
		return err
	}
	b.mu.Lock()
	recs := b.recs
	b.mu.Unlock()
	var failed error
	acked := make([]string, 0, len(recs))
	var late int
	var missingTopics map[string]bool
	// The published counter is added to once per topic of the batch, not
	// per record (a label lookup each).
	var published []topicCount
	for i := range recs {
		pr := &recs[i]
		if pr.err != nil {
			r.m.produceErrs.Inc()
			// A refusal of the record's own is retried alone, then parked
			// (parking.go); an outage stays a failure, retried without limit.
			published, err := r.settle(ctx, ls, pr)
			switch {
			case err == nil && !published:
				continue // parked: done, not published
			case err == nil:
				pr.err = nil // acknowledged when produced alone
			default:
				pr.err = err
			}
		}
		if pr.err != nil {
			if failed == nil {
				failed = fmt.Errorf("relay: kafka did not acknowledge position %d (topic %s): %w", pr.pos, pr.topic, pr.err)
			}
			if errors.Is(pr.err, kerr.UnknownTopicOrPartition) {
				if missingTopics == nil {
					missingTopics = map[string]bool{}
				}
				missingTopics[pr.topic] = true
			}
			continue
		}
		ls.markDone(pr.pos)
		ls.dedup.add(pr.id)
		published = countTopic(published, pr.topic)
		acked = append(acked, pr.id)
		if pr.late {
			late++
		}
	}
	for _, c := range published {
		r.m.published.WithLabelValues(c.topic).Add(float64(c.n))
	}
	ls.processed += int64(len(recs))
	if len(acked) > 0 {
		ls.dirty = true
	}
	if late > 0 {
		r.m.late.Add(float64(late))
		r.m.gaps.WithLabelValues("late_published").Add(float64(late))
	}
	if h := r.ackHook; h != nil {
		h(acked, time.Now())
	}
	r.crasher.Hit("relay", "after_produce")
	if ls.inflight != nil {
		// A checkpoint write is in flight and a later batch is already
		// acknowledged (the crash bound's worst case).
		r.crasher.Hit("relay", "checkpoint_in_flight")
	}
	if failed != nil {
		r.setKafkaErr(failed)
		failed = errors.Join(failed, r.recreateTopics(ctx, missingTopics))
	} else {
		r.setKafkaErr(nil)
	}
	ls.advance()
	return errors.Join(failed, r.maybeSave(ctx, ls))
}

// recreateTopics creates again the topics Kafka reported missing (deleted
// since the relay created them), so the next cycle's records find them.
func (r *Relay) recreateTopics(ctx context.Context, topics map[string]bool) error {
	var errs []error
	for t := range topics {
		r.log.Warn("relay: topic missing; creating it", "topic", t)
		r.mu.Lock()
		delete(r.topicsCreated, t)
		r.mu.Unlock()
		errs = append(errs, r.topicReady(ctx, t))
	}
	return errors.Join(errs...)
}

// awaitBatch waits until Kafka answered every record of b. While it does
// not (outage) it marks Kafka unready and keeps waiting. When ctx ends
// gracefully it keeps waiting for at most KafkaFlushTimeout (drainCtx).
func (r *Relay) awaitBatch(ctx context.Context, b *batch) error {
	start := time.Now()
	t := time.NewTimer(r.cfg.KafkaFlushTimeout)
	defer t.Stop()
	for {
		select {
		case <-b.done:
			r.m.flush.Observe(time.Since(start).Seconds())
			return nil
		case <-ctx.Done():
			dctx, cancel := r.drainCtx(ctx)
			if dctx == ctx {
				return context.Cause(ctx)
			}
			// Stopping gracefully: the batch is in flight, wait for it.
			defer cancel()
			ctx = dctx
		case <-t.C:
			kerr := fmt.Errorf("%d records not acknowledged after %s", r.client.BufferedProduceRecords(), time.Since(start).Round(time.Millisecond))
			r.setKafkaErr(kerr)
			r.log.Warn("relay: kafka is not acknowledging; waiting (the checkpoint does not move)", "err", kerr)
			r.hb.Beat()
			t.Reset(r.cfg.KafkaFlushTimeout)
		}
	}
}

// maybeSave collects a finished background write and starts the next one
// when it is due: CheckpointMaxRecords/2 records processed since the last
// snapshot, or CheckpointInterval since the last write started.
func (r *Relay) maybeSave(ctx context.Context, ls *leaderState) error {
	if op := ls.inflight; op != nil {
		select {
		case <-op.done:
		default:
			return nil // one write at a time
		}
		if err := r.collectSave(ctx, ls); err != nil {
			return err
		}
	}
	if !ls.dirty {
		return nil
	}
	if ls.processed-ls.snapSeq >= int64(r.cfg.CheckpointMaxRecords/2) || time.Since(ls.lastSave) >= r.cfg.CheckpointInterval {
		r.startSave(ctx, ls)
	}
	return nil
}

// startSave snapshots the in-memory checkpoint and writes it in the
// background over the ETag of the last write. At most one write is in
// flight: the caller collects the previous one first.
func (r *Relay) startSave(ctx context.Context, ls *leaderState) {
	r.crasher.Hit("relay", "before_checkpoint")
	cp := ls.cp
	cp.PendingGaps = slices.Clone(ls.cp.PendingGaps)
	cp.RecentEventIDs = ls.dedup.recent(r.cfg.DedupCheckpointMaxEvents)
	cp.UpdatedAt = time.Now().UTC()
	op := &saveOp{cp: cp, etag: ls.etag, seq: ls.processed, done: make(chan struct{})}
	ls.inflight, ls.dirty, ls.snapSeq, ls.lastSave = op, false, ls.processed, time.Now()
	epoch := ls.epoch
	// A graceful end of ctx (a stop, a released shard) lets the write
	// finish (ObjectStoreTimeout bounds it): finalSave collects it. Any
	// other end (fenced, lease lost, killed) cancels it.
	wctx, wcancel := context.WithCancelCause(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		if cause := context.Cause(ctx); !errors.Is(cause, context.Canceled) {
			wcancel(cause)
		}
	})
	go func() {
		defer close(op.done)
		defer wcancel(nil)
		defer stop()
		op.tag, op.err = r.writeCheckpoint(wctx, op.cp, op.etag, epoch)
		if op.err == nil {
			r.noteProgress(-1, op.cp.Position)
			r.m.pendingGaps.Set(float64(len(op.cp.PendingGaps)))
		}
	}()
}

// collectSave waits for the background write, if any, and takes its
// result: the new ETag and what is now durable, or its error.
func (r *Relay) collectSave(ctx context.Context, ls *leaderState) error {
	op := ls.inflight
	if op == nil {
		return nil
	}
	select {
	case <-op.done:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	ls.inflight = nil
	if op.err != nil {
		ls.dirty = true
		return op.err
	}
	ls.etag = op.tag
	ls.durable = max(ls.durable, op.seq)
	return nil
}

// save writes the checkpoint now and waits until it is durable.
func (r *Relay) save(ctx context.Context, ls *leaderState) error {
	if err := r.collectSave(ctx, ls); err != nil {
		return err
	}
	r.startSave(ctx, ls)
	return r.collectSave(ctx, ls)
}

// writeCheckpoint writes cp over etag. A lost race means a newer leader
// (fenced) or an operator (adopt).
func (r *Relay) writeCheckpoint(ctx context.Context, cp Checkpoint, etag string, epoch int64) (string, error) {
	tag, err := r.checkpointSave(ctx, cp, etag)
	if errors.Is(err, objstore.ErrPreconditionFailed) {
		cur, _, found, lerr := r.checkpointLoad(ctx)
		if lerr != nil {
			return "", errors.Join(err, lerr)
		}
		if found && cur.RelayEpoch > epoch {
			return "", fmt.Errorf("%w: checkpoint has epoch %d (holder %s), ours is %d", ErrFenced, cur.RelayEpoch, cur.Holder, epoch)
		}
		return "", fmt.Errorf("%w: position now %d", ErrCheckpointMoved, cur.Position)
	}
	return tag, err
}

// topicCount is a number of records of one topic.
type topicCount struct {
	topic string
	n     int
}

// countTopic counts one record of topic in cs (a batch names few topics).
func countTopic(cs []topicCount, topic string) []topicCount {
	for i := range cs {
		if cs[i].topic == topic {
			cs[i].n++
			return cs
		}
	}
	return append(cs, topicCount{topic, 1})
}
