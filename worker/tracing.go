package worker

// This file holds the runtime's spans (docs/tracing.md): one per record
// from its poll to its offset commit, continuing the record's traceparent
// header, with the batched steps it took part in as children.

import (
	"context"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/shared/tracing"
)

// startSpan starts it's record span (tracing on; from parse, so a record
// polled again after a rebalance gets a fresh one).
func (c *Consumer) startSpan(it *item) {
	r, e := it.rec, it.view.Envelope
	ctx := tracing.FromRecord(context.Background(), r)
	_, it.span = c.tracer.Start(ctx, "process "+r.Topic, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithTimestamp(it.polledAt),
		trace.WithAttributes(semconv.MessagingSystemKafka, semconv.MessagingOperationTypeProcess,
			semconv.MessagingDestinationName(r.Topic), semconv.MessagingConsumerGroupName(c.cfg.Group),
			semconv.MessagingDestinationPartitionID(itoa32(r.Partition)), semconv.MessagingKafkaOffset(int(r.Offset)),
			tracing.AttrHandler.String(c.cfg.HandlerName), tracing.AttrEventID.String(e.EventID),
			tracing.AttrEventType.String(e.EventType), tracing.AttrAggregateID.String(e.AggregateID)))
	it.view.Span = it.span
}

// traceStage records a batched step of items (claim, mark done) in each
// item's trace.
func (c *Consumer) traceStage(items []*item, name string, start time.Time, err error) {
	spans := make([]trace.Span, 0, len(items))
	for _, it := range items {
		spans = append(spans, it.span)
	}
	tracing.Stage(spans, name, start, time.Now(), err, tracing.AttrHandler.String(c.cfg.HandlerName))
}

// traceCommit records the offset commit that covered items and, when it
// succeeded, ends their record spans. Called with c.mu held.
func (c *Consumer) traceCommit(items []*item, start time.Time, err error) {
	c.traceStage(items, "kafka commit offsets", start, err)
	if err != nil {
		return
	}
	for _, it := range items {
		if it.span != nil {
			it.span.SetAttributes(attribute.Bool("sluice.committed", true))
			it.span.End()
			it.span = nil
		}
	}
}

func itoa32(p int32) string {
	return strconv.Itoa(int(p))
}
