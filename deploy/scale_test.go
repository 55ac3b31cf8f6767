package deploy_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/types"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"
	corev1 "k8s.io/api/core/v1"

	"github.com/sluicehq/sluice/migrations"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/sluiceconfig"
)

// The scaled-out examples (docs/deploy.md#scaled-out): the log in
// scaleShards shards spread over two store servers (EVENT_STORE_SHARD_MAP:
// the lower half on the store role's server, the upper half on a second),
// scaleRelays relay replicas, the main and registry roles on a third
// server.
const (
	scaleShards = 4
	scaleRelays = 2
)

// sluiceCommands are the sluice processes of a deployment, by the
// subcommand they run.
var sluiceCommands = []string{"migrate", pipeline.API, pipeline.Relay, pipeline.InstanceWorker, pipeline.ProjectionWorker}

// rolesOf returns the Postgres roles a sluice command uses: `migrate up`
// migrates every distinct database of the three URLs, a service its
// pipeline.Service.Roles.
func rolesOf(t *testing.T, command string) []migrations.Role {
	t.Helper()
	if command == "migrate" {
		return migrations.Roles()
	}
	s, err := pipeline.Lookup(command)
	if err != nil {
		t.Fatal(err)
	}
	return s.Roles(pipeline.Options{})
}

// hostOf is the host of a Postgres URL.
func hostOf(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" {
		t.Fatalf("not a Postgres URL with a host: %v", err)
	}
	return u.Hostname()
}

// roleHosts maps each role of a configuration to the host of its database.
func roleHosts(t *testing.T, cfg *sluiceconfig.Config) map[migrations.Role]string {
	t.Helper()
	out := map[migrations.Role]string{}
	for _, r := range migrations.Roles() {
		out[r] = hostOf(t, cfg.Postgres.URLOf(r))
	}
	return out
}

// storeHosts are the hosts of the store's servers: the store role's, then
// those of the shard map that are not it.
func storeHosts(t *testing.T, cfg *sluiceconfig.Config) []string {
	t.Helper()
	out := []string{hostOf(t, cfg.Postgres.URLOf(migrations.RoleStore))}
	servers, err := cfg.EventStore.ShardServers()
	if err != nil {
		t.Fatal(err)
	}
	for _, sv := range servers {
		if h := hostOf(t, sv.URL); !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}

// checkSplit fails unless the configuration puts the store role alone on a
// database, the main and registry roles together on another, and the
// shards half on the store role's database, half on a third.
func checkSplit(t *testing.T, where string, cfg *sluiceconfig.Config) {
	t.Helper()
	dbs := cfg.Postgres.Databases()
	var got []string
	for _, db := range dbs {
		got = append(got, fmt.Sprint(db.Roles))
	}
	if want := []string{"[main registry]", "[store]", "[store]"}; !slices.Equal(got, want) {
		t.Errorf("%s: databases by role %v, want %v (the store role alone, main and registry together, a second store server)", where, got, want)
	}
	servers, err := cfg.EventStore.ShardServers()
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	var shards []string
	for _, sv := range servers {
		shards = append(shards, hostOf(t, sv.URL)+fmt.Sprint(sv.Shards))
	}
	store := hostOf(t, cfg.Postgres.URLOf(migrations.RoleStore))
	if len(servers) != 2 || hostOf(t, servers[0].URL) != store || hostOf(t, servers[1].URL) == store ||
		fmt.Sprint(servers[0].Shards, servers[1].Shards) != "[0 1] [2 3]" {
		t.Errorf("%s: shard map %v, want shards 0-1 on the store role's server %s and 2-3 on another", where, shards, store)
	}
	if cfg.EventStore.Shards != scaleShards {
		t.Errorf("%s: EVENT_STORE_SHARDS gives %d shards, want %d", where, cfg.EventStore.Shards, scaleShards)
	}
}

// composeEnv is a compose service's environment; a variable without a
// value (passed through from the host) is an error.
func composeEnv(t *testing.T, where string, svc types.ServiceConfig) map[string]string {
	t.Helper()
	env := map[string]string{}
	for k, v := range svc.Environment {
		if v == nil {
			t.Errorf("%s: %s has no value", where, k)
			continue
		}
		env[k] = *v
	}
	return env
}

// TestComposeScaleOut loads the single-machine compose file overridden by
// the scaled-out one, as `docker compose -f … -f …` merges them, and checks
// the result: everything TestComposeFile checks, the same environment on
// every sluice process (4 shards; the three Postgres URLs), 2 relay
// replicas, two Postgres servers split by role, each process waiting for
// the servers of the roles it uses, and the migration waiting for both
// (it migrates every distinct database).
func TestComposeScaleOut(t *testing.T) {
	project := loadCompose(t, composeFile, composeScaleFile)
	t.Run("what the single-machine file is checked for", func(t *testing.T) {
		checkComposeProject(t, project)
	})
	t.Run("a project of its own", func(t *testing.T) {
		// Its volumes are its own: a store created by the single-machine
		// file with one shard is not reopened with four (refused).
		if single := loadCompose(t); project.Name == single.Name {
			t.Errorf("project name %q is the single-machine file's: the scaled-out store would open its volumes", project.Name)
		}
	})

	envs := map[string]map[string]string{}
	for _, name := range sluiceCommands {
		svc, ok := project.Services[name]
		if !ok || svc.Image != localImage {
			t.Fatalf("no sluice service %s", name)
		}
		if len(svc.Command) == 0 || svc.Command[0] != name {
			t.Fatalf("service %s runs %v, want sluice %s", name, svc.Command, name)
		}
		envs[name] = composeEnv(t, name, svc)
	}
	t.Run("the same environment on every process", func(t *testing.T) {
		for name, env := range envs {
			for k := range mergeKeys(env, envs[pipeline.API]) {
				if env[k] != envs[pipeline.API][k] {
					t.Errorf("%s: %s = %q, but the api has %q: every process must have the same", name, k, env[k], envs[pipeline.API][k])
				}
			}
		}
	})
	t.Run("4 shards, the store alone on its server", func(t *testing.T) {
		for name, env := range envs {
			cfg, err := sluiceconfig.Check(env)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			checkSplit(t, name, cfg)
		}
	})
	t.Run("2 relay replicas", func(t *testing.T) {
		var n *int32
		if d := project.Services[pipeline.Relay].Deploy; d != nil && d.Replicas != nil {
			v := int32(*d.Replicas)
			n = &v
		}
		if n == nil || *n != scaleRelays {
			t.Errorf("relay: deploy.replicas %s, want %d", fmtReplicas(n), scaleRelays)
		}
	})
	t.Run("three Postgres servers, each with its own volume", func(t *testing.T) {
		cfg, err := sluiceconfig.Check(envs["migrate"])
		if err != nil {
			t.Fatal(err)
		}
		hosts := roleHosts(t, cfg)
		servers := map[string]bool{}
		for name, svc := range project.Services {
			if isPostgres(svc) {
				servers[name] = true
			}
		}
		used := map[string]bool{}
		for r, h := range hosts {
			if !servers[h] {
				t.Errorf("the %s role's URL names host %s, which is no Postgres service of the project", r, h)
			}
			used[h] = true
		}
		for _, h := range storeHosts(t, cfg) {
			if !servers[h] {
				t.Errorf("the shard map names host %s, which is no Postgres service of the project", h)
			}
			used[h] = true
		}
		if len(servers) != 3 || len(used) != 3 {
			t.Errorf("Postgres services %v, hosts used by the roles and the shard map %v: want three servers, all used", servers, used)
		}
		volumes := map[string]string{}
		for name := range servers {
			for _, v := range project.Services[name].Volumes {
				if other, ok := volumes[v.Source]; ok {
					t.Errorf("Postgres services %s and %s share the volume %s", name, other, v.Source)
				}
				volumes[v.Source] = name
			}
		}
	})
	t.Run("each process waits for the servers of its roles", func(t *testing.T) {
		for name, env := range envs {
			cfg, err := sluiceconfig.Check(env)
			if err != nil {
				t.Fatal(err)
			}
			hosts := roleHosts(t, cfg)
			for _, r := range rolesOf(t, name) {
				dep, ok := project.Services[name].DependsOn[hosts[r]]
				if !ok || dep.Condition != types.ServiceConditionHealthy {
					t.Errorf("%s uses the %s role on %s but does not wait for it to be healthy (%+v)", name, r, hosts[r], dep)
				}
				if r != migrations.RoleStore {
					continue
				}
				for _, h := range storeHosts(t, cfg) {
					if dep, ok := project.Services[name].DependsOn[h]; !ok || dep.Condition != types.ServiceConditionHealthy {
						t.Errorf("%s uses the store's shards on %s but does not wait for it to be healthy (%+v)", name, h, dep)
					}
				}
			}
		}
	})
	t.Run("migrations run against both databases", func(t *testing.T) {
		cfg, err := sluiceconfig.Check(envs["migrate"])
		if err != nil {
			t.Fatal(err)
		}
		// `sluice migrate up` migrates each of these (migrations.OpenPools
		// opens one pool per distinct database of every role).
		var hosts []string
		for _, db := range cfg.Postgres.Databases(migrations.Roles()...) {
			hosts = append(hosts, hostOf(t, db.URL))
		}
		sort.Strings(hosts)
		if want := []string{"postgres", "postgres-store", "postgres-store-b"}; !slices.Equal(hosts, want) {
			t.Errorf("migrate migrates the databases on %v, want %v", hosts, want)
		}
		for _, name := range []string{pipeline.API, pipeline.Relay, pipeline.InstanceWorker, pipeline.ProjectionWorker} {
			if dep := project.Services[name].DependsOn["migrate"]; dep.Condition != types.ServiceConditionCompletedSuccessfully {
				t.Errorf("%s does not wait for the migration of both databases to complete", name)
			}
		}
	})
}

// The single-machine compose file and the base stay one database and one
// shard: the scaled-out settings live in their own files only.
func TestSingleMachineStaysUnsharded(t *testing.T) {
	project := loadCompose(t)
	for _, name := range sluiceCommands {
		cfg, err := sluiceconfig.Check(composeEnv(t, name, project.Services[name]))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if cfg.EventStore.Shards != 1 || len(cfg.Postgres.Databases()) != 1 {
			t.Errorf("compose %s: %d shards on %d databases, want 1 on 1", name, cfg.EventStore.Shards, len(cfg.Postgres.Databases()))
		}
	}
	for _, dir := range []string{"k8s/base", "k8s/overlays/dev"} {
		r := render(t, dir)
		if v, ok := r.configMaps["sluice"]["EVENT_STORE_SHARDS"]; ok {
			t.Errorf("%s: ConfigMap sluice sets EVENT_STORE_SHARDS=%s; the scaled-out setting belongs in %s", dir, v, scaleOutOverlay)
		}
	}
}

func mergeKeys(a, b map[string]string) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

// scaleSecret is the Secret "sluice" of the scaled-out overlay as
// docs/deploy.md tells to create it: the main and registry roles on one
// server (one spelling, hence one pool), the store on the other.
var scaleSecret = map[string]string{
	"DATABASE_URL":             "postgres://sluice:sample@pg-main:5432/sluice?sslmode=require",
	"REGISTRY_DATABASE_URL":    "postgres://sluice:sample@pg-main:5432/sluice?sslmode=require",
	"EVENT_STORE_DATABASE_URL": "postgres://sluice:sample@pg-store:5432/sluice?sslmode=require",
	"EVENT_STORE_SHARD_MAP": "0-1=postgres://sluice:sample@pg-store:5432/sluice?sslmode=require," +
		"2-3=postgres://sluice:sample@pg-store-b:5432/sluice?sslmode=require",
}

// podEnv is the environment of a container given the Secret's keys: its
// ConfigMaps, its values, and the Secret slots whose key exists; missing
// are the required keys the Secret lacks (the pod would not start).
func podEnv(c corev1.Container, r rendered, secret map[string]string) (env map[string]string, missing []string) {
	env = map[string]string{}
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef != nil {
			for k, v := range r.configMaps[ef.ConfigMapRef.Name] {
				env[k] = v
			}
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			if v, ok := secret[ref.Key]; ok {
				env[e.Name] = v
			} else if ref.Optional == nil || !*ref.Optional {
				missing = append(missing, ref.Key)
			}
		}
	}
	sort.Strings(missing)
	return env, missing
}

// TestKustomizeScaleOut renders the scaled-out overlay (TestKustomizations
// checks its workloads like every overlay's): every sluice container,
// the migration Job's included, reads 4 shards from the one ConfigMap and
// requires the three Postgres URLs from the Secret; with the Secret of
// docs/deploy.md the roles are split over two servers and the migration
// migrates both; the relay runs 2 replicas, of which a drain takes at most
// one.
func TestKustomizeScaleOut(t *testing.T) {
	r := render(t, scaleOutOverlay)
	containers := 0
	for _, w := range r.workloads {
		for _, c := range w.pod.Spec.Containers {
			where := w.kind + "/" + w.name + " container " + c.Name
			containers++
			if len(c.EnvFrom) != 1 || c.EnvFrom[0].ConfigMapRef == nil || c.EnvFrom[0].ConfigMapRef.Name != "sluice" {
				t.Errorf("%s: does not read the one ConfigMap sluice (envFrom %+v)", where, c.EnvFrom)
			}
			// Without the role keys the pod does not start, rather than
			// putting a role on DATABASE_URL's server.
			if _, missing := podEnv(c, r, map[string]string{}); !slices.Equal(missing, []string{"DATABASE_URL", "EVENT_STORE_DATABASE_URL", "EVENT_STORE_SHARD_MAP", "REGISTRY_DATABASE_URL"}) {
				t.Errorf("%s: with an empty Secret it lacks the required keys %v, want the three Postgres URLs and the shard map", where, missing)
			}
			env, missing := podEnv(c, r, scaleSecret)
			if len(missing) > 0 {
				t.Errorf("%s: requires the Secret keys %v beyond the Postgres URLs", where, missing)
			}
			cfg, err := sluiceconfig.Check(env)
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			checkSplit(t, where, cfg)
			if c.Args[0] == "migrate" && len(cfg.Postgres.Databases(migrations.Roles()...)) != 3 {
				t.Errorf("%s: migrates %d databases, want the three", where, len(cfg.Postgres.Databases(migrations.Roles()...)))
			}
		}
	}
	if containers != len(sluiceCommands) {
		t.Errorf("%d sluice containers, want one per command %v", containers, sluiceCommands)
	}
	w := workloadNamed(t, r, "sluice-relay")
	if w.replicas == nil || *w.replicas != scaleRelays {
		t.Errorf("sluice-relay: replicas %s, want %d", fmtReplicas(w.replicas), scaleRelays)
	}
	for _, p := range r.pdbs {
		if selects(p.Spec.Selector.MatchLabels, w.pod.Labels) {
			if p.Spec.MaxUnavailable == nil || p.Spec.MaxUnavailable.IntValue() != 1 {
				t.Errorf("PodDisruptionBudget %s: maxUnavailable %v, want 1 (a drain must leave a relay replica to lead the shards)", p.Name, p.Spec.MaxUnavailable)
			}
		}
	}
	workloadNamed(t, r, "sluice-migrate")
}

func fmtReplicas(n *int32) string {
	if n == nil {
		return "unset"
	}
	return fmt.Sprint(*n)
}

func workloadNamed(t *testing.T, r rendered, name string) workload {
	t.Helper()
	for _, w := range r.workloads {
		if w.name == name {
			return w
		}
	}
	t.Fatalf("%s: no workload %s", r.dir, name)
	return workload{}
}

// alertRule returns the alert called name of the rule file.
func alertRule(t *testing.T, name string) (expr string, forDur time.Duration) {
	t.Helper()
	content, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range parseRules(t, rulesFile, content).Groups {
		for _, r := range g.Rules {
			if r.Alert == name {
				return r.Expr, time.Duration(r.For)
			}
		}
	}
	t.Fatalf("%s: no alert %s", rulesFile, name)
	return "", 0
}

// floatSample is one float sample of a series (chunks.Sample).
type floatSample struct {
	t int64
	f float64
}

func (s floatSample) T() int64                      { return s.t }
func (s floatSample) ST() int64                     { return 0 }
func (s floatSample) F() float64                    { return s.f }
func (s floatSample) H() *histogram.Histogram       { return nil }
func (s floatSample) FH() *histogram.FloatHistogram { return nil }
func (s floatSample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s floatSample) Copy() chunks.Sample           { return s }

// seriesSet iterates over a slice of series (storage.SeriesSet).
type seriesSet struct {
	series []storage.Series
	i      int
}

func (s *seriesSet) Next() bool                        { s.i++; return s.i <= len(s.series) }
func (s *seriesSet) At() storage.Series                { return s.series[s.i-1] }
func (s *seriesSet) Err() error                        { return nil }
func (s *seriesSet) Warnings() annotations.Annotations { return nil }

// memStorage holds series given in the notation of Prometheus' rule unit
// tests and PromQL test files, one a line: `metric{label="v"} 1x3 stale
// _x2 0+10x5` (a value every minute from time 0; `_` no sample, `stale`
// the marker a scrape leaves when its target is gone), parsed by
// Prometheus' own parser.
func memStorage(t *testing.T, lines string) storage.Queryable {
	t.Helper()
	p := parser.NewParser(parser.Options{})
	var all []storage.Series
	for _, line := range strings.Split(strings.TrimSpace(lines), "\n") {
		lset, values, err := p.ParseSeriesDesc(strings.TrimSpace(line))
		if err != nil {
			t.Fatalf("series %q: %v", line, err)
		}
		var samples []chunks.Sample
		for i, v := range values {
			if !v.Omitted {
				samples = append(samples, floatSample{t: int64(i) * time.Minute.Milliseconds(), f: v.Value})
			}
		}
		all = append(all, storage.NewListSeries(lset, samples))
	}
	return &storage.MockQueryable{MockQuerier: &storage.MockQuerier{
		SelectMockFunction: func(_ bool, _ *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
			var out []storage.Series
			for _, s := range all {
				if matchesAll(s.Labels(), ms) {
					out = append(out, s)
				}
			}
			sort.Slice(out, func(i, j int) bool { return labels.Compare(out[i].Labels(), out[j].Labels()) < 0 })
			return &seriesSet{series: out}
		},
	}}
}

func matchesAll(lset labels.Labels, ms []*labels.Matcher) bool {
	for _, m := range ms {
		if !m.Matches(lset.Get(m.Name)) {
			return false
		}
	}
	return true
}

// firing evaluates expr at instant at over the series with Prometheus'
// engine (its default settings: 5 min lookback) and returns what it
// yields as "relay/shard" (relay empty when the result has none).
func firing(t *testing.T, expr, series string, at time.Duration) []string {
	t.Helper()
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 1_000_000, Timeout: time.Minute, Parser: parser.NewParser(parser.Options{})})
	t.Cleanup(func() { engine.Close() })
	q, err := engine.NewInstantQuery(context.Background(), memStorage(t, series), nil, expr, time.Unix(0, 0).Add(at))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	res := q.Exec(context.Background())
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	vec, err := res.Vector()
	if err != nil {
		t.Fatal(err)
	}
	out := []string{}
	for _, s := range vec {
		out = append(out, s.Metric.Get("relay")+"/"+s.Metric.Get("shard"))
	}
	sort.Strings(out)
	return out
}

// The per-shard relay alerts, evaluated by Prometheus' engine over series
// shaped like the relay's: they name the shard that has no leader, is
// stalled, lags or has parked records, and only that one; a replica's
// frozen series of a shard it no longer leads raise nothing; a relay
// whose series have no shard label (a store of one shard before the label)
// is shard 0.
func TestShardAlerts(t *testing.T) {
	// The writers (api) export the head-lock series of every shard from
	// their start: the shards the store has.
	writers := func(n int) string {
		var b strings.Builder
		for sh := range n {
			fmt.Fprintf(&b, "  sluice_eventstore_head_lock_wait_seconds_count{instance=\"api-0\",shard=\"%d\"} 0x15\n", sh)
		}
		return b.String()
	}
	// relay returns a replica's series of one shard (shard "" leaves the
	// label out): leader, lag and checkpoint as promqltest sequences.
	relay := func(replica, shard, leader, lag, ckpt string) string {
		ls := fmt.Sprintf(`instance=%q,relay="default"`, replica)
		if shard != "" {
			ls += fmt.Sprintf(`,shard=%q`, shard)
		}
		return fmt.Sprintf("  sluice_relay_leader{%s} %s\n  sluice_relay_lag{%s} %s\n  sluice_relay_checkpoint_position{%s} %s\n",
			ls, leader, ls, lag, ls, ckpt)
	}
	parked := func(replica, shard, v string) string {
		return fmt.Sprintf("  sluice_relay_parked_records{instance=%q,relay=\"default\",shard=%q} %s\n", replica, shard, v)
	}
	const moving = "0+10x15" // a checkpoint that advances
	for _, tc := range []struct {
		alert, name, series string
		at                  time.Duration
		want                []string
	}{
		{"SluiceRelayNoLeader", "two replicas lead two shards each", writers(4) +
			relay("a", "0", "1x15", "0x15", moving) + relay("a", "1", "1x15", "0x15", moving) +
			relay("b", "2", "1x15", "0x15", moving) + relay("b", "3", "1x15", "0x15", moving),
			10 * time.Minute, []string{}},
		// The lost replica's series go stale with it; the survivor has
		// none for shards it never led: the shards the writers know name
		// them.
		{"SluiceRelayNoLeader", "a replica lost, its shards in no series", writers(4) +
			relay("a", "0", "1x3 stale", "0x3 stale", "0+10x3 stale") + relay("a", "1", "1x3 stale", "0x3 stale", "0+10x3 stale") +
			relay("b", "2", "1x15", "0x15", moving) + relay("b", "3", "1x15", "0x15", moving),
			5 * time.Minute, []string{"/0", "/1"}},
		{"SluiceRelayNoLeader", "the survivor took them over", writers(4) +
			relay("a", "0", "1x3 stale", "0x3 stale", "0+10x3 stale") + relay("a", "1", "1x3 stale", "0x3 stale", "0+10x3 stale") +
			relay("b", "0", "_x4 1x11", "_x4 0x11", "_x4 0+10x11") + relay("b", "1", "_x4 1x11", "_x4 0x11", "_x4 0+10x11") +
			relay("b", "2", "1x15", "0x15", moving) + relay("b", "3", "1x15", "0x15", moving),
			6 * time.Minute, []string{}},
		{"SluiceRelayNoLeader", "every replica exporting a shard reports 0", writers(2) +
			relay("a", "0", "1x15", "0x15", moving) + relay("a", "1", "1x3 0x11", "0x15", "0x15") +
			relay("b", "1", "0x15", "0x15", "0x15"),
			10 * time.Minute, []string{"default/1"}},
		{"SluiceRelayNoLeader", "no relay runs", writers(1), 10 * time.Minute, []string{"/0"}},
		{"SluiceRelayNoLeader", "one shard, no shard label, a leader", writers(1) +
			relay("a", "", "1x15", "0x15", moving) + relay("b", "", "0x15", "0x15", "0x15"),
			10 * time.Minute, []string{}},
		{"SluiceRelayNoLeader", "one shard, no shard label, no leader", writers(1) +
			relay("a", "", "0x15", "0x15", "0x15") + relay("b", "", "0x15", "0x15", "0x15"),
			10 * time.Minute, []string{"default/0"}},

		{"SluiceRelayStalled", "a shard's leader behind, its checkpoint still", writers(2) +
			relay("a", "0", "1x15", "50x15", "100x15") + relay("a", "1", "1x15", "50x15", moving),
			12 * time.Minute, []string{"default/0"}},
		// The previous leader keeps the lag it last saw; the new one is
		// at the head of an idle shard: nothing is stalled.
		{"SluiceRelayStalled", "frozen series of a former leader", writers(1) +
			relay("a", "0", "1x2 0x12", "50x15", "100x15") + relay("b", "0", "_x2 1x12", "_x2 0x12", "_x2 150x12"),
			14 * time.Minute, []string{}},
		{"SluiceRelayStalled", "one shard, no shard label", writers(1) +
			relay("a", "", "1x15", "50x15", "100x15"),
			12 * time.Minute, []string{"default/0"}},

		{"SluiceRelayLagging", "one shard far behind", writers(2) +
			relay("a", "0", "1x15", "20000x15", moving) + relay("b", "1", "1x15", "5x15", moving),
			10 * time.Minute, []string{"default/0"}},
		{"SluiceRelayLagging", "frozen lag of a former leader", writers(1) +
			relay("a", "0", "1x2 0x12", "20000x15", "0x15") + relay("b", "0", "_x2 1x12", "_x2 5x12", "_x2 0+10x12"),
			10 * time.Minute, []string{}},

		{"SluiceRelayLagGrowing", "one shard's lag grows", writers(2) +
			relay("a", "0", "1x15", "1000+100x15", moving) + relay("a", "1", "1x15", "1500x15", moving),
			15 * time.Minute, []string{"default/0"}},
		{"SluiceRelayLagGrowing", "frozen growth of a former leader", writers(1) +
			relay("a", "0", "1x10 0x4", "1000+100x10 2000x4", "0x15") + relay("b", "0", "_x10 1x4", "_x10 0x4", "_x10 0+10x4"),
			14 * time.Minute, []string{}},

		{"SluiceRelayRecordsParked", "a shard with parked records", writers(2) +
			relay("a", "0", "1x15", "0x15", moving) + relay("a", "1", "1x15", "0x15", moving) +
			parked("a", "0", "0x15") + parked("a", "1", "2x15"),
			10 * time.Minute, []string{"default/1"}},
		{"SluiceRelayRecordsParked", "frozen count of a former leader", writers(1) +
			relay("a", "0", "1x2 0x12", "0x15", "0x15") + relay("b", "0", "_x2 1x12", "_x2 0x12", "_x2 0+10x12") +
			parked("a", "0", "2x15") + parked("b", "0", "_x2 0x12"),
			10 * time.Minute, []string{}},
	} {
		t.Run(tc.alert+"/"+tc.name, func(t *testing.T) {
			expr, _ := alertRule(t, tc.alert)
			got := firing(t, expr, tc.series, tc.at)
			if !slices.Equal(got, tc.want) {
				t.Errorf("%s yields %v, want %v", tc.alert, got, tc.want)
			}
		})
	}
}

// A shard's leader moves after a lost replica's lease expires and within
// one balance loop (min(lease/4, poll interval)); Prometheus sees it one
// scrape later. SluiceRelayNoLeader must wait longer than that, or every
// failover pages.
func TestNoLeaderAlertOutlastsFailover(t *testing.T) {
	_, forDur := alertRule(t, "SluiceRelayNoLeader")
	cfg, err := sluiceconfig.Load(map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	lease, poll := cfg.Relay.LeaderLease, cfg.Relay.PollInterval
	r := render(t, "k8s/base")
	if len(r.podMonitors) != 1 || len(r.podMonitors[0].Spec.PodMetricsEndpoints) == 0 {
		t.Fatal("k8s/base: no PodMonitor endpoint")
	}
	scrape, err := model.ParseDuration(string(r.podMonitors[0].Spec.PodMetricsEndpoints[0].Interval))
	if err != nil {
		t.Fatal(err)
	}
	failover := lease + min(lease/4, poll) + time.Duration(scrape)
	if forDur <= failover {
		t.Errorf("SluiceRelayNoLeader for: %v, not longer than a failover as Prometheus sees it (lease %v + loop %v + scrape %v = %v)",
			forDur, lease, min(lease/4, poll), time.Duration(scrape), failover)
	}
}
