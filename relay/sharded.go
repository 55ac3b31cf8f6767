package relay

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/shared/observability"
)

// A relay leader per shard (docs/relay.md#shards). Over a store of N > 1
// shards every shard has a lease of its own in sluice.relay_leases
// (ShardLeaseName), fenced by its epoch exactly like the one lease of a
// store of one shard, and a checkpoint object of its own
// (ShardCheckpointKey). A replica runs the loop below: it renews its
// member row (sluice.relay_members, expiring after the lease), counts the
// live replicas R, and keeps about ceil(N/R) shard leases: it takes free
// (expired or released) shards while it holds fewer, and releases the
// shards above its share (after a final checkpoint, Lease.Release) so
// that another replica takes them at once. A replica that dies stops
// renewing its member row and its leases: after the lease both have
// expired, the others count one replica fewer, their share grows and
// they take its shards. Nothing here decides who leads a shard but the
// lease row's conditional update; the member rows only size the shares.
//
// Each shard it leads is published by a Relay of its own (a "unit"):
// today's leader over that shard's log (eventstore.ShardLog), with its own
// checkpoint, gap tracker and lookback, parked records (shard column),
// metrics (shard label), liveness heartbeat and Kafka producers (open
// while it leads the shard), so a shard held back (a late commit, a
// refused record, a slow checkpoint) holds back no other shard, and a
// shard's leader that is stuck says so by its shard (Live, Ready). The
// store-wide Repair of hole rule 3 runs once for all of them (repairs.go).
// Records keep the aggregate as their Kafka key, and an aggregate lives in
// one shard, so per-aggregate order in Kafka holds across a change of a
// shard's leader as it does across a change of the one leader.

// errKilled is the cause a test cancels a relay's context with to simulate
// kill -9: no final checkpoint, no lease released, the member row left to
// expire.
var errKilled = errors.New("relay: killed (test)")

// sharded is the state of a relay over a store of more than one shard.
type sharded struct {
	parent  *Relay
	reg     prometheus.Registerer
	bucket  objstore.Bucket
	members *members
	// changed is poked when a shard's leadership ends.
	changed chan struct{}

	mu    sync.Mutex
	units map[int]*Relay    // created when a shard is first led; kept
	runs  map[int]*shardRun // the shards led now
}

// shardRun is one shard's leadership in progress.
type shardRun struct {
	unit   *Relay
	epoch  int64
	cancel context.CancelCauseFunc
	done   chan struct{}
}

func newSharded(deps Deps, parent *Relay) *sharded {
	return &sharded{
		parent:  parent,
		reg:     deps.Registerer,
		bucket:  deps.Bucket,
		members: &members{pool: deps.Pool, name: parent.cfg.Name, holder: parent.cfg.Holder, ttl: parent.cfg.LeaderLease},
		changed: make(chan struct{}, 1),
		units:   map[int]*Relay{},
		runs:    map[int]*shardRun{},
	}
}

// allUnits returns every shard's relay created so far.
func (s *sharded) allUnits() []*Relay {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Relay, 0, len(s.units))
	for _, u := range s.units {
		out = append(out, u)
	}
	return out
}

// running returns the relays of the shards led now, by shard.
func (s *sharded) running() []*Relay {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Relay, 0, len(s.runs))
	for _, run := range s.runs {
		out = append(out, run.unit)
	}
	slices.SortFunc(out, func(a, b *Relay) int { return a.shard - b.shard })
	return out
}

// Held returns the shards this replica leads now, ascending (over a store
// of one shard: [0] while it holds the lease).
func (r *Relay) Held() []int {
	if r.sh == nil {
		if r.Leader() {
			return []int{0}
		}
		return nil
	}
	r.sh.mu.Lock()
	defer r.sh.mu.Unlock()
	out := make([]int, 0, len(r.sh.runs))
	for sh := range r.sh.runs {
		out = append(out, sh)
	}
	slices.Sort(out)
	return out
}

// notify passes a commit-stream notification to the leader of its shard
// (a Resync to every shard led here): it reads its head in its next cycle.
// There are no commit hints over a store of more than one shard: a
// block's segment is named after the group's lowest shard, which the
// notification does not say.
func (s *sharded) notify(n eventstore.Notification) {
	for _, u := range s.running() {
		if n.Kind != eventstore.Resync && u.shard != n.Shard {
			continue
		}
		u.m.notes.WithLabelValues(n.Kind.String()).Inc()
		if n.Kind == eventstore.Reserved {
			continue
		}
		u.hints.missed.Store(true)
		u.poke()
	}
}

// pokeAll wakes every shard led now.
func (s *sharded) pokeAll() {
	for _, u := range s.running() {
		u.hints.missed.Store(true)
		u.poke()
	}
}

// unit returns the relay of shard sh, creating it (with its metrics,
// heartbeat and periodic log line) on first use. Its Kafka producers live
// for one leadership (openProducers, startShard).
func (r *Relay) unit(ctx context.Context, wg *sync.WaitGroup, sh int) *Relay {
	s := r.sh
	s.mu.Lock()
	u := s.units[sh]
	s.mu.Unlock()
	if u != nil {
		return u
	}
	u = &Relay{
		cfg:           r.cfg,
		kafka:         r.kafka,
		store:         r.store,
		shard:         sh,
		shards:        r.shards,
		sl:            r.store.ShardLog(sh),
		hooks:         r.hooks,
		pool:          r.pool,
		crasher:       r.crasher,
		ackHook:       r.ackHook,
		lingerWait:    r.lingerWait,
		parked:        r.parked,
		router:        r.router,
		tracer:        r.tracer,
		cps:           NewCheckpointStore(s.bucket, ShardCheckpointKey(r.cfg.CheckpointKey, sh, r.shards)),
		lease:         NewLease(r.pool, ShardLeaseName(r.cfg.Name, sh, r.shards), r.cfg.Holder, r.cfg.LeaderLease),
		m:             newMetrics(s.reg, r.cfg.Name, strconv.Itoa(sh), r.router.Topics()),
		log:           r.log.With("shard", sh),
		hb:            observability.NewHeartbeatClock(r.liveAge, r.hooks.hbNow),
		liveAge:       r.liveAge,
		repairs:       r.repairs,
		wake:          make(chan struct{}, 1),
		gets:          make(chan struct{}, r.cfg.ParallelGets),
		ckptMovedAt:   time.Now(),
		topicsCreated: map[string]bool{},
		topicsRefused: map[string]topicRefusal{},
	}
	u.obj.init(r.cfg.ObjectStoreTimeout)
	s.mu.Lock()
	s.units[sh] = u
	s.mu.Unlock()
	if r.cfg.MetricsLogInterval > 0 {
		wg.Go(func() { u.logMetrics(ctx) })
	}
	return u
}

// openProducers builds the Kafka producers of a shard's leadership (closed
// by startShard when it ends).
func (r *Relay) openProducers() error {
	client, solo, err := newProducers(r.kafka, r.cfg, r.hooks)
	if err != nil {
		return fmt.Errorf("relay: shard %d: %w", r.shard, err)
	}
	r.client, r.solo = client, solo
	return nil
}

// runSharded is Run over a store of more than one shard: the member
// heartbeat and the balance of the shard leases, once per standby interval
// (min(lease/4, poll)) and whenever a shard's leadership ends, until ctx
// is done. Then every shard's leader writes its checkpoint and releases
// its lease, and the member row is deleted (unless killed).
func (r *Relay) runSharded(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Go(func() { r.listen(ctx) })
	if w := r.extWake; w != nil {
		wg.Go(func() { forwardWakes(ctx, w, r.sh.pokeAll) })
	}
	defer r.stopShards(ctx)
	tick := min(r.cfg.LeaderLease/4, r.cfg.PollInterval)
	bo := newBackoff(100*time.Millisecond, 5*time.Second)
	released := map[int]time.Time{}
	t := time.NewTimer(tick)
	defer t.Stop()
	for {
		r.hb.Beat()
		if ctx.Err() != nil {
			return nil
		}
		r.reapShards()
		v, err := r.sh.members.beat(ctx)
		if err == nil {
			err = r.balance(ctx, &wg, v, released, tick)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			r.setLoopErr(err)
			r.log.Warn("relay: shard leases unavailable; retrying", "err", err)
			sleep(ctx, bo.Next())
			continue
		}
		r.setLoopErr(nil)
		bo.Reset()
		resetTimer(t, tick)
		select {
		case <-ctx.Done():
		case <-r.sh.changed:
		case <-t.C:
		}
	}
}

// reapShards forgets the leaderships that ended (lease lost, fenced, an
// error that ended them); their shards are free to be taken again.
func (r *Relay) reapShards() {
	s := r.sh
	s.mu.Lock()
	defer s.mu.Unlock()
	for sh, run := range s.runs {
		select {
		case <-run.done:
			delete(s.runs, sh)
		default:
		}
	}
}

// stopShards ends every leadership (ctx is done: each writes its final
// checkpoint and releases its lease, unless killed) and leaves the
// members.
func (r *Relay) stopShards(ctx context.Context) {
	s := r.sh
	s.mu.Lock()
	runs := make([]*shardRun, 0, len(s.runs))
	for _, run := range s.runs {
		runs = append(runs, run)
	}
	s.mu.Unlock()
	for _, run := range runs {
		<-run.done
	}
	r.reapShards()
	if errors.Is(context.Cause(ctx), errKilled) {
		return
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.members.leave(lctx); err != nil {
		r.log.Warn("relay: member row not deleted; it expires by itself", "err", err)
	}
}

// balance keeps this replica's share of the shard leases (see the top of
// this file): with R live replicas, at most ceil(N/R); more than
// floor(N/R) only while no other live replica holds fewer than
// floor(N/R); free shards are taken up to ceil(N/R). A shard this replica
// released is not taken back by it for two ticks, so that another takes
// it.
func (r *Relay) balance(ctx context.Context, wg *sync.WaitGroup, v memberView, released map[int]time.Time, tick time.Duration) error {
	n := r.shards
	held := r.Held()
	self := r.cfg.Holder
	v.counts[self] = len(held)
	live := len(v.counts)
	hi, lo := (n+live-1)/live, n/live
	below := false
	for h, c := range v.counts {
		if h != self && c < lo {
			below = true
		}
	}
	for sh, at := range released {
		if time.Since(at) > 2*tick {
			delete(released, sh)
		}
	}
	switch {
	case len(held) > hi:
		r.releaseShards(held[hi:], released, live)
		return nil
	case below && len(held) > lo:
		r.releaseShards(held[len(held)-1:], released, live)
		return nil
	case len(held) >= hi:
		return nil
	}
	mine := len(held)
	start := holderOffset(self, n)
	for k := 0; k < n && mine < hi; k++ {
		sh := (start + k) % n
		if _, recent := released[sh]; recent || v.taken[sh] || slices.Contains(held, sh) {
			continue
		}
		lease := NewLease(r.pool, ShardLeaseName(r.cfg.Name, sh, n), self, r.cfg.LeaderLease)
		epoch, ok, err := lease.TryAcquire(ctx)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		u := r.unit(ctx, wg, sh)
		if err := u.openProducers(); err != nil {
			return errors.Join(err, lease.Release(ctx, epoch))
		}
		r.startShard(ctx, wg, u, epoch)
		mine++
	}
	return nil
}

// holderOffset is where a replica starts looking for free shards, so that
// replicas starting together try different shards first.
func holderOffset(holder string, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(holder))
	return int(h.Sum32() % uint32(n))
}

// startShard runs the leadership of u's shard with epoch in the background.
// When it ends (after a graceful one's handover: batches in flight
// acknowledged, final checkpoint, lease released), the shard's Kafka
// producers are closed: a replica keeps open only the producers of the
// shards it leads.
func (r *Relay) startShard(ctx context.Context, wg *sync.WaitGroup, u *Relay, epoch int64) {
	uctx, cancel := context.WithCancelCause(ctx)
	run := &shardRun{unit: u, epoch: epoch, cancel: cancel, done: make(chan struct{})}
	u.hb.Beat() // a new leadership starts fresh, however long the shard was not led here
	r.sh.mu.Lock()
	r.sh.runs[u.shard] = run
	r.sh.mu.Unlock()
	wg.Go(func() {
		defer func() {
			cancel(nil)
			u.closeProducers()
			close(run.done)
			select {
			case r.sh.changed <- struct{}{}:
			default:
			}
		}()
		u.leadWithLease(uctx, epoch)
	})
}

// releaseShards ends the leadership of shards gracefully, so that another
// replica takes them at once: each shard's leader waits for its batches in
// flight to be acknowledged (drainCtx), writes its final checkpoint
// (fenced by its epoch) and then releases its lease (Lease.Release).
func (r *Relay) releaseShards(shards []int, released map[int]time.Time, live int) {
	r.sh.mu.Lock()
	var cancelled []int
	for _, sh := range shards {
		if run := r.sh.runs[sh]; run != nil {
			r.log.Info("relay: releasing a shard above this replica's share", "shard", sh, "replicas", live, "shards", r.shards)
			released[sh] = time.Now()
			run.cancel(context.Canceled)
			cancelled = append(cancelled, sh)
		}
	}
	r.sh.mu.Unlock()
	if f := r.hooks.released; f != nil && len(cancelled) > 0 {
		f(cancelled)
	}
}

// readySharded is Ready over a store of more than one shard: red while the
// member heartbeat or the leases fail, or any shard led here is not ready
// or its leader's loop has stopped turning (Live), naming the shard.
func (r *Relay) readySharded(ctx context.Context) error {
	r.mu.Lock()
	loopErr := r.loopErr
	r.mu.Unlock()
	errs := []error{}
	if loopErr != nil {
		errs = append(errs, fmt.Errorf("relay: %w", loopErr))
	}
	for _, u := range r.sh.running() {
		if err := u.Ready(ctx); err != nil {
			errs = append(errs, fmt.Errorf("shard %d: %w", u.shard, err))
		}
		if err := u.hb.Check(ctx); err != nil {
			errs = append(errs, fmt.Errorf("shard %d: stuck: %w", u.shard, err))
		}
	}
	return errors.Join(errs...)
}
