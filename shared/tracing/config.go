package tracing

import (
	"strings"

	"github.com/sluicehq/sluice/shared/config"
)

// Config lists the OpenTelemetry variables sluice's tracing reads
// (docs/tracing.md). The OpenTelemetry SDK reads them from the environment
// itself (with the rest of the standard OTEL_* set, which passes through
// untouched); they are declared here to be documented, checked by `sluice
// config check` and, for the headers, read from a file.
type Config struct {
	SDKDisabled    string        `env:"OTEL_SDK_DISABLED" doc:"true turns tracing off whatever else is set."`
	Exporter       string        `env:"OTEL_TRACES_EXPORTER" doc:"Where spans go: otlp, console (stdout) or none. Unset: otlp when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, else none — tracing is off by default."`
	Endpoint       string        `env:"OTEL_EXPORTER_OTLP_ENDPOINT" doc:"OTLP collector base URL (http://otel-collector:4318 for http/protobuf, :4317 for grpc); setting it turns tracing on."`
	TracesEndpoint string        `env:"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" doc:"OTLP traces URL, overriding OTEL_EXPORTER_OTLP_ENDPOINT (the full path, e.g. http://otel-collector:4318/v1/traces)."`
	Protocol       string        `env:"OTEL_EXPORTER_OTLP_PROTOCOL" doc:"OTLP transport: http/protobuf (default) or grpc. OTEL_EXPORTER_OTLP_TRACES_PROTOCOL overrides it for traces."`
	Headers        config.Secret `env:"OTEL_EXPORTER_OTLP_HEADERS" file:"true" doc:"Headers sent to the collector, key=value pairs separated by commas (values URL-encoded), e.g. an API key (never logged)."`
	ServiceName    string        `env:"OTEL_SERVICE_NAME" docDefault:"sluice-{component}" doc:"service.name of the spans; default sluice-api, sluice-relay, sluice-instance-worker, sluice-projection-worker or sluice-dev. OTEL_RESOURCE_ATTRIBUTES adds attributes."`
	Sampler        string        `env:"OTEL_TRACES_SAMPLER" docDefault:"parentbased_always_on" doc:"Sampler: always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio; with a parent-based one a caller's sampled flag decides."`
	SamplerArg     string        `env:"OTEL_TRACES_SAMPLER_ARG" doc:"The sampler's argument: the ratio (0..1) of the traceidratio samplers."`
	TracesProtocol string        `env:"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL" doc:"OTLP transport for traces, overriding OTEL_EXPORTER_OTLP_PROTOCOL."`
}

// Validate checks the values sluice's tracing must understand.
func (t Config) Validate() error {
	k := &config.Checker{}
	if v := strings.ToLower(strings.TrimSpace(t.Exporter)); v != "" {
		first, _, _ := strings.Cut(v, ",")
		k.OneOf("OTEL_TRACES_EXPORTER", strings.TrimSpace(first), "otlp", "console", "none")
	}
	if t.Protocol != "" {
		k.OneOf("OTEL_EXPORTER_OTLP_PROTOCOL", t.Protocol, "http/protobuf", "grpc")
	}
	if t.TracesProtocol != "" {
		k.OneOf("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", t.TracesProtocol, "http/protobuf", "grpc")
	}
	if t.Sampler != "" {
		k.OneOf("OTEL_TRACES_SAMPLER", t.Sampler, "always_on", "always_off", "traceidratio",
			"parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio")
	}
	return k.Err()
}
