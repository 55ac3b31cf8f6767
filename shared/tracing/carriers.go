package tracing

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/shared/envelope"
)

// w3c is the W3C trace-context propagator (traceparent, tracestate); it
// holds no state.
var w3c propagation.TraceContext

// mdCarrier reads the trace context from envelope metadata and writes
// into a pair of strings.
type mdCarrier struct {
	md                      envelope.Metadata
	traceparent, tracestate string
}

func (c *mdCarrier) Get(key string) string {
	if c.md != nil {
		v, _ := c.md.String(key)
		return v
	}
	return ""
}

func (c *mdCarrier) Set(key, value string) {
	switch key {
	case envelope.MetaTraceparent:
		c.traceparent = value
	case envelope.MetaTracestate:
		c.tracestate = value
	}
}

func (c *mdCarrier) Keys() []string {
	return []string{envelope.MetaTraceparent, envelope.MetaTracestate}
}

// FromMetadata returns ctx with the remote span context stored in md's
// traceparent and tracestate (ctx unchanged when there is none or it is
// not valid W3C).
func FromMetadata(ctx context.Context, md envelope.Metadata) context.Context {
	if md.Traceparent() == "" {
		return ctx
	}
	return w3c.Extract(ctx, &mdCarrier{md: md})
}

// Traceparent returns the traceparent and tracestate of ctx's span ("" when
// it has no valid span context).
func Traceparent(ctx context.Context) (traceparent, tracestate string) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return "", ""
	}
	c := &mdCarrier{}
	w3c.Inject(ctx, c)
	return c.traceparent, c.tracestate
}

// SetMetadata writes ctx's span context into md (traceparent, and
// tracestate when it has one); nothing when ctx has no valid span context.
func SetMetadata(ctx context.Context, md *envelope.Metadata) {
	tp, ts := Traceparent(ctx)
	if tp == "" {
		return
	}
	md.SetString(envelope.MetaTraceparent, tp)
	if ts != "" {
		md.SetString(envelope.MetaTracestate, ts)
	}
}

// ReplaceTraceparent sets md's traceparent to ctx's span when md already
// has one: a domain event carries its own span on without growing past the
// size the API measured for it (a version-00 traceparent is always 55
// bytes; a longer one of a later version only shrinks). tracestate stays.
func ReplaceTraceparent(ctx context.Context, md *envelope.Metadata) {
	old := md.Traceparent()
	if old == "" {
		return
	}
	if tp, _ := Traceparent(ctx); tp != "" && len(tp) <= len(old) {
		md.SetString(envelope.MetaTraceparent, tp)
	}
}

// recordCarrier adapts a Kafka record's headers.
type recordCarrier struct{ r *kgo.Record }

func (c recordCarrier) Get(key string) string {
	for i := len(c.r.Headers) - 1; i >= 0; i-- {
		if c.r.Headers[i].Key == key {
			return string(c.r.Headers[i].Value)
		}
	}
	return ""
}

func (c recordCarrier) Set(key, value string) {
	for i := range c.r.Headers {
		if c.r.Headers[i].Key == key {
			c.r.Headers[i].Value = []byte(value)
			return
		}
	}
	c.r.Headers = append(c.r.Headers, kgo.RecordHeader{Key: key, Value: []byte(value)})
}

func (c recordCarrier) Keys() []string {
	out := make([]string, len(c.r.Headers))
	for i, h := range c.r.Headers {
		out[i] = h.Key
	}
	return out
}

// FromRecord returns ctx with the remote span context of r's traceparent
// and tracestate headers.
func FromRecord(ctx context.Context, r *kgo.Record) context.Context {
	return w3c.Extract(ctx, recordCarrier{r})
}

// SetRecord writes ctx's span context into r's traceparent and tracestate
// headers, replacing the ones there.
func SetRecord(ctx context.Context, r *kgo.Record) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		w3c.Inject(ctx, recordCarrier{r})
	}
}
