package projectionworker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/elastic/go-elasticsearch/v8"

	"github.com/sluicehq/sluice/readmodel"
)

// IndexInfo is one concrete index of a projection. Its JSON names are
// snake_case, as every body of the admin API and every --json output.
type IndexInfo struct {
	Index   string `json:"index"`
	Scope   string `json:"scope"`
	Version int    `json:"version"`
	// Live: the scope's write alias points at this index.
	Live bool `json:"live"`
	// ReadAlias: the scope's read alias points at this index.
	ReadAlias bool  `json:"read_alias"`
	Docs      int64 `json:"docs"`
	// RefreshInterval and Replicas as set on the index ("" = default).
	RefreshInterval string `json:"refresh_interval"`
	Replicas        string `json:"replicas"`
}

// Indices returns the concrete indices of projection name, ordered by scope
// and version.
func Indices(ctx context.Context, es *elasticsearch.Client, prefix, name string) ([]IndexInfo, error) {
	res, err := es.Indices.Get([]string{prefix + "*_" + name + "_v*"}, es.Indices.Get.WithContext(ctx),
		es.Indices.Get.WithAllowNoIndices(true), es.Indices.Get.WithIgnoreUnavailable(true))
	if err != nil {
		return nil, fmt.Errorf("projectionworker: list indices: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode == http.StatusNotFound {
		return nil, nil
	}
	if res.IsError() {
		return nil, readmodel.NewStatusError("get indices", res.StatusCode, res.Body)
	}
	var body map[string]struct {
		Aliases  map[string]json.RawMessage `json:"aliases"`
		Settings struct {
			Index map[string]any `json:"index"`
		} `json:"settings"`
	}
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("projectionworker: list indices: %w", err)
	}
	var out []IndexInfo
	for idx, v := range body {
		scope, ver, ok := parseIndex(prefix, name, idx)
		if !ok {
			continue
		}
		n := IndexNames(prefix, scope, name, ver)
		info := IndexInfo{Index: idx, Scope: scope, Version: ver}
		_, info.Live = v.Aliases[n.WriteAlias]
		_, info.ReadAlias = v.Aliases[n.ReadAlias]
		info.RefreshInterval = settingString(v.Settings.Index["refresh_interval"])
		info.Replicas = settingString(v.Settings.Index["number_of_replicas"])
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Scope != out[j].Scope {
			return out[i].Scope < out[j].Scope
		}
		return out[i].Version < out[j].Version
	})
	for i := range out {
		c, err := count(ctx, es, out[i].Index)
		if err != nil {
			return nil, err
		}
		out[i].Docs = c
	}
	return out, nil
}

func settingString(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	default:
		return fmt.Sprint(x)
	}
}

func count(ctx context.Context, es *elasticsearch.Client, index string) (int64, error) {
	res, err := es.Count(es.Count.WithContext(ctx), es.Count.WithIndex(index))
	if err != nil {
		return 0, fmt.Errorf("projectionworker: count %s: %w", index, err)
	}
	defer res.Body.Close()
	if res.IsError() {
		return 0, readmodel.NewStatusError("count", res.StatusCode, res.Body)
	}
	var c struct {
		Count int64 `json:"count"`
	}
	if err := json.NewDecoder(res.Body).Decode(&c); err != nil {
		return 0, fmt.Errorf("projectionworker: count %s: %w", index, err)
	}
	return c.Count, nil
}

// LiveVersion returns the highest version a write alias of projection name
// points at (0: none is live yet).
func LiveVersion(ctx context.Context, es *elasticsearch.Client, prefix, name string) (int, error) {
	idx, err := Indices(ctx, es, prefix, name)
	if err != nil {
		return 0, err
	}
	v := 0
	for _, i := range idx {
		if i.Live {
			v = max(v, i.Version)
		}
	}
	return v, nil
}

// liveVersions returns, per scope, the version its write alias points at.
func liveVersions(idx []IndexInfo) map[string]int {
	out := map[string]int{}
	for _, i := range idx {
		if i.Live {
			out[i.Scope] = i.Version
		}
	}
	return out
}

// SwapAliases points the read and write aliases of every scope that has a
// concrete index of version at that index, in one atomic _aliases request
// (remove from the indices holding them now, add to the target). It
// returns the scopes switched.
func SwapAliases(ctx context.Context, es *elasticsearch.Client, prefix string, p Projection, version int) ([]string, error) {
	idx, err := Indices(ctx, es, prefix, p.Name())
	if err != nil {
		return nil, err
	}
	var actions []map[string]any
	var scopes []string
	for _, target := range idx {
		if target.Version != version {
			continue
		}
		n := IndexNames(prefix, target.Scope, p.Name(), version)
		for _, o := range idx {
			if o.Scope != target.Scope || o.Version == version {
				continue
			}
			if o.ReadAlias {
				actions = append(actions, map[string]any{"remove": map[string]any{"index": o.Index, "alias": n.ReadAlias}})
			}
			if o.Live {
				actions = append(actions, map[string]any{"remove": map[string]any{"index": o.Index, "alias": n.WriteAlias}})
			}
		}
		read := map[string]any{"index": n.Index, "alias": n.ReadAlias}
		if f := p.Template().ReadFilter; f != nil {
			read["filter"] = f
		}
		actions = append(actions,
			map[string]any{"add": read},
			map[string]any{"add": map[string]any{"index": n.Index, "alias": n.WriteAlias, "is_write_index": true}})
		scopes = append(scopes, target.Scope)
	}
	if len(actions) == 0 {
		return nil, fmt.Errorf("projectionworker: %s has no index of version %d", p.Name(), version)
	}
	b, err := json.Marshal(map[string]any{"actions": actions})
	if err != nil {
		return nil, err
	}
	res, err := es.Indices.UpdateAliases(bytes.NewReader(b), es.Indices.UpdateAliases.WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("projectionworker: swap aliases: %w", err)
	}
	defer res.Body.Close()
	if res.IsError() {
		return nil, readmodel.NewStatusError("update aliases", res.StatusCode, res.Body)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	return scopes, nil
}

// RestoreSettings turns refresh back on (the default interval) and sets
// the replicas of every index of version to replicas ("" = the cluster
// default).
func RestoreSettings(ctx context.Context, es *elasticsearch.Client, prefix, name string, version int, replicas string) error {
	idx, err := Indices(ctx, es, prefix, name)
	if err != nil {
		return err
	}
	var names []string
	for _, i := range idx {
		if i.Version == version {
			names = append(names, i.Index)
		}
	}
	if len(names) == 0 {
		return nil
	}
	settings := map[string]any{"refresh_interval": nil, "number_of_replicas": nil}
	if replicas != "" {
		if r, err := strconv.Atoi(replicas); err == nil {
			settings["number_of_replicas"] = r
		}
	}
	b, _ := json.Marshal(map[string]any{"index": settings})
	res, err := es.Indices.PutSettings(bytes.NewReader(b), es.Indices.PutSettings.WithContext(ctx),
		es.Indices.PutSettings.WithIndex(strings.Join(names, ",")))
	if err != nil {
		return fmt.Errorf("projectionworker: restore settings: %w", err)
	}
	defer res.Body.Close()
	if res.IsError() {
		return readmodel.NewStatusError("put settings", res.StatusCode, res.Body)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	// Make everything written while refresh was off searchable before the
	// aliases move.
	rres, err := es.Indices.Refresh(es.Indices.Refresh.WithContext(ctx), es.Indices.Refresh.WithIndex(names...))
	if err != nil {
		return fmt.Errorf("projectionworker: refresh: %w", err)
	}
	defer rres.Body.Close()
	if rres.IsError() {
		return readmodel.NewStatusError("refresh", rres.StatusCode, rres.Body)
	}
	_, _ = io.Copy(io.Discard, rres.Body)
	return nil
}
