// Package observability provides what every sluice process exposes to its
// operators (docs/architecture.md#observability): a JSON slog logger, a private Prometheus registry and
// one HTTP server per process serving /metrics, /livez and /readyz.
//
// It keeps the explicit-failure guarantee (docs/architecture.md#explicit-failure) visible: services
// register readiness checks (Postgres reachable, relay not stalled, registry
// not in outage) and liveness heartbeats (the main loop is still turning), and
// /readyz or /livez turn red with the failing check's name and reason.
package observability

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// NewLogger returns a slog logger writing to w in the given format ("json"
// or "text") at the given level ("debug", "info", "warn", "error").
func NewLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("observability: log level %q: %w", level, err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "json", "":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("observability: log format %q: want json or text", format)
	}
}

// NewRegistry returns a Prometheus registry with the Go runtime and process
// collectors registered. Each process owns its registry; nothing is global.
func NewRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// NewProcessRegistry returns NewRegistry with sluice_build_info registered:
// the registry of a sluice process, which tells its scraper which build it
// runs (version and commit as set by the linker, and the Go version).
func NewProcessRegistry(version, commit string) *prometheus.Registry {
	r := NewRegistry()
	r.MustRegister(BuildInfo(version, commit))
	return r
}

// BuildInfo returns the sluice_build_info gauge: always 1, labelled with
// version, commit and go_version (runtime.Version()). Joined on these labels,
// it tells which build every other series of the process comes from.
func BuildInfo(version, commit string) prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_build_info",
		Help: "Always 1; labelled with the version, commit and Go version of the running binary."},
		[]string{"version", "commit", "go_version"})
	g.WithLabelValues(version, commit, runtime.Version()).Set(1)
	return g
}

// Check reports whether one dependency or loop is healthy; a nil error means
// healthy. It must return promptly; the server gives it a short deadline.
type Check func(ctx context.Context) error

// Health holds a process's named liveness and readiness checks. It is safe
// for concurrent use.
type Health struct {
	mu        sync.RWMutex
	readiness map[string]Check
	liveness  map[string]Check
	timeout   time.Duration
}

// NewHealth returns an empty Health; a process with no checks is live and ready.
func NewHealth() *Health {
	return &Health{readiness: map[string]Check{}, liveness: map[string]Check{}, timeout: 2 * time.Second}
}

// AddReadiness registers (or replaces) a readiness check.
func (h *Health) AddReadiness(name string, c Check) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.readiness[name] = c
}

// AddLiveness registers (or replaces) a liveness check.
func (h *Health) AddLiveness(name string, c Check) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.liveness[name] = c
}

// Remove drops the readiness and liveness checks called name (a component
// that stopped, such as a consumer replaced by another).
func (h *Health) Remove(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.readiness, name)
	delete(h.liveness, name)
}

// Report is the JSON body of /livez and /readyz.
type Report struct {
	Status string            `json:"status"`
	Checks map[string]string `json:"checks"`
}

func (h *Health) run(ctx context.Context, live bool) (Report, bool) {
	h.mu.RLock()
	src := h.readiness
	if live {
		src = h.liveness
	}
	checks := make(map[string]Check, len(src))
	for k, v := range src {
		checks[k] = v
	}
	h.mu.RUnlock()

	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	rep := Report{Status: "ok", Checks: map[string]string{}}
	names := make([]string, 0, len(checks))
	for n := range checks {
		names = append(names, n)
	}
	sort.Strings(names)
	var mu sync.Mutex
	var wg sync.WaitGroup
	ok := true
	for _, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := checks[n](ctx)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				ok = false
				rep.Checks[n] = err.Error()
			} else {
				rep.Checks[n] = "ok"
			}
		}()
	}
	wg.Wait()
	if !ok {
		rep.Status = "failing"
	}
	return rep, ok
}

// Ready runs the readiness checks and returns the first failure, if any.
func (h *Health) Ready(ctx context.Context) error {
	rep, ok := h.run(ctx, false)
	if ok {
		return nil
	}
	var parts []string
	for n, s := range rep.Checks {
		if s != "ok" {
			parts = append(parts, n+": "+s)
		}
	}
	sort.Strings(parts)
	return errors.New(strings.Join(parts, "; "))
}

// Readiness runs the readiness checks and returns their report (each
// check's "ok" or reason) and whether all passed, as /readyz answers.
func (h *Health) Readiness(ctx context.Context) (Report, bool) { return h.run(ctx, false) }

func (h *Health) handler(live bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rep, ok := h.run(r.Context(), live)
		w.Header().Set("Content-Type", "application/json")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(rep)
	}
}

// Heartbeat is a liveness check for a loop: the loop calls Beat each turn and
// the check fails when no beat came within maxAge.
type Heartbeat struct {
	mu     sync.Mutex
	last   time.Time
	maxAge time.Duration
	now    func() time.Time
}

// NewHeartbeat returns a heartbeat that counts as fresh for maxAge from now.
func NewHeartbeat(maxAge time.Duration) *Heartbeat {
	return NewHeartbeatClock(maxAge, nil)
}

// NewHeartbeatClock is NewHeartbeat reading the time from now (nil:
// time.Now): tests age a heartbeat by moving their clock instead of
// waiting.
func NewHeartbeatClock(maxAge time.Duration, now func() time.Time) *Heartbeat {
	if now == nil {
		now = time.Now
	}
	return &Heartbeat{last: now(), maxAge: maxAge, now: now}
}

// Beat records that the loop is alive.
func (b *Heartbeat) Beat() {
	b.mu.Lock()
	b.last = b.now()
	b.mu.Unlock()
}

// Check fails when the last beat is older than maxAge.
func (b *Heartbeat) Check(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if age := b.now().Sub(b.last); age > b.maxAge {
		return fmt.Errorf("loop heartbeat is %s old (limit %s)", age.Round(time.Millisecond), b.maxAge)
	}
	return nil
}

// Handler returns the mux serving /metrics, /livez and /readyz. Extra routes
// may be added to the returned mux by the caller.
func Handler(reg *prometheus.Registry, h *Health) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.Handle("GET /livez", h.handler(true))
	mux.Handle("GET /readyz", h.handler(false))
	return mux
}

// Server is the per-process observability HTTP server.
type Server struct {
	srv *http.Server
	ln  net.Listener
}

// Listen binds addr (":9090", "127.0.0.1:0") and returns a server ready to Serve.
func Listen(addr string, handler http.Handler) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("observability: listen %s: %w", addr, err)
	}
	return &Server{ln: ln, srv: &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}}, nil
}

// Addr is the bound address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Serve serves until ctx is done, then shuts down gracefully.
func (s *Server) Serve(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(s.ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("observability: serve: %w", err)
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.srv.Shutdown(sctx)
		<-errc
		return nil
	}
}
