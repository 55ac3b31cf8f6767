package eventstore

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Every stage and outcome series exists at 0 once the store is created,
// before its first append (issue 23.5: panels stayed empty and increase()
// alerts missed the first event).
func TestMetricsSeriesExistAtZeroAfterNew(t *testing.T) {
	e := newEnv(t)
	s := e.store(t, testConfig())
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s.Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{} // family{label=value} → value (a histogram's count)
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				got[mf.GetName()+"{"+lp.GetName()+"="+lp.GetValue()+"}"] = m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	var want []string
	for _, st := range []string{"gather", "reserve", "put", "commit"} {
		want = append(want, "sluice_eventstore_stage_duration_seconds{stage="+st+"}")
	}
	for _, o := range []string{"stored", "duplicate", "conflict", "invalid", "slot", "mismatch", "unavailable", "error"} {
		want = append(want, "sluice_eventstore_appends_total{outcome="+o+"}")
	}
	want = append(want, "sluice_eventstore_head_lock_wait_seconds{shard=0}")
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
