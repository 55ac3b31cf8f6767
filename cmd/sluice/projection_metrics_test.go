package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/esserver"
	"github.com/sluicehq/sluice/internal/testenv"
)

// TestRebuildServesStuckAlertMetrics runs `sluice projection rebuild
// --metrics-addr` against an Elasticsearch whose _bulk never answers (a
// rebuild that makes no progress) and checks that the process exports
// every series the SluiceProjectionRebuildStuck alert selects, for the
// version being built, with the lag the alert looks for.
func TestRebuildServesStuckAlertMetrics(t *testing.T) {
	ctx := context.Background()
	url, _ := testenv.NewMigratedDatabase(t)
	kafka := testenv.NewKafka(t)
	es := esserver.New()
	hold := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/_bulk") {
			select { // a stuck cluster: the write never returns
			case <-hold:
			case <-r.Context().Done():
			}
			http.Error(w, "stuck", http.StatusServiceUnavailable)
			return
		}
		es.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	t.Cleanup(func() { close(hold) })
	events := testenv.UniqueName("events-")
	t.Setenv("DATABASE_URL", url)
	t.Setenv("ELASTICSEARCH_URLS", ts.URL)
	t.Setenv("KAFKA_BROKERS", strings.Join(kafka.Brokers, ","))
	t.Setenv("EVENTS_TOPIC", events)
	t.Setenv("SHUTDOWN_TIMEOUT", "1s") // the drain gives up on the stuck write
	publishInstanceCreated(t, kafka.Brokers, events)

	addr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	var out, errb bytes.Buffer
	go func() {
		root := &cobra.Command{Use: "sluice", SilenceUsage: true, SilenceErrors: true}
		root.SetOut(&out)
		root.SetErr(&errb)
		root.AddCommand(newProjectionCmd())
		root.SetArgs([]string{"projection", "rebuild", "instances", "--version", "1", "--yes", "--metrics-addr", addr})
		done <- root.ExecuteContext(runCtx)
	}()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("rebuild did not stop within 30 s of its context's end")
		}
	}()

	const handler = "projection:instances:v1"
	var families map[string]*dto.MetricFamily
	testenv.WaitFor(t, 30*time.Second, "the rebuild's lag on /metrics", func() bool {
		select {
		case err := <-done:
			t.Fatalf("rebuild ended: %v\n%s\n%s", err, out.String(), errb.String())
		default:
		}
		families = scrape(t, "http://"+addr+"/metrics")
		return sampleValue(families, "sluice_worker_consumer_lag", map[string]string{"handler": handler}) >= 1
	})

	// Every selector of the alert finds a series of the version being built.
	group, errs := rulefmt.ParseFile("../../deploy/prometheus/sluice-alerts.yaml", false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	var expr string
	for _, g := range group.Groups {
		for _, r := range g.Rules {
			if r.Alert == "SluiceProjectionRebuildStuck" {
				expr = r.Expr
			}
		}
	}
	if expr == "" {
		t.Fatal("no SluiceProjectionRebuildStuck alert")
	}
	parsed, perr := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if perr != nil {
		t.Fatal(perr)
	}
	selectors := 0
	parser.Inspect(parsed, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		selectors++
		if !matches(families, vs.LabelMatchers, handler) {
			t.Errorf("the alert's selector %s finds no series of %s in the rebuild's /metrics", vs, handler)
		}
		return nil
	})
	if selectors == 0 {
		t.Fatalf("no selector in %q", expr)
	}
}

func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	r, err := http.Get(url)
	if err != nil {
		return nil
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return nil
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fam, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fam
}

// sampleValue is the largest value of name's series whose labels include
// want (-1 when there is none).
func sampleValue(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	v := -1.0
	f := fams[name]
	if f == nil {
		return v
	}
next:
	for _, m := range f.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		for k, w := range want {
			if got[k] != w {
				continue next
			}
		}
		var x float64
		switch {
		case m.GetGauge() != nil:
			x = m.GetGauge().GetValue()
		case m.GetCounter() != nil:
			x = m.GetCounter().GetValue()
		case m.GetUntyped() != nil:
			x = m.GetUntyped().GetValue()
		}
		v = max(v, x)
	}
	return v
}

// matches reports whether a series of handler in fams satisfies every
// matcher (the metric name's too).
func matches(fams map[string]*dto.MetricFamily, ms []*labels.Matcher, handler string) bool {
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			lset := map[string]string{model.MetricNameLabel: name}
			for _, l := range m.GetLabel() {
				lset[l.GetName()] = l.GetValue()
			}
			if lset["handler"] != handler {
				continue
			}
			ok := true
			for _, mt := range ms {
				if !mt.Matches(lset[mt.Name]) {
					ok = false
					break
				}
			}
			if ok {
				return true
			}
		}
	}
	return false
}
