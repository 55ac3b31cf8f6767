package sluiceconfig

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/shared/config"
)

// TestTracingVariables: the OTEL_* values sluice's tracing cannot use are
// refused naming the variable; the rest of the OTEL_* set, read by the
// SDK, is not taken for a typo; the OTLP headers can come from a file.
func TestTracingVariables(t *testing.T) {
	base := map[string]string{"DATABASE_URL": "postgres://u:p@localhost:5432/db"}
	cases := []struct {
		name    string
		env     map[string]string
		wantVar string // "" = accepted
	}{
		{"off by default", nil, ""},
		{"otlp over grpc", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, ""},
		{"SDK variables pass", map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "5000", "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod", "OTEL_BSP_MAX_QUEUE_SIZE": "4096"}, ""},
		{"unknown exporter", map[string]string{"OTEL_TRACES_EXPORTER": "jaeger"}, "OTEL_TRACES_EXPORTER"},
		{"unknown protocol", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{"unknown sampler", map[string]string{"OTEL_TRACES_SAMPLER": "sometimes"}, "OTEL_TRACES_SAMPLER"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range base {
				env[k] = v
			}
			for k, v := range c.env {
				env[k] = v
			}
			_, err := Check(env)
			if c.wantVar == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ve *config.VarError
			if !errors.As(err, &ve) || ve.Var != c.wantVar {
				t.Fatalf("got %v, want an error naming %s", err, c.wantVar)
			}
		})
	}
	dir := t.TempDir() + "/headers"
	if err := os.WriteFile(dir, []byte("api-key=s3cr3t\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"DATABASE_URL": base["DATABASE_URL"], "OTEL_EXPORTER_OTLP_HEADERS_FILE": dir}
	cfg, err := Check(env)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Tracing.Headers.Value(); got != "api-key=s3cr3t" {
		t.Errorf("headers from file %q", got)
	}
	if strings.Contains(cfg.Tracing.Headers.String(), "s3cr3t") {
		t.Error("the headers print their value")
	}
}
