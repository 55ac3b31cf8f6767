package relay

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/shared/recordformat"
	"github.com/sluicehq/sluice/shared/tracing"
)

// startPublish starts the producer span of rec (only with tracing on): a
// child of the trace context the stored event carries (the record's
// traceparent header, copied from its metadata by Router.Record in both
// record formats), or a new trace when it carries none. The record's
// headers then name this span, so the workers continue from the publish.
// The record's value is not touched.
func startPublish(ctx context.Context, t trace.Tracer, rec *kgo.Record, pos int64) trace.Span {
	ctx = tracing.FromRecord(context.WithoutCancel(ctx), rec)
	ctx, span := t.Start(ctx, "publish "+rec.Topic, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(semconv.MessagingSystemKafka, semconv.MessagingOperationTypeSend,
			semconv.MessagingDestinationName(rec.Topic), tracing.AttrPosition.Int64(pos),
			tracing.AttrEventID.String(recordformat.EventID(rec.Headers)), tracing.AttrEventType.String(recordformat.EventType(rec.Headers))))
	tracing.SetRecord(ctx, rec)
	return span
}

// endPublish ends a producer span at the broker's acknowledgement.
func endPublish(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
