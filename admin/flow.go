package admin

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sluicehq/sluice/instanceworker"
)

// Flow is GET /admin/v1/flow: the pipeline's counters and its
// request-to-readable histogram at one instant, read from the services'
// own Prometheus series (this process's registry, and the /metrics of
// every service of SLUICE_ADMIN_SERVICES), summed. The counters are
// cumulative: a reader gets rates and quantiles from two readings (the
// console keeps its readings of the last minutes in the page).
type Flow struct {
	At      time.Time    `json:"at"`
	Sources []FlowSource `json:"sources"`
	// Counters: appended (events stored, commands and domain events),
	// published (records Kafka acknowledged to the relay), applied
	// (commands the instance worker applied), projected (domain events a
	// projection applied, every projection summed).
	Counters map[string]float64 `json:"counters"`
	// Latency is sluice_worker_event_age_seconds of the instance worker:
	// from the API's accept of a command to its instance document written.
	Latency Histogram `json:"latency"`
}

// FlowSource is where series were read, and whether that worked.
type FlowSource struct {
	Name  string `json:"name"`
	Error string `json:"error,omitempty"`
}

// Histogram is a cumulative Prometheus histogram: Buckets are the finite
// upper bounds with their cumulative counts; Count includes the +Inf
// bucket.
type Histogram struct {
	Buckets []Bucket `json:"buckets"`
	Count   uint64   `json:"count"`
	Sum     float64  `json:"sum"`
}

// Bucket is one cumulative bucket.
type Bucket struct {
	LE    float64 `json:"le"`
	Count uint64  `json:"count"`
}

// The series the flow reads.
const (
	seriesAppends   = "sluice_eventstore_appends_total"
	seriesPublished = "sluice_relay_published_total"
	seriesRecords   = "sluice_worker_records_total"
	seriesEventAge  = "sluice_worker_event_age_seconds"
)

func (s *Server) flow(r *http.Request) (any, error) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	f := Flow{At: time.Now().UTC(), Sources: []FlowSource{}, Counters: map[string]float64{"appended": 0, "published": 0, "applied": 0, "projected": 0},
		Latency: Histogram{Buckets: []Bucket{}}}
	var families [][]*dto.MetricFamily
	if s.opts.Metrics != nil {
		mfs, err := s.opts.Metrics.Gather()
		src := FlowSource{Name: "this process"}
		if err != nil {
			src.Error = err.Error()
		}
		f.Sources = append(f.Sources, src)
		families = append(families, mfs)
	}
	remote := make([][]*dto.MetricFamily, len(s.opts.Services))
	srcs := make([]FlowSource, len(s.opts.Services))
	var wg sync.WaitGroup
	for i, svc := range s.opts.Services {
		wg.Add(1)
		go func() {
			defer wg.Done()
			srcs[i] = FlowSource{Name: svc.Name}
			mfs, err := scrape(ctx, svc.URL)
			if err != nil {
				srcs[i].Error = err.Error()
			}
			remote[i] = mfs
		}()
	}
	wg.Wait()
	f.Sources = append(f.Sources, srcs...)
	families = append(families, remote...)

	buckets := map[float64]uint64{}
	for _, mfs := range families {
		for _, mf := range mfs {
			switch mf.GetName() {
			case seriesAppends:
				f.Counters["appended"] += sumCounter(mf, func(l map[string]string) bool { return l["outcome"] == "stored" })
			case seriesPublished:
				f.Counters["published"] += sumCounter(mf, func(map[string]string) bool { return true })
			case seriesRecords:
				f.Counters["applied"] += sumCounter(mf, func(l map[string]string) bool {
					return l["handler"] == instanceworker.HandlerName && l["outcome"] == "applied"
				})
				f.Counters["projected"] += sumCounter(mf, func(l map[string]string) bool {
					return strings.HasPrefix(l["handler"], "projection:") && l["outcome"] == "applied"
				})
			case seriesEventAge:
				for _, m := range mf.GetMetric() {
					if labels(m)["handler"] != instanceworker.HandlerName || m.GetHistogram() == nil {
						continue
					}
					h := m.GetHistogram()
					f.Latency.Count += h.GetSampleCount()
					f.Latency.Sum += h.GetSampleSum()
					for _, b := range h.GetBucket() {
						if !math.IsInf(b.GetUpperBound(), 1) {
							buckets[b.GetUpperBound()] += b.GetCumulativeCount()
						}
					}
				}
			}
		}
	}
	for le, n := range buckets {
		f.Latency.Buckets = append(f.Latency.Buckets, Bucket{LE: le, Count: n})
	}
	sort.Slice(f.Latency.Buckets, func(i, j int) bool { return f.Latency.Buckets[i].LE < f.Latency.Buckets[j].LE })
	return f, nil
}

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

func sumCounter(mf *dto.MetricFamily, keep func(map[string]string) bool) float64 {
	var sum float64
	for _, m := range mf.GetMetric() {
		if m.GetCounter() != nil && keep(labels(m)) {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// scrape reads a service's /metrics in the text format.
func scrape(ctx context.Context, base string) ([]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", res.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	byName, err := p.TextToMetricFamilies(io.LimitReader(res.Body, 32<<20))
	if err != nil {
		return nil, fmt.Errorf("GET /metrics: %w", err)
	}
	out := make([]*dto.MetricFamily, 0, len(byName))
	for _, mf := range byName {
		out = append(out, mf)
	}
	return out, nil
}
