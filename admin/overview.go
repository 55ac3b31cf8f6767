package admin

import (
	"context"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/sluicehq/sluice/dlq"
	"github.com/sluicehq/sluice/instanceworker"
	"github.com/sluicehq/sluice/projectionworker"
	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/relay"
	"github.com/sluicehq/sluice/shared/kafka"
	"github.com/sluicehq/sluice/worker"
)

// Overview is GET /admin/v1/overview: where the whole pipeline stands. A
// part that cannot be read says so in its error field; the rest is shown.
type Overview struct {
	At          time.Time        `json:"at"`
	Store       StoreView        `json:"store"`
	Relay       RelayView        `json:"relay"`
	Groups      []GroupView      `json:"groups"`
	Registry    RegistryView     `json:"registry"`
	DLQ         []dlq.Counts     `json:"dlq"`
	Parked      ParkedView       `json:"parked"`
	Projections []ProjectionView `json:"projections"`
	Jobs        []Job            `json:"jobs"`
	// NotRunning names the configured worker groups that do not exist
	// in Kafka (no worker ever joined or committed them: a projection
	// this deployment does not run), which Groups therefore leaves out.
	NotRunning []string          `json:"not_running,omitempty"`
	Errors     map[string]string `json:"errors,omitempty"`
}

// StoreView is the event store's head.
type StoreView struct {
	// Head is the highest committed position; on a store of several
	// shards, where positions are per shard, the sum of the shards'
	// heads (the positions committed or abandoned up to each head).
	Head int64 `json:"head"`
	// Shards are the heads of a store of several shards, one per shard
	// (absent on a store of one shard).
	Shards []ShardHeadView `json:"shards,omitempty"`
}

// ShardHeadView is one shard's head.
type ShardHeadView struct {
	Shard int   `json:"shard"`
	Head  int64 `json:"head"`
}

// RelayView is the relay's checkpoint, lag and leader.
type RelayView struct {
	Name       string    `json:"name"`
	Checkpoint int64     `json:"checkpoint"`
	Found      bool      `json:"found"`
	UpdatedAt  time.Time `json:"updated_at,omitzero"`
	Lag        int64     `json:"lag"`
	Leader     string    `json:"leader,omitempty"`
	Epoch      int64     `json:"epoch,omitempty"`
	LeaseState string    `json:"lease_state"` // held, expired, none
	PendingGap int       `json:"pending_gaps"`
	// Shards is every shard's part on a store of more than one shard,
	// which has a relay leader per shard (docs/relay.md#shards); the
	// fields above are then their sums (checkpoint, lag, pending gaps),
	// the holders (leader), the highest epoch, and "held" only when every
	// shard's lease is.
	Shards []RelayShardView `json:"shards,omitempty"`
}

// RelayShardView is one shard's relay: its checkpoint, lag and lease.
type RelayShardView struct {
	Shard      int    `json:"shard"`
	Checkpoint int64  `json:"checkpoint"`
	Found      bool   `json:"found"`
	Lag        int64  `json:"lag"`
	Leader     string `json:"leader,omitempty"`
	Epoch      int64  `json:"epoch,omitempty"`
	LeaseState string `json:"lease_state"`
}

// GroupView is one worker group's lag per partition.
type GroupView struct {
	Group      string                `json:"group"`
	Topic      string                `json:"topic"`
	Handler    string                `json:"handler"`
	Lag        int64                 `json:"lag"`
	Members    int                   `json:"members"`
	State      string                `json:"state,omitempty"`
	Partitions []worker.PartitionLag `json:"partitions"`
	// Paused is the operator's durable pause flag of the group (the
	// registry's sluice.registry_group_pause, as `sluice consumer pause`
	// and POST consumers/{group}/pause set it); Pause says who set it,
	// when and why. Both are absent when the flag could not be read
	// (PauseError says why).
	Paused     *bool                `json:"paused,omitempty"`
	Pause      *registry.GroupPause `json:"pause,omitempty"`
	PauseError string               `json:"pause_error,omitempty"`
	// PauseState is what the group's workers have made of the flag
	// (running, pausing, paused, resuming, requested: see PausePaused…),
	// from the workers this api process can see (PauseWorkers); absent
	// when the flag could not be read.
	PauseState   string        `json:"pause_state,omitempty"`
	PauseWorkers *PauseWorkers `json:"pause_workers,omitempty"`
	Error        string        `json:"error,omitempty"`
	// Configured says this deployment runs the group (Options.Workers).
	// Status is running (members in the group), stopped (it exists in
	// Kafka with committed offsets but no member: Lag is what it will
	// read when a worker joins), not running (configured, but no worker
	// ever joined and nothing is committed: its lag is not counted, Note
	// says so) or unknown (Kafka could not be read). A group that is
	// neither configured nor in Kafka is not listed.
	Configured bool   `json:"configured"`
	Status     string `json:"status"`
	Note       string `json:"note,omitempty"`
}

// RegistryView counts the registry rows per handler and in total.
type RegistryView struct {
	InProgress int64                   `json:"in_progress"`
	Expired    int64                   `json:"expired"`
	Failed     int64                   `json:"failed"`
	Dead       int64                   `json:"dead"`
	Handlers   []registry.HandlerStats `json:"handlers"`
}

// ParkedView counts the relay's parked records.
type ParkedView struct {
	Parked int64 `json:"parked"`
}

// ProjectionView is one projection's versions.
type ProjectionView struct {
	Name        string                       `json:"name"`
	CodeVersion int                          `json:"code_version"`
	Live        int                          `json:"live"`
	Versions    []int                        `json:"versions"`
	Indices     []projectionworker.IndexInfo `json:"indices"`
	// Running is false when no version's consumer group exists: the
	// projection is configured but no worker runs it.
	Running bool `json:"running"`
}

func (s *Server) overview(r *http.Request) (any, error) {
	ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
	defer cancel()
	ov := &Overview{At: time.Now().UTC(), Groups: []GroupView{}, DLQ: []dlq.Counts{}, Projections: []ProjectionView{}, Jobs: s.jobs.list(), Errors: map[string]string{}}
	s.overviewStore(ctx, ov)
	s.overviewRelay(ctx, ov)
	s.overviewRegistry(ctx, ov)
	groups := s.overviewProjections(ctx, ov)
	groups, configured := s.configuredGroups(groups)
	if !s.overviewGroups(ctx, ov, groups, configured, s.workerPauses(ctx)) {
		return *ov, nil // Kafka is out of reach: no DLQ counts either
	}
	s.overviewDLQ(ctx, ov)
	if len(ov.Errors) == 0 {
		ov.Errors = nil
	}
	return *ov, nil
}

// fail records that part of the overview could not be read.
func (ov *Overview) fail(part string, err error) { ov.Errors[part] = err.Error() }

// overviewStore reads the event store's head, per shard on a store of
// several.
func (s *Server) overviewStore(ctx context.Context, ov *Overview) {
	if s.opts.Store == nil {
		return
	}
	if s.opts.Store.Shards() > 1 {
		heads, err := s.opts.Store.Heads(ctx)
		if err != nil {
			ov.fail("store", err)
			return
		}
		ov.Store.Shards = make([]ShardHeadView, len(heads))
		for i, h := range heads {
			ov.Store.Shards[i] = ShardHeadView{Shard: h.Shard, Head: h.Position}
			ov.Store.Head += h.Position
		}
		return
	}
	if h, err := s.opts.Store.Head(ctx); err != nil {
		ov.fail("store", err)
	} else {
		ov.Store.Head = h
	}
}

// overviewRelay reads the relay's checkpoint (its lag behind the store's
// head), its lease and its parked records.
func (s *Server) overviewRelay(ctx context.Context, ov *Overview) {
	cfg := s.opts.Process
	ov.Relay = RelayView{Name: cfg.Relay.Name, LeaseState: "none"}
	if st := s.opts.Store; st != nil && st.Shards() > 1 && s.opts.Bucket != nil {
		s.overviewRelayShards(ctx, ov)
		return
	}
	if s.opts.Bucket != nil {
		cp, _, found, err := relay.NewCheckpointStore(s.opts.Bucket, cfg.Relay.CheckpointKey).Load(ctx)
		if err != nil {
			ov.fail("relay", err)
		} else {
			ov.Relay.Found, ov.Relay.Checkpoint, ov.Relay.UpdatedAt, ov.Relay.PendingGap = found, cp.Position, cp.UpdatedAt, len(cp.PendingGaps)
			ov.Relay.Lag = max(ov.Store.Head-cp.Position, 0)
		}
	}
	if info, ok, err := relay.NewLease(s.opts.StorePool, cfg.Relay.Name, "", time.Second).Info(ctx); err != nil {
		ov.fail("relay_lease", err)
	} else if ok {
		ov.Relay.Leader, ov.Relay.Epoch, ov.Relay.LeaseState = info.Holder, info.Epoch, "held"
		if info.Expired {
			ov.Relay.LeaseState = "expired"
		}
	}
	if n, err := relay.NewParkedStore(s.opts.StorePool).Count(ctx, cfg.Relay.Name); err != nil {
		ov.fail("parked", err)
	} else {
		ov.Parked.Parked = n
	}
}

// overviewRelayShards is overviewRelay on a store of more than one shard:
// every shard's checkpoint and lease (relay.Statuses) and their sums.
func (s *Server) overviewRelayShards(ctx context.Context, ov *Overview) {
	cfg := s.opts.Process
	sts, err := relay.Statuses(ctx, s.opts.Store, s.opts.Bucket, s.opts.StorePool, cfg.Relay)
	if err != nil {
		ov.fail("relay", err)
		return
	}
	holders := map[string]bool{}
	var names []string
	ov.Relay.Found, ov.Relay.LeaseState = true, "held"
	for _, st := range sts {
		v := RelayShardView{Shard: st.Shard, Checkpoint: st.Checkpoint.Position, Found: st.Found, Lag: st.Lag(), LeaseState: "none"}
		if st.LeaseFound {
			v.Leader, v.Epoch, v.LeaseState = st.Lease.Holder, st.Lease.Epoch, "held"
			if st.Lease.Expired {
				v.LeaseState = "expired"
			}
			if !holders[v.Leader] && !st.Lease.Expired {
				holders[v.Leader] = true
				names = append(names, v.Leader)
			}
		}
		ov.Relay.Shards = append(ov.Relay.Shards, v)
		ov.Relay.Found = ov.Relay.Found && st.Found
		ov.Relay.Checkpoint += v.Checkpoint
		ov.Relay.Lag += v.Lag
		ov.Relay.PendingGap += len(st.Checkpoint.PendingGaps)
		ov.Relay.Epoch = max(ov.Relay.Epoch, v.Epoch)
		if st.Checkpoint.UpdatedAt.After(ov.Relay.UpdatedAt) {
			ov.Relay.UpdatedAt = st.Checkpoint.UpdatedAt
		}
		if v.LeaseState != "held" && ov.Relay.LeaseState == "held" {
			ov.Relay.LeaseState = v.LeaseState
		}
	}
	ov.Relay.Leader = strings.Join(names, ",")
	if n, err := relay.NewParkedStore(s.opts.StorePool).Count(ctx, cfg.Relay.Name); err != nil {
		ov.fail("parked", err)
	} else {
		ov.Parked.Parked = n
	}
}

// overviewRegistry counts the registry rows per handler and in total.
func (s *Server) overviewRegistry(ctx context.Context, ov *Overview) {
	st, err := s.opts.Registry.Stats(ctx)
	if err != nil {
		ov.fail("registry", err)
		return
	}
	ov.Registry.Handlers = st
	for _, h := range st {
		ov.Registry.InProgress += h.InProgress
		ov.Registry.Expired += h.Expired
		ov.Registry.Failed += h.Failed
		ov.Registry.Dead += h.Dead
	}
}

// overviewGroupRef is a worker group the overview reads the lag of.
type overviewGroupRef struct {
	group, topic, handler string
	proj                  int // index in ov.Projections, -1 for the instance worker
}

// overviewProjections lists the projections' versions from their indices,
// and returns the groups to read: the instance worker's and one per
// projection version.
func (s *Server) overviewProjections(ctx context.Context, ov *Overview) []overviewGroupRef {
	cfg := s.opts.Process
	groups := []overviewGroupRef{{cfg.Kafka.Group(instanceworker.GroupName), cfg.Kafka.CommandsTopic, instanceworker.HandlerName, -1}}
	for _, p := range s.opts.Projections {
		pv := ProjectionView{Name: p.Name(), CodeVersion: p.Version(), Versions: []int{}, Indices: []projectionworker.IndexInfo{}}
		if s.opts.ES != nil {
			idx, err := projectionworker.Indices(ctx, s.opts.ES, cfg.Elasticsearch.IndexPrefix, p.Name())
			if err != nil {
				ov.fail("projection "+p.Name(), err)
			}
			seen := map[int]bool{}
			for _, i := range idx {
				pv.Indices = append(pv.Indices, i)
				if i.Live {
					pv.Live = max(pv.Live, i.Version)
				}
				if !seen[i.Version] {
					seen[i.Version] = true
					pv.Versions = append(pv.Versions, i.Version)
				}
			}
			sort.Ints(pv.Versions)
		}
		versions := pv.Versions
		if len(versions) == 0 {
			versions = []int{p.Version()}
		}
		for _, v := range versions {
			groups = append(groups, overviewGroupRef{cfg.Kafka.Group(projectionworker.GroupName(p.Name(), v)), cfg.Kafka.EventsTopic, projectionworker.HandlerName(p.Name(), v), len(ov.Projections)})
		}
		ov.Projections = append(ov.Projections, pv)
	}
	return groups
}

// configuredGroups adds the groups this deployment runs, those of another
// handler too, and says which groups are configured.
func (s *Server) configuredGroups(groups []overviewGroupRef) ([]overviewGroupRef, map[string]bool) {
	configured := map[string]bool{}
	listed := map[string]bool{}
	for _, g := range groups {
		listed[g.group] = true
	}
	for _, w := range s.opts.Workers {
		configured[w.Group] = true
		if !listed[w.Group] {
			groups = append(groups, overviewGroupRef{w.Group, s.opts.Process.Kafka.EventsTopic, w.Handler, -1})
		}
	}
	return groups, configured
}

// overviewGroups reads each group's lag from Kafka into ov.Groups, and
// marks the projections whose group exists as running. It returns false
// when there is no Kafka client: every group is then listed as unknown.
func (s *Server) overviewGroups(ctx context.Context, ov *Overview, groups []overviewGroupRef, configured map[string]bool, pauses map[string]PauseWorkers) bool {
	cl, err := kafka.NewClient(s.opts.Process.Kafka)
	if err != nil {
		ov.fail("kafka", err)
		for _, g := range groups {
			gv := GroupView{Group: g.group, Topic: g.topic, Handler: g.handler, Partitions: []worker.PartitionLag{}, Error: err.Error(),
				Configured: configured[g.group], Status: "unknown"}
			s.groupPauseView(ctx, &gv, pauses)
			ov.Groups = append(ov.Groups, gv)
		}
		return false
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for _, g := range groups {
		gv := GroupView{Group: g.group, Topic: g.topic, Handler: g.handler, Partitions: []worker.PartitionLag{}, Configured: configured[g.group]}
		l, err := worker.Lag(ctx, adm, g.group, g.topic)
		if err != nil {
			gv.Error, gv.Status = err.Error(), "unknown"
			s.groupPauseView(ctx, &gv, pauses)
			ov.Groups = append(ov.Groups, gv)
			continue
		}
		exists := l.Members > 0
		for _, p := range l.Partitions {
			exists = exists || p.Committed >= 0
		}
		if !exists {
			ov.NotRunning = append(ov.NotRunning, g.group)
		} else if g.proj >= 0 {
			ov.Projections[g.proj].Running = true
		}
		if !exists && !gv.Configured {
			continue // neither run here nor in Kafka: a version nobody runs
		}
		groupStatus(&gv, l, exists)
		s.groupPauseView(ctx, &gv, pauses)
		ov.Groups = append(ov.Groups, gv)
	}
	return true
}

// groupStatus fills in gv's status, lag and note from the group's lag l
// (exists: the group has members or committed offsets).
func groupStatus(gv *GroupView, l worker.GroupLag, exists bool) {
	switch {
	case !exists:
		gv.Status, gv.State = "not running", l.State
		gv.Note = "configured, but no worker has joined this group and nothing is committed: its lag is not counted until one runs"
	case l.Members == 0:
		gv.Status = "stopped"
		gv.Lag, gv.State, gv.Partitions = l.Total, l.State, l.Partitions
		gv.Note = "no worker in the group; the lag is what it will read when one joins"
	default:
		gv.Status = "running"
		gv.Lag, gv.Members, gv.State, gv.Partitions = l.Total, l.Members, l.State, l.Partitions
	}
}

// overviewDLQ counts the records of each dead-letter topic.
func (s *Server) overviewDLQ(ctx context.Context, ov *Overview) {
	for _, topic := range s.opts.DLQTopics {
		q, err := dlq.New(dlq.Config{Topic: topic, Kafka: s.opts.Process.Kafka}, dlq.Deps{})
		if err != nil {
			ov.fail("dlq "+topic, err)
			continue
		}
		c, err := q.Count(ctx)
		q.Close()
		if err != nil {
			ov.fail("dlq "+topic, err)
			continue
		}
		ov.DLQ = append(ov.DLQ, c)
	}
}

// groupPauseView reads the group's pause flag through the registry (its
// owner) into gv, with the state its workers report (pauses, by handler);
// a registry error is the group's pause_error, the rest of the group is
// still shown.
func (s *Server) groupPauseView(ctx context.Context, gv *GroupView, pauses map[string]PauseWorkers) {
	p, err := s.opts.Registry.GroupPaused(ctx, gv.Group)
	if err != nil {
		gv.PauseError = err.Error()
		return
	}
	w := pauses[gv.Handler]
	gv.Paused, gv.Pause = &p.Paused, &p
	gv.PauseState, gv.PauseWorkers = pauseState(p.Paused, w), &w
}
