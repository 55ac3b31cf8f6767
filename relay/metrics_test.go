package relay

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The relay's metrics carry the sluice_ prefix like every other sluice
// metric, and every labelled series whose label values are known at start
// (the topics it publishes to, gap resolutions, cycle plans, park reasons,
// object-store operations × failure classes) exists at 0 as soon as New
// returns (issue 23.5: relay_* lacked the prefix; parked and gap panels
// stayed empty until first use and increase() alerts missed the first
// event).
func TestMetricsPrefixedAndAtZeroAfterNew(t *testing.T) {
	e := newEnv(t, 30*time.Second)
	reg := prometheus.NewRegistry()
	o := e.opts(t)
	o.Deps.Registerer = reg
	o.Config.Routes = map[string]TopicRoute{"billing": {Events: e.prefix + "billing-events"}}
	r, err := o.new()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]float64{} // family → labels (without relay and shard) → value
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "sluice_relay_") {
			t.Errorf("metric %s lacks the sluice_relay_ prefix", mf.GetName())
		}
		got[mf.GetName()] = map[string]float64{}
		for _, m := range mf.GetMetric() {
			var ls []string
			shard := ""
			for _, lp := range m.GetLabel() {
				switch lp.GetName() {
				case "relay":
				case "shard":
					shard = lp.GetValue()
				default:
					ls = append(ls, lp.GetName()+"="+lp.GetValue())
				}
			}
			if shard != "0" {
				t.Errorf("%s{%s}: shard label %q, want \"0\" (a store of one shard)", mf.GetName(), strings.Join(ls, ","), shard)
			}
			got[mf.GetName()][strings.Join(ls, ",")] = m.GetCounter().GetValue()
		}
	}
	tests := []struct {
		family string
		series []string
	}{
		{"sluice_relay_published_total", []string{"topic=" + e.commandsTopic(), "topic=" + e.eventsTopic(), "topic=" + e.prefix + "billing-events"}},
		{"sluice_relay_gap_resolutions_total", []string{"resolution=committed_direct", "resolution=repaired_committed",
			"resolution=abandoned", "resolution=no_index_row", "resolution=expired", "resolution=late_published"}},
		{"sluice_relay_cycles_total", []string{"plan=list", "plan=index", "plan=hint", "plan=idle"}},
		{"sluice_relay_notifications_total", []string{"kind=committed", "kind=reserved", "kind=abandoned", "kind=resync"}},
		{"sluice_relay_parked_total", []string{"reason=too_large", "reason=invalid_topic", "reason=topic_collision", "reason=rejected"}},
		{"sluice_relay_objectstore_errors_total", []string{"class=outage,op=list", "class=permanent,op=list", "class=unknown,op=list",
			"class=outage,op=get", "class=permanent,op=get", "class=unknown,op=get",
			"class=outage,op=checkpoint", "class=permanent,op=checkpoint", "class=unknown,op=checkpoint"}},
		{"sluice_relay_parked_records", []string{""}},
		{"sluice_relay_lag", []string{""}},
		{"sluice_relay_objectstore_stalled", []string{""}},
	}
	for _, tc := range tests {
		for _, s := range tc.series {
			v, ok := got[tc.family][s]
			switch {
			case !ok:
				t.Errorf("%s{%s} missing right after New", tc.family, s)
			case v != 0:
				t.Errorf("%s{%s} = %v right after New, want 0", tc.family, s, v)
			}
		}
	}
}
