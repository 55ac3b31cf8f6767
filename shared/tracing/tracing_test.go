package tracing

import (
	"context"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sluicehq/sluice/shared/envelope"
)

// TestSetupFromEnvironment: off by default, on when an exporter or an
// OTLP endpoint is named, and a setting it cannot use is an error.
func TestSetupFromEnvironment(t *testing.T) {
	cases := []struct {
		name    string
		env     map[string]string
		want    string
		wantErr bool
	}{
		{"nothing set: off", nil, "none", false},
		{"endpoint: otlp over http", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, "otlp (http/protobuf)", false},
		{"traces endpoint, grpc", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "otlp (grpc)", false},
		{"exporter otlp", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, "otlp (http/protobuf)", false},
		{"console", map[string]string{"OTEL_TRACES_EXPORTER": "console"}, "console", false},
		{"none wins over an endpoint", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"}, "none", false},
		{"sdk disabled", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, "none", false},
		{"unknown exporter", map[string]string{"OTEL_TRACES_EXPORTER": "jaeger"}, "none", true},
		{"unknown protocol", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "none", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, k := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
				"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
				t.Setenv(k, c.env[k])
			}
			p, err := Setup(context.Background(), "sluice-test", "v0", "authorization=Bearer%20x")
			if (err != nil) != c.wantErr || (err != nil && !errors.Is(err, ErrConfig)) {
				t.Fatalf("err %v, want error %v (ErrConfig)", err, c.wantErr)
			}
			defer p.Shutdown(context.Background())
			if p.Exporter != c.want {
				t.Errorf("exporter %q, want %q", p.Exporter, c.want)
			}
			if on := Enabled(p.TracerProvider()); on != (c.want != "none") {
				t.Errorf("Enabled %v with exporter %q", on, p.Exporter)
			}
		})
	}
}

func TestEnabled(t *testing.T) {
	if Enabled(nil) || Enabled(noop.NewTracerProvider()) || Tracer(nil) != nil {
		t.Error("nil or no-op provider counted as on")
	}
	if !Enabled(sdktrace.NewTracerProvider()) {
		t.Error("SDK provider counted as off")
	}
}

// TestCarriers: metadata → context → Kafka headers, and a domain event's
// traceparent is replaced only by one no longer than it.
func TestCarriers(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	var md envelope.Metadata
	md.SetString(envelope.MetaTraceparent, tp)
	md.SetString(envelope.MetaTracestate, "vendor=1")
	ctx := FromMetadata(context.Background(), md)
	sc := trace.SpanContextFromContext(ctx)
	if sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || !sc.IsRemote() || sc.TraceState().String() != "vendor=1" {
		t.Fatalf("extracted %v", sc)
	}
	rec := &kgo.Record{Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-old")}}}
	SetRecord(ctx, rec)
	if got := FromRecord(context.Background(), rec); trace.SpanContextFromContext(got).SpanID() != sc.SpanID() {
		t.Errorf("record headers %v", rec.Headers)
	}
	if n := len(rec.Headers); n != 2 {
		t.Errorf("%d headers, want traceparent replaced and tracestate added: %v", n, rec.Headers)
	}

	sr := tracetest.NewSpanRecorder()
	prov := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	sctx, span := prov.Tracer("t").Start(ctx, "x")
	defer span.End()
	cases := []struct {
		name, before string
		want         func(after string) bool
	}{
		{"none: not added", "", func(a string) bool { return a == "" }},
		{"version 00: replaced, same length", tp, func(a string) bool { return len(a) == len(tp) && a != tp }},
		{"shorter: kept", "00-short", func(a string) bool { return a == "00-short" }},
	}
	for _, c := range cases {
		var m envelope.Metadata
		if c.before != "" {
			m.SetString(envelope.MetaTraceparent, c.before)
		}
		ReplaceTraceparent(sctx, &m)
		if after := m.Traceparent(); !c.want(after) {
			t.Errorf("%s: %q → %q", c.name, c.before, after)
		}
	}
}
