package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/shared/kafka"
	"github.com/sluicehq/sluice/shared/observability"
)

// Service is a sluice service running in another process, whose health
// server (SLUICE_HTTP_ADDR) the admin API reads: /readyz for the health
// strip, /metrics for the flow charts.
type Service struct {
	Name string // as shown: relay, instance-worker, …
	URL  string // base URL of its health server, http://relay:9090
}

// ParseServices reads SLUICE_ADMIN_SERVICES: name=URL items.
func ParseServices(items []string) ([]Service, error) {
	var out []Service
	for _, it := range items {
		it = strings.TrimSpace(it)
		if it == "" {
			continue
		}
		name, raw, ok := strings.Cut(it, "=")
		u, err := url.Parse(strings.TrimSpace(raw))
		if !ok || strings.TrimSpace(name) == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("SLUICE_ADMIN_SERVICES: %q: want name=http://host:port", it)
		}
		out = append(out, Service{Name: strings.TrimSpace(name), URL: strings.TrimRight(u.String(), "/")})
	}
	return out, nil
}

// Worker is a worker group this deployment runs (the instance worker, the
// projections of SLUICE_PROJECTIONS): its group is listed before it
// exists in Kafka, and said "not running" while no worker has joined it.
type Worker struct {
	Handler string
	Group   string // the Kafka group id (prefixed)
}

// HealthView is GET /admin/v1/health: is every part ready, and if not why.
type HealthView struct {
	At           time.Time          `json:"at"`
	Services     []ServiceHealth    `json:"services"`
	Dependencies []DependencyHealth `json:"dependencies"`
	Groups       []GroupHealth      `json:"groups"`
}

// ServiceHealth is one service's readiness, as its /readyz answers.
type ServiceHealth struct {
	Name string `json:"name"`
	// Source is where it was read: "this process" (the api process, which
	// in sluice dev runs every service) or the service's health URL.
	Source string `json:"source"`
	// Ready is nil when the service could not be asked (Reason says why).
	Ready  *bool             `json:"ready"`
	Reason string            `json:"reason,omitempty"`
	Checks map[string]string `json:"checks"`
}

// DependencyHealth is one dependency as this api process reaches it.
type DependencyHealth struct {
	Name      string  `json:"name"`
	Ready     bool    `json:"ready"`
	Reason    string  `json:"reason,omitempty"`
	LatencyMS float64 `json:"latency_ms"`
}

// GroupHealth is one worker group's readiness checks, pause flag and pause
// state.
type GroupHealth struct {
	Group      string               `json:"group"`
	Handler    string               `json:"handler"`
	Ready      *bool                `json:"ready"`
	Reason     string               `json:"reason,omitempty"`
	Checks     map[string]string    `json:"checks"`
	Paused     *bool                `json:"paused,omitempty"`
	Pause      *registry.GroupPause `json:"pause,omitempty"`
	PauseError string               `json:"pause_error,omitempty"`
	// PauseState and PauseWorkers are as in GroupView.
	PauseState   string        `json:"pause_state,omitempty"`
	PauseWorkers *PauseWorkers `json:"pause_workers,omitempty"`
}

// serviceOf names the service a readiness check belongs to, by the names
// the services register their checks under (relay, instanceworker:…,
// projectionworker:… and projection:{name}:v{n}:…; the rest is the api
// process's own: postgres, registry, event store, shutdown).
func serviceOf(check string) string {
	switch {
	case check == "relay" || strings.HasPrefix(check, "relay:"):
		return pipeline.Relay
	case strings.HasPrefix(check, "instanceworker"):
		return pipeline.InstanceWorker
	case strings.HasPrefix(check, "projectionworker") || strings.HasPrefix(check, "projection:"):
		return pipeline.ProjectionWorker
	}
	return pipeline.API
}

// groupChecks are the checks of a worker group: its handler's, and for a
// projection the projection worker's shared ones.
func groupChecks(handler string, checks map[string]string) map[string]string {
	out := map[string]string{}
	for n, v := range checks {
		if strings.HasPrefix(n, handler+":") || n == handler ||
			strings.HasPrefix(handler, "projection:") && strings.HasPrefix(n, "projectionworker:") {
			out[n] = v
		}
	}
	return out
}

// verdict is ready and the failing checks' reasons of a check map.
func verdict(checks map[string]string) (bool, string) {
	var bad []string
	for n, v := range checks {
		if v != "ok" {
			bad = append(bad, n+": "+v)
		}
	}
	sort.Strings(bad)
	return len(bad) == 0, strings.Join(bad, "; ")
}

// remoteReady reads a service's /readyz (503 with its report is an
// answer: the service is not ready, and says why).
func remoteReady(ctx context.Context, base string) (observability.Report, error) {
	var rep observability.Report
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
	if err != nil {
		return rep, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return rep, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return rep, err
	}
	if err := json.Unmarshal(body, &rep); err != nil || rep.Checks == nil {
		return rep, fmt.Errorf("GET /readyz: %d, not a readiness report", res.StatusCode)
	}
	return rep, nil
}

func (s *Server) health(r *http.Request) (any, error) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	hv := HealthView{At: time.Now().UTC(), Services: []ServiceHealth{}, Dependencies: []DependencyHealth{}, Groups: []GroupHealth{}}

	// Services: this process's checks, grouped by service, then each
	// service of SLUICE_ADMIN_SERVICES as its /readyz answers.
	all := map[string]string{} // every check seen, for the groups
	byService := map[string]map[string]string{pipeline.API: {}}
	if s.opts.Health != nil {
		rep, _ := s.opts.Health.Readiness(ctx)
		for n, v := range rep.Checks {
			svc := serviceOf(n)
			if byService[svc] == nil {
				byService[svc] = map[string]string{}
			}
			byService[svc][n] = v
			all[n] = v
		}
	}
	for _, name := range []string{pipeline.API, pipeline.Relay, pipeline.InstanceWorker, pipeline.ProjectionWorker} {
		checks, ok := byService[name]
		if !ok {
			continue
		}
		ready, reason := verdict(checks)
		hv.Services = append(hv.Services, ServiceHealth{Name: name, Source: "this process", Ready: &ready, Reason: reason, Checks: checks})
	}
	remote := make([]ServiceHealth, len(s.opts.Services))
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i, svc := range s.opts.Services {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sh := ServiceHealth{Name: svc.Name, Source: svc.URL, Checks: map[string]string{}}
			rep, err := remoteReady(ctx, svc.URL)
			if err != nil {
				sh.Reason = "could not ask its /readyz: " + err.Error()
			} else {
				ready, reason := verdict(rep.Checks)
				sh.Ready, sh.Reason, sh.Checks = &ready, reason, rep.Checks
				mu.Lock()
				for n, v := range rep.Checks {
					all[n] = v
				}
				mu.Unlock()
			}
			remote[i] = sh
		}()
	}
	wg.Wait()
	hv.Services = append(hv.Services, remote...)
	seen := map[string]bool{}
	for _, sh := range hv.Services {
		seen[sh.Name] = true
	}
	for _, name := range []string{pipeline.Relay, pipeline.InstanceWorker, pipeline.ProjectionWorker} {
		if !seen[name] {
			hv.Services = append(hv.Services, ServiceHealth{Name: name, Source: "not in this process", Checks: map[string]string{},
				Reason: "runs in another process: name its health server in SLUICE_ADMIN_SERVICES (" + name + "=http://host:9090) to see it here"})
		}
	}

	hv.Dependencies = s.dependencies(ctx)

	pauses := s.workerPauses(ctx)
	for _, w := range s.opts.Workers {
		checks := groupChecks(w.Handler, all)
		gh := GroupHealth{Group: w.Group, Handler: w.Handler, Checks: checks}
		if len(checks) > 0 {
			ready, reason := verdict(checks)
			gh.Ready, gh.Reason = &ready, reason
		} else {
			gh.Reason = "no readiness checks of this handler seen (it runs nowhere this api process can see)"
		}
		if p, err := s.opts.Registry.GroupPaused(ctx, w.Group); err != nil {
			gh.PauseError = err.Error()
		} else {
			pw := pauses[w.Handler]
			gh.Paused, gh.Pause = &p.Paused, &p
			gh.PauseState, gh.PauseWorkers = pauseState(p.Paused, pw), &pw
		}
		hv.Groups = append(hv.Groups, gh)
	}
	return hv, nil
}

// dependencies probes, in parallel and each within 2 s, what the pipeline
// stands on, as this process reaches it.
func (s *Server) dependencies(ctx context.Context) []DependencyHealth {
	cfg := s.opts.Process
	type probe struct {
		name string
		fn   func(context.Context) error
	}
	probes := []probe{
		{"Postgres", func(ctx context.Context) error { return s.opts.Pool.Ping(ctx) }},
		{"Kafka", func(ctx context.Context) error {
			cl, err := kafka.NewClient(cfg.Kafka)
			if err != nil {
				return err
			}
			defer cl.Close()
			return cl.Ping(ctx)
		}},
		{"Elasticsearch", func(ctx context.Context) error {
			if s.opts.ES == nil {
				return errors.New("no Elasticsearch client configured")
			}
			res, err := s.opts.ES.Ping(s.opts.ES.Ping.WithContext(ctx))
			if err != nil {
				return err
			}
			defer res.Body.Close()
			if res.IsError() {
				return fmt.Errorf("answered %s", res.Status())
			}
			return nil
		}},
		{"Object storage", func(ctx context.Context) error {
			if s.opts.Bucket == nil {
				return errors.New("no bucket configured")
			}
			// The relay's checkpoint: a small object every deployment has
			// (not found yet is an answer too).
			_, err := s.opts.Bucket.Stat(ctx, cfg.Relay.CheckpointKey)
			if errors.Is(err, objstore.ErrNotFound) {
				return nil
			}
			return err
		}},
	}
	// A role on a database of its own is probed on its own
	// (docs/scale-out.md#health); on one database, one probe as before.
	if s.opts.StorePool != s.opts.Pool {
		probes = append(probes, probe{"Postgres (store)", func(ctx context.Context) error { return s.opts.StorePool.Ping(ctx) }})
	}
	if s.opts.RegistryPool != s.opts.Pool && s.opts.RegistryPool != s.opts.StorePool {
		probes = append(probes, probe{"Postgres (registry)", func(ctx context.Context) error { return s.opts.RegistryPool.Ping(ctx) }})
	}
	out := make([]DependencyHealth, len(probes))
	var wg sync.WaitGroup
	for i, p := range probes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			start := time.Now()
			err := p.fn(pctx)
			d := DependencyHealth{Name: p.name, Ready: err == nil, LatencyMS: float64(time.Since(start).Microseconds()) / 1000}
			if err != nil {
				d.Reason = err.Error()
			}
			out[i] = d
		}()
	}
	wg.Wait()
	return out
}
