package main

import (
	"bytes"
	"context"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/pipeline/sluiceconfig"
	"github.com/sluicehq/sluice/shared/observability"
)

// The first scrape of `sluice dev` (API, relay, instance worker, projection
// worker and event store on one registry) already holds sluice_build_info
// and, at 0, the series a dashboard or alert reads before any traffic (DLQ
// counts per class, parked records per reason, retries per reason,
// outcomes, outages); every series is sluice_* apart from the client
// library's own (Go runtime, process, promhttp handler) (issue 23.5).
func TestDevFirstScrape(t *testing.T) {
	t.Setenv("DATABASE_URL", testenv.NewDatabase(t))
	t.Setenv("EVENT_STORE_BACKEND", "")
	metricsAddr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	t.Setenv("SLUICE_HTTP_ADDR", metricsAddr)
	t.Setenv("SLUICE_API_ADDR", "127.0.0.1:"+strconv.Itoa(testenv.FreePort(t)))
	t.Setenv("SLUICE_LOG_LEVEL", "warn")
	cfg, err := sluiceconfig.FromOS()
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	logger, err := observability.NewLogger(&errb, "text", "warn")
	if err != nil {
		t.Fatal(err)
	}
	f := devFlags{dataDir: t.TempDir(), esAddr: "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)),
		kafkaAddr: "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runDev(ctx, &out, cfg, logger, f) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("dev: %v", err)
		}
	})

	// The metrics server starts after every component is built: its first
	// answer is the first scrape.
	var body []byte
	testenv.WaitFor(t, 2*time.Minute, "the metrics endpoint", func() bool {
		select {
		case err := <-done:
			t.Fatalf("dev stopped: %v\n%s\n%s", err, out.String(), errb.String())
		default:
		}
		resp, err := http.Get("http://" + metricsAddr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		if _, err := b.ReadFrom(resp.Body); err != nil || resp.StatusCode != http.StatusOK {
			return false
		}
		body = b.Bytes()
		return true
	})
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{} // family{label=value,…} (sorted labels) → value
	for name, mf := range mfs {
		if !strings.HasPrefix(name, "sluice_") && !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") &&
			!strings.HasPrefix(name, "promhttp_") {
			t.Errorf("metric %s lacks the sluice_ prefix", name)
		}
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, lp := range m.GetLabel() {
				ls = append(ls, lp.GetName()+"="+lp.GetValue())
			}
			got[name+"{"+strings.Join(ls, ",")+"}"] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	h := "handler=" + instanceworker.HandlerName
	tests := []struct {
		series string
		want   float64
	}{
		{"sluice_build_info{commit=" + commit + ",go_version=" + runtime.Version() + ",version=" + version + "}", 1},
		{"sluice_worker_dlq_records_total{error_class=permanent," + h + "}", 0},
		{"sluice_worker_dlq_records_total{error_class=retryable," + h + "}", 0},
		{"sluice_worker_dlq_records_total{error_class=parse," + h + "}", 0},
		{"sluice_worker_retries_total{" + h + ",reason=outage}", 0},
		{"sluice_worker_retries_total{" + h + ",reason=lease_lost}", 0},
		{"sluice_worker_records_total{" + h + ",outcome=applied}", 0},
		{"sluice_worker_records_total{" + h + ",outcome=dead}", 0},
		{"sluice_worker_registry_outage{" + h + "}", 0},
		{"sluice_worker_dependency_outage{dependency=elasticsearch," + h + "}", 0},
		{"sluice_relay_parked_total{reason=too_large,relay=" + cfg.Relay.Name + ",shard=0}", 0},
		{"sluice_relay_parked_total{reason=rejected,relay=" + cfg.Relay.Name + ",shard=0}", 0},
		{"sluice_relay_gap_resolutions_total{relay=" + cfg.Relay.Name + ",resolution=abandoned,shard=0}", 0},
		{"sluice_relay_objectstore_errors_total{class=outage,op=list,relay=" + cfg.Relay.Name + ",shard=0}", 0},
		{"sluice_eventstore_appends_total{outcome=conflict}", 0},
		{"sluice_projection_events_total{projection=history,result=rejected}", 0},
	}
	for _, tc := range tests {
		v, ok := got[tc.series]
		switch {
		case !ok:
			t.Errorf("%s missing from the first scrape", tc.series)
		case v != tc.want:
			t.Errorf("%s = %v in the first scrape, want %v", tc.series, v, tc.want)
		}
	}
}
