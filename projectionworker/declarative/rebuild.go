package declarative

import (
	"context"
	"errors"

	"github.com/sluicehq/sluice/projectionworker"
)

// RebuildChanged starts, in the background, the blue/green rebuild of
// every projection whose declared version is newer than its live version
// (projectionworker.Rebuild: fresh indices, consumer group and registry
// handler from the beginning of the events topic, then the alias swap;
// the worker's live-version watch follows the swap). A projection with no
// live version yet simply starts at its version; one whose declared
// version already has indices (a rebuild under way, perhaps by another
// replica, or kept for rollback) is left alone with a log line. It returns
// once the rebuilds are started; done receives each one's outcome.
func RebuildChanged(ctx context.Context, cfg projectionworker.Config, d projectionworker.Deps, ps []*Projection) (started int, done <-chan error, err error) {
	out := make(chan error, len(ps))
	prefix := cfg.Elasticsearch.IndexPrefix
	for _, p := range ps {
		live, err := projectionworker.LiveVersion(ctx, d.ES, prefix, p.Name())
		if err != nil {
			return started, out, err
		}
		if live == 0 || p.Version() <= live {
			continue
		}
		if _, err := projectionworker.PlanRebuild(ctx, d.ES, nil, prefix, cfg.Kafka.GroupPrefix, p, p.Version()); err != nil {
			if errors.Is(err, projectionworker.ErrStaleVersion) || errors.Is(err, projectionworker.ErrAlreadyLive) {
				d.Logger.Warn("declarative projection: version changed, but its indices exist already (a rebuild under way or kept for rollback); not rebuilding",
					"projection", p.Name(), "live", live, "declared", p.Version(), "err", err)
				continue
			}
			return started, out, err
		}
		d.Logger.Info("declarative projection: version changed; rebuilding blue/green", "projection", p.Name(), "live", live, "declared", p.Version())
		started++
		go func() {
			sum, err := projectionworker.Rebuild(ctx, projectionworker.SwitchOptions{Config: cfg, Deps: d, Projection: p, Version: p.Version()})
			if err != nil {
				d.Logger.Error("declarative projection: rebuild failed; the live version keeps serving", "projection", p.Name(), "version", p.Version(), "err", err)
			} else {
				d.Logger.Info("declarative projection: rebuild done; aliases swapped", "projection", p.Name(), "from", sum.From, "to", sum.To, "elapsed", sum.Elapsed)
			}
			out <- err
		}()
	}
	return started, out, nil
}
