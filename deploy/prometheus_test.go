package deploy_test

import (
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	sigsyaml "sigs.k8s.io/yaml"
)

// rulesFile is the plain Prometheus rule file; the base kustomization ships
// the same groups as a PrometheusRule.
const rulesFile = "prometheus/sluice-alerts.yaml"

// runbookBase is what every alert's runbook_url starts with; the anchor is
// alert-<alertname in lower case>.
const runbookBase = "https://github.com/sluicehq/sluice/blob/main/docs/operations.md#alert-"

// metricOpts finds the name of every collector sluice defines:
// prometheus.{Counter,Gauge,Histogram,Summary}Opts{… Name: "…" …}.
var metricOpts = regexp.MustCompile(`(?s)\b(Counter|Gauge|Histogram|Summary)Opts\{(.{0,400}?)\bName:\s*"([^"]+)"`)

// definedMetrics returns the series names the sluice code defines (read
// from the Go sources of the module, tests left out), histogram and summary
// suffixes included.
func definedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != ".." && (strings.HasPrefix(n, ".") || n == "testdata" || n == "vendor" || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range metricOpts.FindAllStringSubmatch(string(src), -1) {
			if strings.Contains(m[2], "Opts{") {
				continue // the Name belongs to a later Opts literal
			}
			kind, name := m[1], m[3]
			names[name] = true
			switch kind {
			case "Histogram":
				names[name+"_bucket"], names[name+"_sum"], names[name+"_count"] = true, true, true
			case "Summary":
				names[name+"_sum"], names[name+"_count"] = true, true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The scan must find the collectors of every component, or the checks
	// below would pass on nothing.
	for _, want := range []string{"build_info", "api_requests_total", "eventstore_appends_total",
		"relay_lag", "worker_dlq_records_total", "projection_events_total"} {
		found := false
		for n := range names {
			found = found || strings.HasSuffix(n, want)
		}
		if !found {
			t.Fatalf("the metric scan found no *%s (found %d names): fix definedMetrics", want, len(names))
		}
	}
	return names
}

// Every metric sluice defines carries the sluice_ prefix (issue 23.5: the
// relay's were relay_*), so one scrape selector or recording rule matches
// them all.
func TestMetricNamesHaveSluicePrefix(t *testing.T) {
	var bad []string
	for n := range definedMetrics(t) {
		if !strings.HasPrefix(n, "sluice_") {
			bad = append(bad, n)
		}
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		t.Errorf("metrics without the sluice_ prefix: %s", strings.Join(bad, ", "))
	}
}

// parseRules parses a rule file's content with Prometheus' own rule parser
// (rulefmt: unknown fields refused, every expression and template checked).
func parseRules(t *testing.T, where string, content []byte) *rulefmt.RuleGroups {
	t.Helper()
	rgs, errs := rulefmt.Parse(content, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Errorf("%s: %v", where, err)
	}
	if rgs == nil || len(rgs.Groups) == 0 {
		t.Fatalf("%s: no rule groups", where)
	}
	return rgs
}

// The alert rules parse with Prometheus' rule and PromQL parsers, as a
// plain rule file and as the PrometheusRule of every kustomize overlay
// (the same groups); they cover the conditions issue 23.5 names; every
// metric an expression reads is one sluice defines (a renamed metric
// silences an alert for good otherwise); every alert has a severity and a
// runbook_url into docs/operations.md#alert-<name>, where that anchor is.
func TestAlertRules(t *testing.T) {
	content, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	plain := parseRules(t, rulesFile, content)
	defined := definedMetrics(t)
	p := parser.NewParser(parser.Options{})

	var alerts []string
	for _, g := range plain.Groups {
		for _, r := range g.Rules {
			where := rulesFile + ": " + g.Name + "/" + r.Alert
			if r.Alert == "" {
				t.Errorf("%s: a recording rule (%s); only alerts belong here", where, r.Record)
				continue
			}
			alerts = append(alerts, r.Alert)
			if !strings.HasPrefix(r.Alert, "Sluice") {
				t.Errorf("%s: alert names start with Sluice", where)
			}
			if want := runbookBase + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
				t.Errorf("%s: runbook_url %q, want %q", where, r.Annotations["runbook_url"], want)
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("%s: severity %q, want critical or warning", where, s)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: summary and description annotations are required", where)
			}
			expr, err := p.ParseExpr(r.Expr)
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			read := 0
			parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
				vs, ok := n.(*parser.VectorSelector)
				if !ok {
					return nil
				}
				read++
				name := vs.Name
				for _, m := range vs.LabelMatchers {
					if m.Name == model.MetricNameLabel {
						name = m.Value
					}
				}
				if !defined[name] {
					t.Errorf("%s reads %q, a metric sluice does not define", where, name)
				}
				return nil
			})
			if read == 0 {
				t.Errorf("%s: the expression reads no metric", where)
			}
		}
	}
	// Each runbook_url lands on its section: docs/operations.md has the
	// anchor.
	ops, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range alerts {
		if anchor := `<a id="alert-` + strings.ToLower(a) + `"></a>`; !strings.Contains(string(ops), anchor) {
			t.Errorf("%s: docs/operations.md has no runbook %s", a, anchor)
		}
	}
	for _, want := range []string{"SluiceRelayStalled", "SluiceRelayLagging", "SluiceConsumerLagGrowing", "SluiceDeadLettersGrowing",
		"SluiceRelayRecordsParked", "SluiceRegistryOutage", "SluiceDependencyOutage", "SluiceLeaseExpiries", "SluiceProjectionRebuildStuck"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("%s: no alert %s", rulesFile, want)
		}
	}

	for _, dir := range kustomizations(t) {
		r := render(t, dir)
		if len(r.rules) != 1 {
			t.Errorf("%s: %d PrometheusRules, want 1", dir, len(r.rules))
			continue
		}
		// The operator hands spec.groups to Prometheus as a rule file:
		// parse it as one.
		spec, err := sigsyaml.Marshal(r.rules[0].Spec)
		if err != nil {
			t.Fatal(err)
		}
		crd := parseRules(t, dir+": PrometheusRule/"+r.rules[0].Name, spec)
		if !reflect.DeepEqual(crd, plain) {
			t.Errorf("%s: PrometheusRule %s differs from %s (regenerate it from the rule file)", dir, r.rules[0].Name, rulesFile)
		}
	}
}

// Every overlay has one PodMonitor, and it scrapes every long-running
// component on a container port it declares.
func TestPodMonitorScrapesEveryService(t *testing.T) {
	for _, dir := range kustomizations(t) {
		r := render(t, dir)
		if len(r.podMonitors) != 1 {
			t.Errorf("%s: %d PodMonitors, want 1", dir, len(r.podMonitors))
			continue
		}
		pm := r.podMonitors[0]
		sel, err := metav1.LabelSelectorAsSelector(&pm.Spec.Selector)
		if err != nil {
			t.Fatalf("%s: PodMonitor %s: selector: %v", dir, pm.Name, err)
		}
		if len(pm.Spec.PodMetricsEndpoints) == 0 {
			t.Fatalf("%s: PodMonitor %s has no endpoints", dir, pm.Name)
		}
		for _, w := range r.workloads {
			selected := sel.Matches(labels.Set(w.pod.Labels))
			if selected != w.service {
				t.Errorf("%s: PodMonitor %s selects %s/%s: %v, want %v (the long-running components only)", dir, pm.Name, w.kind, w.name, selected, w.service)
			}
			if !selected {
				continue
			}
			for _, ep := range pm.Spec.PodMetricsEndpoints {
				if ep.Port == nil || ep.Path != "/metrics" {
					t.Errorf("%s: PodMonitor %s: an endpoint without a named port or not on /metrics", dir, pm.Name)
					continue
				}
				found := false
				for _, c := range w.pod.Spec.Containers {
					for _, cp := range c.Ports {
						found = found || cp.Name == *ep.Port
					}
				}
				if !found {
					t.Errorf("%s: %s/%s has no container port %q for PodMonitor %s", dir, w.kind, w.name, *ep.Port, pm.Name)
				}
			}
		}
	}
}
