package instanceworker

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/readmodel"
	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/failure"
	"github.com/sluicehq/sluice/shared/tracing"
	"github.com/sluicehq/sluice/worker"
)

var _ worker.BatchHandler = (*Worker)(nil)

// batchParallelism bounds the concurrent domain stream reads of one batch
// (the appends are one call: appendEvents).
const batchParallelism = 512

// job is one command of a batch on its way through HandleBatch.
type job struct {
	i        int  // index in the batch
	last     bool // the runtime's last attempt at the record
	c        command
	n        readmodel.Names
	cur      current
	evType   string
	newState json.RawMessage
	stored   eventstore.Event
}

// HandleBatch processes every command claimed in one runtime round
// (worker.BatchHandler) with the same semantics as Handle, per command,
// but with the I/O batched: one _mget for the current documents (real
// time), the domain stream read only where the document is behind (normally
// nowhere), all domain events appended with one call (one group of the
// event store's group commit), one _bulk for the instance documents
// (version = slot, version_type = external). A round holds at most one
// command per aggregate (wait-for-predecessor: the next slot is claimable
// only after this one is done), so the commands are independent.
//
// Crash points are hit once per batch: before_append before the first
// append, after_append when every append finished, before_es_write and
// after_es_write around the bulk. Each command fails on its own: a
// permanent failure, a retryable store or ES error, or a rejection concerns
// only its record.
func (w *Worker) HandleBatch(ctx context.Context, recs []*worker.Record) []worker.BatchResult {
	out := make([]worker.BatchResult, len(recs))
	jobs := make([]*job, 0, len(recs))
	for i, rec := range recs {
		c, err := parseCommand(rec.Envelope)
		if err != nil {
			out[i].Err = worker.Permanent(err)
			continue
		}
		n, err := w.names(ctx, c.db)
		if err != nil {
			out[i].Err = err
			continue
		}
		c.span = rec.Span
		jobs = append(jobs, &job{i: i, c: c, n: n, last: rec.Attempt >= w.cfg.Worker.InstanceMaxRetryAttempts})
	}
	jobs = w.loadBatch(ctx, jobs, out)

	// Decide.
	live := jobs[:0]
	for _, j := range jobs {
		evType, newState, rejected, err := decide(j.c, j.cur)
		switch {
		case rejected != nil:
			out[j.i].Outcome = *rejected
		case err != nil:
			out[j.i].Err = err
		default:
			j.evType, j.newState = evType, newState
			live = append(live, j)
		}
	}
	jobs = live
	if len(jobs) == 0 {
		return out
	}

	// Append every domain event in one call: one group of the store.
	w.hit(PointBeforeAppend)
	cs, evTypes, states := make([]command, len(jobs)), make([]string, len(jobs)), make([]json.RawMessage, len(jobs))
	for k, j := range jobs {
		cs[k], evTypes[k], states[k] = j.c, j.evType, j.newState
	}
	stored, errs := w.appendEvents(ctx, cs, evTypes, states)
	for k, j := range jobs {
		j.stored = stored[k]
	}
	live = jobs[:0]
	for k, j := range jobs {
		if o, ok := reusedOutcome(errs[k]); ok {
			out[j.i].Outcome = o
			continue
		}
		if o, ok := invalidEventOutcome(errs[k]); ok {
			out[j.i].Outcome = o
			continue
		}
		if errs[k] != nil {
			out[j.i].Err = errs[k]
			continue
		}
		live = append(live, j)
	}
	jobs = live
	if len(jobs) == 0 {
		return out
	}
	w.hit(PointAfterAppend)

	// One bulk for the documents.
	ws := make([]readmodel.Write, len(jobs))
	for k, j := range jobs {
		ws[k] = readmodel.Write{Names: j.n, Meta: docMeta(j.c, j.cur, j.stored), State: j.stored.Envelope.Data}
	}
	w.hit(PointBeforeESWrite)
	esStart := time.Now()
	sent := w.generations(ws)
	res, err := w.writeInstances(ctx, ws)
	if jobs[0].c.span != nil {
		spans := make([]trace.Span, len(jobs))
		for k, j := range jobs {
			spans[k] = j.c.span
		}
		tracing.Stage(spans, "elasticsearch bulk", esStart, time.Now(), err)
	}
	if err != nil {
		for _, j := range jobs {
			out[j.i].Outcome, out[j.i].Err = w.writeFailed(ctx, j.c, err, j.last)
		}
		return out
	}
	w.retryLost(ctx, ws, res, sent)
	w.hit(PointAfterESWrite)
	for k, j := range jobs {
		if err := res[k].Err; err != nil {
			out[j.i].Outcome, out[j.i].Err = w.writeFailed(ctx, j.c, err, j.last)
			continue
		}
		out[j.i].Outcome = claim.Applied()
	}
	return out
}

// loadBatch loads the state before its slot for every job (as load does for
// one): one _mget of the documents, then the domain stream tails where
// needed, in parallel. Jobs that failed get their error in out and are left
// out of the returned slice.
func (w *Worker) loadBatch(ctx context.Context, jobs []*job, out []worker.BatchResult) []*job {
	if len(jobs) == 0 {
		return jobs
	}
	refs := make([]readmodel.Ref, len(jobs))
	for k, j := range jobs {
		refs[k] = readmodel.Ref{Names: j.n, Class: j.c.class, InstanceID: j.c.instanceID}
	}
	got, err := w.readInstances(ctx, refs)
	if err != nil {
		err = worker.Classified(ctx, failure.Elasticsearch, err)
		for _, j := range jobs {
			out[j.i].Err = err
		}
		return nil
	}
	errs := make([]error, len(jobs))
	w.each(len(jobs), func(k int) {
		jobs[k].cur, errs[k] = w.loadFrom(ctx, jobs[k].c, got[k])
	})
	live := jobs[:0]
	for k, j := range jobs {
		if errs[k] != nil {
			out[j.i].Err = errs[k]
			continue
		}
		live = append(live, j)
	}
	return live
}

// writeInstances is writeBulk that isolates the writes a refused request
// was refused for: when Elasticsearch refuses the whole request for a
// reason retrying cannot fix (a request-level 400 or 413), the writes are
// split in halves and sent again, down to single writes, so that only the
// writes it refuses alone get the refusal (as their item error) and the
// others are written. The error is a failure of a request as a whole that
// is not permanent (an outage, after ESRetry).
func (w *Worker) writeInstances(ctx context.Context, ws []readmodel.Write) ([]readmodel.WriteItem, error) {
	res, err := w.writeBulk(ctx, ws)
	if err == nil || failure.Classify(ctx, err) != failure.Permanent {
		return res, err
	}
	if len(ws) == 1 {
		return []readmodel.WriteItem{{Err: err}}, nil
	}
	h := len(ws) / 2
	a, err := w.writeInstances(ctx, ws[:h])
	if err != nil {
		return nil, err
	}
	b, err := w.writeInstances(ctx, ws[h:])
	if err != nil {
		return nil, err
	}
	return append(a, b...), nil
}

// writeBulk is readmodel.WriteInstances with ESRetry: a transient
// failure of the whole request repeats it, and items that failed
// transiently (429, 5xx) are sent again on their own. A repeated write is
// safe: it carries the same external version, so one that did apply the
// first time answers 409 (conflict, treated as done). Every request is
// reported to Availability.
func (w *Worker) writeBulk(ctx context.Context, ws []readmodel.Write) ([]readmodel.WriteItem, error) {
	out := make([]readmodel.WriteItem, len(ws))
	pending := make([]int, len(ws))
	for i := range pending {
		pending[i] = i
	}
	for n := 0; ; n++ {
		sub := make([]readmodel.Write, len(pending))
		for k, i := range pending {
			sub[k] = ws[i]
		}
		res, err := readmodel.WriteInstances(ctx, w.es, sub)
		if err != nil {
			w.avail.Observe(ctx, err)
		} else {
			w.avail.ObserveItems(ctx, itemOutage(ctx, res))
		}
		if err != nil {
			if n < w.cfg.ESRetry.Tries && readmodel.Transient(ctx, err) && w.cfg.ESRetry.Sleep(ctx, n) == nil {
				continue
			}
			return nil, err
		}
		var again []int
		for k, i := range pending {
			out[i] = res[k]
			if res[k].Err != nil && readmodel.Transient(ctx, res[k].Err) {
				again = append(again, i)
			}
		}
		if len(again) == 0 || n >= w.cfg.ESRetry.Tries || w.cfg.ESRetry.Sleep(ctx, n) != nil {
			return out, nil
		}
		pending = again
	}
}

// itemOutage is the first item of a bulk answer refused as an outage (429,
// 502, 503, 504: the cluster is overloaded although it answers), or nil.
func itemOutage(ctx context.Context, res []readmodel.WriteItem) error {
	for _, r := range res {
		if r.Err != nil && failure.Classify(ctx, r.Err) == failure.Outage {
			return r.Err
		}
	}
	return nil
}

// each runs f(0…n-1) concurrently, at most batchParallelism at once, and
// waits for all of them.
func (w *Worker) each(n int, f func(k int)) {
	if n == 1 {
		f(0)
		return
	}
	sem := make(chan struct{}, batchParallelism)
	var wg sync.WaitGroup
	for k := 0; k < n; k++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			f(k)
		}()
	}
	wg.Wait()
}

// retryLost handles the items of a bulk answered 404 (the index of their db
// was deleted under the worker): for each such db the index is created
// again and its rebuild from the store started (recoverIndex; not when the
// bulk was sent before the index was ensured again: sent holds the
// generation per db at sending), then those writes are sent once more and
// their answers replace res's — twice at most.
func (w *Worker) retryLost(ctx context.Context, ws []readmodel.Write, res []readmodel.WriteItem, sent map[string]uint64) {
	for try := 0; try < 2; try++ {
		var again []int
		recovered := map[string]bool{}
		for k, r := range res {
			if !lostIndex(r.Err) {
				continue
			}
			db := ws[k].Meta.DB
			ok, seen := recovered[db]
			if !seen {
				g, err := w.recoverIndex(ctx, db, sent[db], r.Err)
				ok = err == nil
				recovered[db] = ok
				if ok {
					sent[db] = g
				}
			}
			if ok {
				again = append(again, k)
			}
		}
		if len(again) == 0 {
			return
		}
		sub := make([]readmodel.Write, len(again))
		for j, k := range again {
			sub[j] = ws[k]
		}
		r2, err := w.writeInstances(ctx, sub)
		for j, k := range again {
			if err != nil {
				res[k].Err = err
				continue
			}
			res[k] = r2[j]
		}
		if err != nil {
			return
		}
	}
}

// readInstances reads the instance documents refs in one real-time _mget
// (readmodel.GetInstances), retried on an Elasticsearch outage (esDo).
func (w *Worker) readInstances(ctx context.Context, refs []readmodel.Ref) ([]readmodel.GetResult, error) {
	var got []readmodel.GetResult
	err := w.esDo(ctx, func(ctx context.Context) (err error) {
		got, err = readmodel.GetInstances(ctx, w.es, refs)
		return err
	})
	return got, err
}
