// Package tracing provides sluice's OpenTelemetry tracing (docs/tracing.md):
// Setup builds a process's TracerProvider from the standard OTEL_*
// environment variables, off unless they ask for an exporter, and the
// carriers move the W3C trace context (traceparent, tracestate) between a
// context, envelope metadata and Kafka record headers.
//
// Guarantee: with tracing off (a nil or no-op TracerProvider, Enabled
// false) the components skip every tracing step, so nothing is allocated
// and no byte that is stored or published changes; with it on, a stored
// envelope's trace context is only ever replaced by one of the same W3C
// version-00 length (55 bytes) or added where the API measures it against
// the size budget, so the envelope and stored-line limits hold.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Scope is the instrumentation scope of every sluice tracer.
const Scope = "github.com/sluicehq/sluice"

// ErrConfig wraps an OTEL_* setting that cannot be used.
var ErrConfig = errors.New("tracing: invalid OTEL_* setting")

// Provider is the process's tracer provider and its shutdown.
type Provider struct {
	tp       trace.TracerProvider
	shutdown func(context.Context) error
	// Exporter names what spans go to ("none" when off).
	Exporter string
}

// TracerProvider returns the provider components take (a no-op one when
// tracing is off).
func (p *Provider) TracerProvider() trace.TracerProvider { return p.tp }

// Shutdown flushes spans still buffered and stops the exporter.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p.shutdown == nil {
		return nil
	}
	return p.shutdown(ctx)
}

// Setup builds the TracerProvider of service (the default service.name,
// e.g. "sluice-relay"; OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
// override it) from the environment:
//
//   - OTEL_SDK_DISABLED=true: off.
//   - OTEL_TRACES_EXPORTER: otlp, console or none. Unset means otlp when
//     OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is
//     set and none otherwise: tracing is off by default.
//   - OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL: http/protobuf (default) or
//     grpc; the exporters read OTEL_EXPORTER_OTLP_* (endpoint, headers,
//     timeout, compression, certificates) themselves.
//   - OTEL_TRACES_SAMPLER[_ARG] and OTEL_BSP_* are read by the SDK.
//
// An unknown exporter or protocol is an error wrapping ErrConfig.
//
// headers, when not empty, are the OTLP headers (OTEL_EXPORTER_OTLP_HEADERS
// as the configuration read it, possibly from its _FILE), overriding the
// exporters' own reading of the variable.
func Setup(ctx context.Context, service, version, headers string) (*Provider, error) {
	off := &Provider{tp: noop.NewTracerProvider(), Exporter: "none"}
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return off, nil
	}
	name, err := exporterName()
	if err != nil || name == "none" {
		return off, err
	}
	var exp sdktrace.SpanExporter
	switch name {
	case "console":
		exp, err = stdouttrace.New(stdouttrace.WithWriter(io.Writer(os.Stdout)))
	case "otlp":
		proto := firstEnv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
		switch proto {
		case "", "http/protobuf":
			name = "otlp (http/protobuf)"
			var opts []otlptracehttp.Option
			if h := parseHeaders(headers); h != nil {
				opts = append(opts, otlptracehttp.WithHeaders(h))
			}
			exp, err = otlptracehttp.New(ctx, opts...)
		case "grpc":
			name = "otlp (grpc)"
			var opts []otlptracegrpc.Option
			if h := parseHeaders(headers); h != nil {
				opts = append(opts, otlptracegrpc.WithHeaders(h))
			}
			exp, err = otlptracegrpc.New(ctx, opts...)
		default:
			return off, fmt.Errorf("%w: OTEL_EXPORTER_OTLP_PROTOCOL=%q: want http/protobuf or grpc", ErrConfig, proto)
		}
	}
	if err != nil {
		return off, fmt.Errorf("tracing: %s exporter: %w", name, err)
	}
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName(service), semconv.ServiceVersion(version)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil && res == nil {
		return off, fmt.Errorf("%w: resource: %w", ErrConfig, err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Provider{tp: tp, shutdown: tp.Shutdown, Exporter: name}, nil
}

// exporterName resolves OTEL_TRACES_EXPORTER (its first entry; sluice
// exports to one place).
func exporterName() (string, error) {
	v := strings.ToLower(strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")))
	if v == "" {
		if firstEnv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT") != "" {
			return "otlp", nil
		}
		return "none", nil
	}
	first, _, _ := strings.Cut(v, ",")
	switch first = strings.TrimSpace(first); first {
	case "none", "otlp", "console":
		return first, nil
	}
	return "none", fmt.Errorf("%w: OTEL_TRACES_EXPORTER=%q: want otlp, console or none", ErrConfig, v)
}

// parseHeaders parses OTLP headers, key=value pairs separated by commas
// with URL-encoded values (the OTEL_EXPORTER_OTLP_HEADERS form); nil when
// there are none.
func parseHeaders(s string) map[string]string {
	var h map[string]string
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			continue
		}
		if u, err := url.PathUnescape(strings.TrimSpace(v)); err == nil {
			v = u
		}
		if h == nil {
			h = map[string]string{}
		}
		h[k] = strings.TrimSpace(v)
	}
	return h
}

func firstEnv(keys ...string) string {
	for _, k := range keys {
		if v := strings.TrimSpace(os.Getenv(k)); v != "" {
			return v
		}
	}
	return ""
}

// Enabled reports whether tp records spans: false for nil and the no-op
// provider, which components then skip entirely.
func Enabled(tp trace.TracerProvider) bool {
	switch tp.(type) {
	case nil, noop.TracerProvider, *noop.TracerProvider:
		return false
	}
	return true
}

// Tracer returns sluice's tracer of tp, or nil when tracing is off
// (Enabled false): components test for nil and skip.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if !Enabled(tp) {
		return nil
	}
	return tp.Tracer(Scope)
}

// Attribute keys sluice puts on its spans (besides semconv's).
const (
	AttrEventID     = attribute.Key("sluice.event_id")
	AttrEventType   = attribute.Key("sluice.event_type")
	AttrAggregateID = attribute.Key("sluice.aggregate_id")
	AttrCommandID   = attribute.Key("sluice.command_id")
	AttrPosition    = attribute.Key("sluice.position")
	AttrHandler     = attribute.Key("sluice.handler")
	AttrBatchSize   = attribute.Key("sluice.batch_size")
	AttrOutcome     = attribute.Key("sluice.outcome")
)

// Stage records one finished step that each span in parents took part in
// as a child span named name, from start to end: batched work (a registry
// claim, an Elasticsearch _bulk, an offset commit) shared by several
// records shows in each record's trace. Nil and non-recording parents are
// skipped; err marks the children failed.
func Stage(parents []trace.Span, name string, start, end time.Time, err error, attrs ...attribute.KeyValue) {
	for _, p := range parents {
		if p == nil || !p.IsRecording() {
			continue
		}
		ctx := trace.ContextWithSpan(context.Background(), p)
		_, s := p.TracerProvider().Tracer(Scope).Start(ctx, name, trace.WithTimestamp(start),
			trace.WithAttributes(attrs...), trace.WithAttributes(AttrBatchSize.Int(len(parents))))
		if err != nil {
			s.RecordError(err)
			s.SetStatus(codes.Error, err.Error())
		}
		s.End(trace.WithTimestamp(end))
	}
}

// StartChild starts a child span of parent (the record span a consumer
// hands its handler) with the same tracer; (ctx, nil) when parent is nil
// or not recording.
func StartChild(ctx context.Context, parent trace.Span, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if parent == nil || !parent.IsRecording() {
		return ctx, nil
	}
	return parent.TracerProvider().Tracer(Scope).Start(trace.ContextWithSpan(ctx, parent), name, opts...)
}

// End ends span (when not nil), recording err.
func End(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
