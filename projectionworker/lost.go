package projectionworker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/shared/kafka"
)

// maxRebuildProbe bounds the search for a fresh version to rebuild a lost
// read model as.
const maxRebuildProbe = 100

// readModelLost reports whether projection name at version v has lost its
// read model (docs/projectionworker.md#read-model-lost): its live indices
// are missing or hold no document while the registry has done rows for
// its handler or its consumer group has committed offsets. A fresh
// deployment (no done rows, nothing committed) is not lost.
func (s *Service) readModelLost(ctx context.Context, cl *kgo.Client, name string, v int) (bool, string, error) {
	idx, err := Indices(ctx, s.d.ES, s.cfg.Elasticsearch.IndexPrefix, name)
	if err != nil {
		return false, "", err
	}
	var docs int64
	live := 0
	for _, i := range idx {
		if i.Live {
			docs += i.Docs
			live++
		}
	}
	if docs > 0 {
		return false, "", nil
	}
	what := "no live index"
	if live > 0 {
		what = fmt.Sprintf("%d live indices with 0 documents", live)
	}
	done, err := s.reg.HasDone(ctx, HandlerName(name, v))
	if err != nil {
		return false, "", err
	}
	if done {
		return true, what + " while registry handler " + HandlerName(name, v) + " has done rows", nil
	}
	group := s.cfg.Kafka.Group(GroupName(name, v))
	offs, err := kadm.NewClient(cl).FetchOffsets(ctx, group)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return false, "", fmt.Errorf("projectionworker: offsets of %s: %w", group, err)
	}
	committed := false
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Err == nil && o.At > 0 {
			committed = true
		}
	})
	if committed {
		return true, what + " while consumer group " + group + " has committed offsets", nil
	}
	return false, "", nil
}

// rebuildLost rebuilds a lost read model blue/green as the next fresh
// version (Rebuild: new indices, group and handler from the start of the
// events topic), logging progress; the live consumer keeps running and
// follows the swap (watchVersion). A failure is logged, not fatal: the
// live worker goes on, and `sluice projection rebuild` remains.
//
// It plans with a Kafka client of its own, closed when it returns: a
// consumer's client is closed when that consumer stops, which every
// version switch does — the one a previous rebuild caused included.
func (s *Service) rebuildLost(ctx context.Context, sp Spec, v int, why string) {
	p := sp.Projection
	log := s.d.Logger.With("projection", p.Name())
	cl, err := kafka.NewClient(s.cfg.Kafka, s.hooks.kafkaOpts...)
	if err != nil {
		log.Error("read model missing; cannot plan its rebuild: run `sluice projection rebuild`", "err", err)
		return
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	version := 0
	for cand := v + 1; cand <= v+maxRebuildProbe; cand++ {
		_, err := PlanRebuild(ctx, s.d.ES, adm, s.cfg.Elasticsearch.IndexPrefix, s.cfg.Kafka.GroupPrefix, p, cand)
		if err == nil {
			version = cand
			break
		}
		if !errors.Is(err, ErrStaleVersion) && !errors.Is(err, ErrAlreadyLive) {
			log.Error("read model missing; cannot plan its rebuild: run `sluice projection rebuild`", "err", err)
			return
		}
	}
	if version == 0 {
		log.Error("read model missing; no fresh version to rebuild it as: run `sluice projection rebuild`", "from", v+1, "to", v+maxRebuildProbe)
		return
	}
	log.Warn("read model missing; rebuilding", "reason", why, "live_version", v, "version", version)
	var lastDone int64
	lastAt := time.Now()
	d := s.d
	d.Health = nil // the live consumers report readiness; the rebuild logs
	sum, err := Rebuild(ctx, SwitchOptions{Config: s.cfg, Deps: d, Opts: s.opts, Projection: p, Version: version, ProgressEvery: 5 * time.Second,
		Progress: func(pr Progress) {
			done := pr.Lag.End - pr.Lag.Lag
			rate := 0.0
			if dt := time.Since(lastAt).Seconds(); dt > 0 && pr.Lag.End > 0 {
				rate = float64(done-lastDone) / dt
			}
			if pr.Lag.End > 0 {
				lastDone, lastAt = done, time.Now()
			}
			log.Info("read model rebuild", "phase", pr.Phase, "version", pr.Version, "records", done, "end", pr.Lag.End,
				"lag", pr.Lag.Lag, "events_per_s", fmt.Sprintf("%.0f", rate), "elapsed", pr.Elapsed.Round(time.Millisecond))
		}})
	if err != nil {
		if ctx.Err() == nil {
			log.Error("read model rebuild failed: run `sluice projection rebuild`", "version", version, "err", err)
		}
		return
	}
	log.Info("read model rebuilt", "from", sum.From, "to", sum.To, "scopes", sum.Scopes, "elapsed", sum.Elapsed.Round(time.Millisecond))
}

// serveLost lets the service start rebuilds of lost read models under ctx
// until the returned stop is called; stop waits for them (ctx is Run's,
// cancelled first). The scheduler is the shared one (readmodel.Rebuilds):
// at most one per projection at a time, and one asked for while one runs
// is dropped (the rebuild builds a fresh version from the whole topic).
func (s *Service) serveLost(ctx context.Context) (stop func()) { return s.lost.Serve(ctx) }

// startLost runs rebuildLost for projection sp, live at v, in the
// background unless one runs already.
func (s *Service) startLost(sp Spec, v int, why string) {
	s.lost.Start(sp.Projection.Name(), why, func(ctx context.Context, why string) { s.rebuildLost(ctx, sp, v, why) })
}

// indexLost is a live worker's onLost: a write of projection
// sp (at version v) to scope was answered 404 while running — the index
// was deleted under the worker. The event is retried (its index is
// created again with the aliases) and the read model is rebuilt as the
// next version, exactly as when found lost at start-up.
func (s *Service) indexLost(sp Spec, v int, scope, reason string) {
	if s.Version(sp.Projection.Name()) != v {
		return // an old version's consumer draining after a swap
	}
	s.startLost(sp, v, "a write to scope "+scope+" was answered 404 (the index was deleted): "+reason)
}
