package api

import (
	"errors"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the API's Prometheus series (docs/architecture.md#observability).
type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	commands *prometheus.CounterVec
	// codes are the status codes' labels, made once ("202", not a new
	// string per request).
	codes [600]string
}

func newMetrics(reg *prometheus.Registry) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_api_requests_total",
			Help: "HTTP requests served by the command API, by route pattern and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_api_request_duration_seconds",
			Help:    "Latency of command API requests, by route pattern.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}, []string{"route"}),
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_api_commands_total",
			Help: "Commands submitted, by event type and result (accepted, replayed, conflict, invalid, reused_key, unavailable).",
		}, []string{"type", "result"}),
	}
	for c := range m.codes {
		m.codes[c] = strconv.Itoa(c)
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.commands} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, errors.New("api: metrics already registered on this Prometheus registry (one API handler per registry)")
			}
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) observe(route string, code int, d time.Duration) {
	label := ""
	if code >= 0 && code < len(m.codes) {
		label = m.codes[code]
	} else {
		label = strconv.Itoa(code)
	}
	m.requests.WithLabelValues(route, label).Inc()
	m.duration.WithLabelValues(route).Observe(d.Seconds())
}

// command counts one command's result.
func (m *metrics) command(eventType, result string) {
	m.commands.WithLabelValues(eventType, result).Inc()
}
