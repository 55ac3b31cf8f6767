package projectionworker

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/elastic/go-elasticsearch/v8"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// ErrStaleVersion is wrapped by PlanRebuild when the requested version is
// not newer than every version that exists: rebuilding it would reuse an
// old index, consumer group and registry handler (whose committed offsets
// and done rows make the "rebuild" skip every event), so it is refused
// and the error points to `sluice projection rollback` or the next free
// version.
var ErrStaleVersion = errors.New("projectionworker: rebuild would reuse an old version")

// RebuildPlan is what `sluice projection rebuild` would create.
type RebuildPlan struct {
	Projection string `json:"projection"`
	Version    int    `json:"version"`
	// Live is the live version per scope; Highest the highest version with
	// an index (live or kept for rollback).
	Live    map[string]int `json:"live"`
	Highest int            `json:"highest"`
	// Indices are the new concrete indices (one per scope that has a live
	// index); Group and Handler the new consumer group and registry handler.
	Indices []string `json:"indices"`
	Group   string   `json:"group"`
	Handler string   `json:"handler"`
}

// PlanRebuild checks that version is fresh — newer than every existing
// index of the projection (live or kept), equal to none, and its consumer
// group has no committed offsets (adm nil skips that check) — and returns
// what a rebuild creates. It changes nothing. groupPrefix is
// KAFKA_GROUP_PREFIX (kafka.Config.GroupPrefix).
func PlanRebuild(ctx context.Context, es *elasticsearch.Client, adm *kadm.Client, prefix, groupPrefix string, p Projection, version int) (RebuildPlan, error) {
	plan := RebuildPlan{Projection: p.Name(), Version: version, Live: map[string]int{},
		Group: groupPrefix + GroupName(p.Name(), version), Handler: HandlerName(p.Name(), version)}
	if version <= 0 {
		return plan, fmt.Errorf("projectionworker: rebuild %s: --version must be ≥ 1", p.Name())
	}
	idx, err := Indices(ctx, es, prefix, p.Name())
	if err != nil {
		return plan, err
	}
	plan.Live = liveVersions(idx)
	scopes := map[string]bool{}
	for _, i := range idx {
		plan.Highest = max(plan.Highest, i.Version)
		scopes[i.Scope] = true
	}
	for scope, v := range plan.Live {
		if version == v {
			return plan, fmt.Errorf("%w: %s v%d is live for %s", ErrAlreadyLive, p.Name(), version, scope)
		}
		if version < v {
			return plan, fmt.Errorf("%w: %s v%d is older than the live v%d: use `sluice projection rollback %s` to go back, or rebuild as v%d",
				ErrStaleVersion, p.Name(), version, v, p.Name(), plan.Highest+1)
		}
	}
	for _, i := range idx {
		if i.Version == version {
			return plan, fmt.Errorf("%w: %s v%d already has index %s (kept for rollback or left by an earlier build): rebuild as v%d",
				ErrStaleVersion, p.Name(), version, i.Index, plan.Highest+1)
		}
	}
	if version < plan.Highest {
		return plan, fmt.Errorf("%w: %s v%d is older than the kept v%d: rebuild as v%d",
			ErrStaleVersion, p.Name(), version, plan.Highest, plan.Highest+1)
	}
	if adm != nil {
		offs, err := adm.FetchOffsets(ctx, plan.Group)
		if err == nil {
			err = offs.Error()
		}
		if err != nil && !errors.Is(err, kadm.ErrEmpty) && !errors.Is(err, kerr.GroupIDNotFound) {
			return plan, fmt.Errorf("projectionworker: rebuild %s: offsets of %s: %w", p.Name(), plan.Group, err)
		}
		n := 0
		offs.Each(func(o kadm.OffsetResponse) {
			if o.At >= 0 {
				n++
			}
		})
		if n > 0 {
			return plan, fmt.Errorf("%w: consumer group %s already has committed offsets on %d partitions: rebuild as v%d",
				ErrStaleVersion, plan.Group, n, max(plan.Highest, version)+1)
		}
	}
	for s := range scopes {
		plan.Indices = append(plan.Indices, IndexNames(prefix, s, p.Name(), version).Index)
	}
	sort.Strings(plan.Indices)
	return plan, nil
}
