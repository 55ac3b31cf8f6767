package admin

import (
	"context"
	"sync"

	dto "github.com/prometheus/client_model/go"
)

// PauseWorkers is, for one worker group, how many of its workers this api
// process can see and how many report that the operator pause has taken
// effect. A worker is seen when its sluice_worker_paused series is read:
// from this process's registry (in sluice dev every worker runs here) or
// from the /metrics of a service of SLUICE_ADMIN_SERVICES (one process per
// URL as it answers).
type PauseWorkers struct {
	Seen   int `json:"seen"`
	Paused int `json:"paused"`
}

// The pause states of a group (GroupView.PauseState): what its workers
// have done about the operator's flag, not only the flag.
const (
	// PauseRunning: the flag is clear and no worker seen reports a pause.
	PauseRunning = "running"
	// PausePausing: the flag is set and a worker seen has not yet stopped
	// (it still finishes what it fetched, or has not read the flag).
	PausePausing = "pausing"
	// PausePaused: the flag is set and every worker seen (at least one)
	// has stopped fetching and finished and committed what it fetched.
	PausePaused = "paused"
	// PauseResuming: the flag is clear and a worker seen still reports the
	// pause (it has not read the resume yet).
	PauseResuming = "resuming"
	// PauseRequested: the flag is set but no worker of the group is seen,
	// so whether any has stopped is unknown here.
	PauseRequested = "requested"
)

// pauseState is a group's pause state from its flag and its workers.
func pauseState(flag bool, w PauseWorkers) string {
	switch {
	case flag && w.Seen == 0:
		return PauseRequested
	case flag && w.Paused == w.Seen:
		return PausePaused
	case flag:
		return PausePausing
	case w.Paused > 0:
		return PauseResuming
	}
	return PauseRunning
}

// seriesPaused is the worker runtime's gauge: 1 once an operator pause has
// taken effect in that worker (docs/worker-runtime.md#operator-pause).
const seriesPaused = "sluice_worker_paused"

// workerPauses reads sluice_worker_paused of every worker this process can
// see, by handler. A service whose /metrics cannot be read adds no worker.
func (s *Server) workerPauses(ctx context.Context) map[string]PauseWorkers {
	out := map[string]PauseWorkers{}
	add := func(mfs []*dto.MetricFamily) {
		for _, mf := range mfs {
			if mf.GetName() != seriesPaused {
				continue
			}
			for _, m := range mf.GetMetric() {
				h := labels(m)["handler"]
				if h == "" || m.GetGauge() == nil {
					continue
				}
				w := out[h]
				w.Seen++
				if m.GetGauge().GetValue() == 1 {
					w.Paused++
				}
				out[h] = w
			}
		}
	}
	if s.opts.Metrics != nil {
		if mfs, err := s.opts.Metrics.Gather(); err == nil {
			add(mfs)
		}
	}
	remote := make([][]*dto.MetricFamily, len(s.opts.Services))
	var wg sync.WaitGroup
	for i, svc := range s.opts.Services {
		wg.Add(1)
		go func() {
			defer wg.Done()
			remote[i], _ = scrape(ctx, svc.URL)
		}()
	}
	wg.Wait()
	for _, mfs := range remote {
		add(mfs)
	}
	return out
}
