package api

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/tracing"
)

// traceRequest starts the server span of a /v1 request (only called with
// tracing on), continuing the caller's traceparent; end records the status
// and ends it.
func (s *server) traceRequest(r *http.Request, route string, sw *statusWriter) (*http.Request, func()) {
	ctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := s.tracer.Start(ctx, route, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(semconv.HTTPRequestMethodKey.String(r.Method), semconv.HTTPRoute(route), semconv.URLPath(r.URL.Path)))
	return r.WithContext(ctx), func() {
		code := sw.status()
		span.SetAttributes(semconv.HTTPResponseStatusCode(code))
		if code >= 500 {
			span.SetStatus(codes.Error, http.StatusText(code))
		}
		span.End()
	}
}

// traceAppend runs the store append of envs in a child span of the
// request's (a plain call with tracing off).
func (s *server) traceAppend(ctx context.Context, envs ...envelope.Envelope) ([]eventstore.Result, error) {
	if s.tracer == nil {
		return s.opts.Store.Append(ctx, envs...)
	}
	ctx, span := s.tracer.Start(ctx, "eventstore append", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(tracing.AttrBatchSize.Int(len(envs))))
	defer span.End()
	if len(envs) == 1 {
		span.SetAttributes(tracing.AttrEventID.String(envs[0].EventID), tracing.AttrCommandID.String(envs[0].Metadata.CommandID()),
			tracing.AttrAggregateID.String(envs[0].AggregateID))
	}
	res, err := s.opts.Store.Append(ctx, envs...)
	if err == nil && len(res) == 1 {
		err = res[0].Err
		if err == nil {
			span.SetAttributes(tracing.AttrPosition.Int64(res[0].Event.Envelope.Position), attribute.Bool("sluice.duplicate", res[0].Duplicate))
		}
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return res, err
}

// setTraceMetadata puts the trace context of a command into its metadata
// (transport metadata, docs/architecture.md#the-envelope): with tracing on the request's span, so the
// relay and the workers continue this trace; off, the caller's
// traceparent and tracestate headers as they came.
func (s *server) setTraceMetadata(r *http.Request, md *envelope.Metadata) {
	if s.tracer != nil {
		if tp, ts := tracing.Traceparent(r.Context()); tp != "" {
			md.SetString(envelope.MetaTraceparent, tp)
			if ts != "" && len(ts) <= 512 && printableASCII(ts) {
				md.SetString(envelope.MetaTracestate, ts)
			}
			return
		}
	}
	copyTraceHeaders(r, md)
}

// copyTraceHeaders puts the caller's traceparent header into md, and with
// it the tracestate header, which belongs to that traceparent; a value too
// long or not printable ASCII is left out.
func copyTraceHeaders(r *http.Request, md *envelope.Metadata) {
	if v := r.Header.Get("Traceparent"); v != "" && len(v) <= 256 && printableASCII(v) {
		md.SetString(envelope.MetaTraceparent, v)
		if ts := r.Header.Get("Tracestate"); ts != "" && len(ts) <= 512 && printableASCII(ts) {
			md.SetString(envelope.MetaTracestate, ts)
		}
	}
}
