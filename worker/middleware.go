package worker

import (
	"context"
	"runtime/debug"

	"github.com/sluicehq/sluice/shared/claim"
)

// guarded is the runtime's handler middleware: every call of the worker's
// Handle, HandleBatch and Heal runs under recover(), so a panicking handler
// becomes a retryable *PanicError (its stack in the log) for the records of
// that call, then a dead letter once the retry budget is spent, instead of
// crashing the process (which would restart, re-run the same record and
// crash again). A panic in a goroutine the handler starts itself is out of
// its reach.
type guarded struct {
	c      *Consumer
	h      Handler
	batch  BatchHandler // nil when the handler has no HandleBatch
	healer Healer       // nil when the handler has no Heal
}

func newGuarded(c *Consumer, h Handler) *guarded {
	g := &guarded{c: c, h: h}
	g.batch, _ = h.(BatchHandler)
	g.healer, _ = h.(Healer)
	return g
}

// recovered turns a panic value into a *PanicError and logs it with its
// stack; what names the call.
func (g *guarded) recovered(v any, what string, rec *Record) error {
	return g.recoveredStack(v, debug.Stack(), what, rec)
}

// recoveredStack is recovered with the stack taken where the panic was
// recovered.
func (g *guarded) recoveredStack(v any, stack []byte, what string, rec *Record) error {
	args := []any{"handler", g.c.cfg.HandlerName, "call", what, "panic", v, "stack", string(stack)}
	if rec != nil {
		args = append(args, "topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset, "event_id", rec.Envelope.EventID)
	}
	g.c.deps.Logger.Error("handler panicked", args...)
	g.c.m.panics.WithLabelValues(g.c.cfg.HandlerName, what).Inc()
	return &PanicError{Value: v, Stack: stack}
}

func (g *guarded) Handle(ctx context.Context, rec *Record) (out claim.Outcome, err error) {
	defer func() {
		if v := recover(); v != nil {
			out, err = claim.Outcome{}, g.recovered(v, "handle", rec)
		}
	}()
	return g.h.Handle(ctx, rec)
}

// HandleBatch isolates a panicking record: when a call of several records
// panics, the batch is split in halves and each half handled again, down to
// the single record that panics, which alone is answered with the panic.
// The others are handled normally (handlers are idempotent under their
// claims, so repeating the ones a panicking call already touched is safe),
// so one poison record never spends the retry budget of its batch mates.
func (g *guarded) HandleBatch(ctx context.Context, recs []*Record) []BatchResult {
	res, v, stack, ok := g.tryBatch(ctx, recs)
	if ok {
		return res
	}
	if len(recs) == 1 || ctx.Err() != nil {
		var rec *Record
		if len(recs) == 1 {
			rec = recs[0]
		}
		err := g.recoveredStack(v, stack, "handle_batch", rec)
		res = make([]BatchResult, len(recs))
		for i := range res {
			res[i].Err = err
		}
		return res
	}
	g.c.deps.Logger.Warn("batch handler panicked; splitting the batch to isolate the record", "handler", g.c.cfg.HandlerName,
		"records", len(recs), "panic", v)
	mid := len(recs) / 2
	return append(g.HandleBatch(ctx, recs[:mid]), g.HandleBatch(ctx, recs[mid:])...)
}

// tryBatch calls HandleBatch, reporting a panic (its value and stack)
// instead of propagating it.
func (g *guarded) tryBatch(ctx context.Context, recs []*Record) (res []BatchResult, v any, stack []byte, ok bool) {
	defer func() {
		if r := recover(); r != nil {
			res, v, stack, ok = nil, r, debug.Stack(), false
		}
	}()
	return g.batch.HandleBatch(ctx, recs), nil, nil, true
}

func (g *guarded) Heal(ctx context.Context, rec *Record, wait claim.Result) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = g.recovered(v, "heal", rec)
		}
	}()
	return g.healer.Heal(ctx, rec, wait)
}
