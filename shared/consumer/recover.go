package consumer

import (
	"context"
	"runtime/debug"

	"github.com/sluicehq/sluice/registry"
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
	stack := debug.Stack()
	args := []any{"handler", g.c.o.HandlerName, "call", what, "panic", v, "stack", string(stack)}
	if rec != nil {
		args = append(args, "topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset, "event_id", rec.Envelope.EventID)
	}
	g.c.o.Logger.Error("handler panicked", args...)
	g.c.m.panics.WithLabelValues(g.c.o.HandlerName, what).Inc()
	return &PanicError{Value: v, Stack: stack}
}

func (g *guarded) Handle(ctx context.Context, rec *Record) (out registry.Outcome, err error) {
	defer func() {
		if v := recover(); v != nil {
			out, err = registry.Outcome{}, g.recovered(v, "handle", rec)
		}
	}()
	return g.h.Handle(ctx, rec)
}

// HandleBatch answers every record of a panicking call with the panic.
func (g *guarded) HandleBatch(ctx context.Context, recs []*Record) (res []BatchResult) {
	defer func() {
		if v := recover(); v != nil {
			err := g.recovered(v, "handle_batch", nil)
			res = make([]BatchResult, len(recs))
			for i := range res {
				res[i].Err = err
			}
		}
	}()
	return g.batch.HandleBatch(ctx, recs)
}

func (g *guarded) Heal(ctx context.Context, rec *Record, wait registry.ClaimResult) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = g.recovered(v, "heal", rec)
		}
	}()
	return g.healer.Heal(ctx, rec, wait)
}
