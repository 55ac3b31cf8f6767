package projectionworker_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/projectionworker"
)

// The series of every selected projection (events by result, conflicts by
// reason) and of both bulk results exist at 0 once New returns,
// before any event (issue 23.5).
func TestMetricsSeriesExistAtZeroAfterNew(t *testing.T) {
	e := newEnv(t, 1)
	reg := prometheus.NewRegistry()
	d, closePool := e.deps(reg)
	t.Cleanup(closePool)
	if _, err := projectionworker.New(e.serviceConfig(nil, spec("instances"), spec("history")), d, e.opts()...); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{} // family{labels} → value
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName() + "{"
			for _, lp := range m.GetLabel() {
				key += lp.GetName() + "=" + lp.GetValue() + ","
			}
			got[key+"}"] = m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	var want []string
	for _, p := range []string{"instances", "history"} {
		for _, r := range []string{"applied", "conflict", "retry", "rejected"} {
			want = append(want, "sluice_projection_events_total{projection="+p+",result="+r+",}")
		}
		for _, r := range []string{projectionworker.ReasonExists, projectionworker.ReasonVersion} {
			want = append(want, "sluice_projection_conflicts_total{projection="+p+",reason="+r+",}")
		}
	}
	for _, r := range []string{"ok", "error"} {
		want = append(want, "sluice_projection_bulk_requests_total{result="+r+",}", "sluice_projection_bulk_duration_seconds{result="+r+",}")
	}
	for _, w := range want {
		v, ok := got[w]
		switch {
		case !ok:
			t.Errorf("%s missing right after New", w)
		case v != 0:
			t.Errorf("%s = %v right after New, want 0", w, v)
		}
	}
}
