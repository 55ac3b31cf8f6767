package worker

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/kafka"
)

// Every series whose label values are known at start exists at 0 as soon
// as New returns, before the first record (issue 23.5: the DLQ, retry,
// outcome and outage panels stayed empty until first use, and an
// increase() alert cannot fire on a series' first sample).
func TestMetricsSeriesExistAtZeroAfterNew(t *testing.T) {
	brokers, topic, _ := oneTopic(t, "zero.")
	reg := prometheus.NewRegistry()
	c, err := New(Config{Kafka: kafka.Config{Brokers: brokers}, Topic: topic, Group: topic + "-g", DLQTopic: topic + ".dlq", HandlerName: "h",
		Policy: claim.SkipStale}, Deps{Registry: realRegistry(t, "w1", 10*time.Second), Handler: batchFunc(nil), Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Client().Close)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]float64{} // family → "label=value" → value
	for _, mf := range mfs {
		got[mf.GetName()] = map[string]float64{}
		for _, m := range mf.GetMetric() {
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
			for _, lp := range m.GetLabel() {
				if lp.GetName() != "handler" {
					got[mf.GetName()][lp.GetName()+"="+lp.GetValue()] = v
				}
			}
			if len(m.GetLabel()) == 1 {
				got[mf.GetName()][""] = v
			}
			checkHandlerLabel(t, mf.GetName(), m)
		}
	}
	tests := []struct {
		family string
		series []string
	}{
		{"sluice_worker_records_total", []string{"outcome=applied", "outcome=rejected", "outcome=conflict", "outcome=ignored",
			"outcome=duplicate", "outcome=stale", "outcome=dead", "outcome=parse_error"}},
		{"sluice_worker_retries_total", []string{"reason=failed", "reason=wait", "reason=in_progress", "reason=retry_later",
			"reason=outage", "reason=lease_lost", "reason=claim_error", "reason=batch_invalid", "reason=batch_aborted",
			"reason=dlq_produce", "reason=dlq_too_large"}},
		{"sluice_worker_dlq_records_total", []string{"error_class=parse", "error_class=permanent", "error_class=retryable"}},
		{"sluice_worker_registry_outage", []string{""}},
		{"sluice_worker_dependency_outage", []string{"dependency=registry", "dependency=elasticsearch", "dependency=objectstore",
			"dependency=postgres", "dependency=kafka", "dependency=unknown"}},
		{"sluice_worker_outage_probes_total", []string{"dependency=registry", "dependency=elasticsearch", "dependency=objectstore",
			"dependency=postgres", "dependency=kafka", "dependency=unknown"}},
		{"sluice_worker_paused", []string{""}},
		{"sluice_worker_handler_panics_total", []string{"call=handle", "call=handle_batch", "call=heal"}},
		{"sluice_worker_dlq_truncated_total", []string{"reason=size", "reason=too_large"}},
		{"sluice_worker_stage_duration_seconds", []string{"stage=claim", "stage=handle", "stage=mark_done", "stage=dlq",
			"stage=commit", "stage=end_to_end"}},
		{"sluice_worker_offset_commits_total", []string{""}},
	}
	for _, tc := range tests {
		for _, s := range tc.series {
			v, ok := got[tc.family][s]
			switch {
			case !ok:
				t.Errorf("%s{handler=\"h\",%s} missing right after New", tc.family, s)
			case v != 0:
				t.Errorf("%s{handler=\"h\",%s} = %v right after New, want 0", tc.family, s, v)
			}
		}
	}
}

// checkHandlerLabel fails unless m carries handler="h".
func checkHandlerLabel(t *testing.T, family string, m *dto.Metric) {
	t.Helper()
	for _, lp := range m.GetLabel() {
		if lp.GetName() == "handler" && lp.GetValue() == "h" {
			return
		}
	}
	t.Errorf("%s: a series without handler=\"h\": %v", family, m.GetLabel())
}
