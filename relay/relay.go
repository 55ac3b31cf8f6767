package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/eventstore"
	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/shared/backoff"
	"github.com/sluicehq/sluice/shared/crashpoint"
	"github.com/sluicehq/sluice/shared/kafka"
	"github.com/sluicehq/sluice/shared/observability"
	"github.com/sluicehq/sluice/shared/recordformat"
	"github.com/sluicehq/sluice/shared/tracing"
)

// Relay publishes the event store into Kafka (docs/relay.md). Create it with New,
// run it with Run, release it with Close.
//
// Over a store of one shard a Relay is that shard's leader (the fields
// below). Over a store of more (docs/relay.md#shards) the Relay New returns
// runs the shards' leases and balance (sharded.go) and creates one Relay
// per shard it leads, with the shard's log, checkpoint, lease, parked
// records, metrics and Kafka producers.
type Relay struct {
	cfg   Config       // defaults applied (Config.withDefaults)
	kafka kafka.Config // Deps.Kafka, defaults applied
	store *eventstore.Store
	// shard is the shard this relay publishes (0 for a store of one
	// shard), shards the store's number of shards, sl the shard's log.
	shard  int
	shards int
	sl     eventstore.ShardLog
	// sh is the state of the relay over a store of more than one shard
	// (sharded.go); nil on a shard's relay and over a store of one shard.
	sh      *sharded
	hooks   hooks
	pool    *pgxpool.Pool
	crasher *crashpoint.Crasher
	extWake <-chan struct{} // Deps.Wake
	ackHook func(ids []string, at time.Time)
	// lingerWait replaces the wake linger's timer (a test hook).
	lingerWait func(ctx context.Context, d time.Duration)
	client     *kgo.Client
	// solo produces one record at a time, alone in its batch: the retries
	// of a record Kafka refused (parking.go), so a record is judged on its
	// own and never for a neighbour in a broker-side batch.
	solo   *kgo.Client
	parked *ParkedStore
	router *Router
	tracer trace.Tracer // nil: tracing off
	cps    *CheckpointStore
	lease  *Lease
	m      *metrics
	log    *slog.Logger
	// hb is the liveness heartbeat of this relay's loop: over a store of
	// more than one shard, the replica's balance loop on the Relay New
	// returns and each shard's leader on its own (Live).
	hb      *observability.Heartbeat
	liveAge time.Duration
	// repairs runs Store.Repair once for every leader of the process
	// (repairs.go); the shards' relays share their parent's.
	repairs *repairs
	wake    chan struct{}
	gets    chan struct{} // segment GETs in flight (ParallelGets)
	hints   hints         // commit notifications' segments (hints.go)

	mu            sync.Mutex
	leader        bool
	loopErr       error
	kafkaErr      error
	head          int64
	ckpt          int64
	ckptMovedAt   time.Time
	topicsCreated map[string]bool
	// topicsRefused are topics the broker refused to create for a reason
	// of their own (parking.go); their records are parked at once until
	// the refusal expires.
	topicsRefused map[string]topicRefusal
	obj           objWatch
}

// New returns a relay over deps.Store (its bucket, deps.Bucket, holds the
// checkpoint; deps.Pool holds the lease table). cfg's zero fields take
// their defaults. Over a store of more than one shard it leads the shards
// it holds a lease of (docs/relay.md#shards). It builds its own Kafka
// producers from deps.Kafka; Close releases them. opts are test hooks.
func New(cfg Config, deps Deps, opts ...Option) (*Relay, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	shards := 1
	if deps.Store != nil {
		shards = max(deps.Store.Shards(), 1)
	}
	var h hooks
	for _, o := range opts {
		o(&h)
	}
	k := kafkaWithDefaults(deps.Kafka)
	logger := deps.Logger
	if logger == nil {
		logger = slog.Default()
	}
	client, solo, err := newProducers(k, cfg, h)
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	hbAge := max(30*time.Second, 3*cfg.PollInterval, 3*cfg.KafkaFlushTimeout, 3*cfg.LeaderLease)
	format, err := recordformat.Parse(k.RecordFormat)
	if err != nil {
		client.Close()
		solo.Close()
		return nil, fmt.Errorf("relay: KAFKA_RECORD_FORMAT: %w", err)
	}
	router := NewRouter(k.CommandsTopic, k.EventsTopic, cfg.Routes).WithFormat(format)
	reg := deps.Registerer
	if shards > 1 {
		// The shards' relays create their own producers and metrics
		// (sharded.go); these only checked the configuration.
		client.Close()
		solo.Close()
		client, solo, reg = nil, nil, nil
	}
	r := &Relay{
		cfg:           cfg,
		kafka:         k,
		store:         deps.Store,
		shards:        shards,
		hooks:         h,
		pool:          deps.Pool,
		crasher:       deps.Crasher,
		extWake:       deps.Wake,
		ackHook:       h.ackHook,
		lingerWait:    h.lingerWait,
		client:        client,
		solo:          solo,
		parked:        NewParkedStore(deps.Pool),
		router:        router,
		tracer:        tracing.Tracer(deps.TracerProvider),
		cps:           NewCheckpointStore(deps.Bucket, ShardCheckpointKey(cfg.CheckpointKey, 0, shards)),
		lease:         NewLease(deps.Pool, ShardLeaseName(cfg.Name, 0, shards), cfg.Holder, cfg.LeaderLease),
		m:             newMetrics(reg, cfg.Name, "0", router.Topics()),
		log:           logger.With("relay", cfg.Name),
		hb:            observability.NewHeartbeatClock(hbAge, h.hbNow),
		liveAge:       hbAge,
		repairs:       &repairs{},
		wake:          make(chan struct{}, 1),
		gets:          make(chan struct{}, cfg.ParallelGets),
		ckptMovedAt:   time.Now(),
		topicsCreated: map[string]bool{},
		topicsRefused: map[string]topicRefusal{},
	}
	if deps.Store != nil {
		r.sl = deps.Store.ShardLog(0)
	}
	if shards > 1 {
		r.sh = newSharded(deps, r)
	}
	r.obj.init(cfg.ObjectStoreTimeout)
	if deps.Health != nil {
		deps.Health.AddReadiness("relay", r.Ready)
		deps.Health.AddLiveness("relay-loop", r.Live)
	}
	return r, nil
}

// newProducers builds a leader's Kafka producers: client for the
// pipeline, solo for the retries of a refused record (one at a time).
func newProducers(k kafka.Config, cfg Config, h hooks) (client, solo *kgo.Client, err error) {
	client, err = kafka.NewClient(k, append([]kgo.Opt{kafka.MaxBuffered((pipelineDepth + 1) * cfg.KafkaFlushBatchSize)}, h.kafkaOpts...)...)
	if err != nil {
		return nil, nil, err
	}
	solo, err = kafka.NewClient(k, append([]kgo.Opt{kafka.MaxBuffered(1)}, h.kafkaOpts...)...)
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return client, solo, nil
}

// Close releases the Kafka producers (the shards' too). Call it after Run
// returned.
func (r *Relay) Close() {
	r.closeProducers()
	if r.sh != nil {
		for _, u := range r.sh.allUnits() {
			u.Close()
		}
	}
}

// closeProducers closes the Kafka producers, if open.
func (r *Relay) closeProducers() {
	if r.client != nil {
		r.client.Close()
		r.client = nil
	}
	if r.solo != nil {
		r.solo.Close()
		r.solo = nil
	}
}

// Live is the liveness check "relay-loop": red when the relay's loop has
// not turned for max(30 s, 3 × poll, 3 × flush timeout, 3 × lease). Over a
// store of more than one shard the replica's loop (member heartbeat,
// balance) and the loop of every shard led here each have a heartbeat of
// their own, and a shard's leader that is stuck turns it red naming its
// shard, however busy the others are.
func (r *Relay) Live(ctx context.Context) error {
	err := r.hb.Check(ctx)
	if r.sh == nil {
		return err
	}
	var errs []error
	if err != nil {
		errs = append(errs, fmt.Errorf("relay: %w", err))
	}
	for _, u := range r.sh.running() {
		if err := u.hb.Check(ctx); err != nil {
			errs = append(errs, fmt.Errorf("shard %d: %w", u.shard, err))
		}
	}
	return errors.Join(errs...)
}

// Leader reports whether this replica currently holds the lease (over a
// store of more than one shard: the lease of at least one shard, Held).
func (r *Relay) Leader() bool {
	if r.sh != nil {
		return len(r.Held()) > 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.leader
}

// Ready is the readiness check: red while the loop fails (Postgres, object
// storage), Kafka does not acknowledge, or the head grows while the
// checkpoint has not moved for EVENT_PUBLISHER_STALL_SECONDS.
func (r *Relay) Ready(ctx context.Context) error {
	if r.sh != nil {
		return r.readySharded(ctx)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.obj.stalled(); err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	switch {
	case r.loopErr != nil:
		return fmt.Errorf("relay: %w", r.loopErr)
	case r.kafkaErr != nil:
		return fmt.Errorf("relay: kafka: %w", r.kafkaErr)
	case r.leader && r.head > r.ckpt && time.Since(r.ckptMovedAt) > r.cfg.StallAfter:
		return fmt.Errorf("relay: stalled: head %d, checkpoint %d has not moved for %s", r.head, r.ckpt, time.Since(r.ckptMovedAt).Round(time.Second))
	}
	return nil
}

func (r *Relay) setLoopErr(err error) {
	r.mu.Lock()
	r.loopErr = err
	r.mu.Unlock()
}

func (r *Relay) setKafkaErr(err error) {
	r.mu.Lock()
	r.kafkaErr = err
	r.mu.Unlock()
}

func (r *Relay) setLeader(on bool) {
	r.mu.Lock()
	r.leader = on
	r.ckptMovedAt = time.Now()
	r.mu.Unlock()
	if on {
		r.m.leader.Set(1)
	} else {
		r.m.leader.Set(0)
	}
}

// lastHead returns the head the last cycle saw (or a hinted commit raised).
func (r *Relay) lastHead() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.head
}

// noteProgress records head and checkpoint for lag, metrics and the stall
// check.
func (r *Relay) noteProgress(head, ckpt int64) {
	r.mu.Lock()
	if head >= 0 {
		r.head = head
	}
	if ckpt != r.ckpt || r.head <= ckpt {
		r.ckptMovedAt = time.Now()
	}
	r.ckpt = ckpt
	h := r.head
	r.mu.Unlock()
	r.m.head.Set(float64(h))
	r.m.checkpoint.Set(float64(ckpt))
	r.m.lag.Set(float64(max(h-ckpt, 0)))
}

// poke wakes the loop (coalescing).
func (r *Relay) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// forwardWakes calls poke for each external wake-up (Deps' wake channel)
// until ctx is done or the channel is closed.
func forwardWakes(ctx context.Context, w <-chan struct{}, poke func()) {
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-w:
			if !ok {
				return
			}
			poke()
		}
	}
}

// Run runs the relay until ctx is done: it competes for the lease, and
// while it holds it, publishes. It returns nil after ctx is done (having
// released the lease), or an error that prevents it from running at all.
func (r *Relay) Run(ctx context.Context) error {
	if r.sh != nil {
		return r.runSharded(ctx)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Go(func() { r.listen(ctx) })
	if w := r.extWake; w != nil {
		wg.Go(func() { forwardWakes(ctx, w, r.poke) })
	}
	if r.cfg.MetricsLogInterval > 0 {
		wg.Go(func() { r.logMetrics(ctx) })
	}
	standby := min(r.cfg.LeaderLease/4, r.cfg.PollInterval)
	bo := newBackoff(100*time.Millisecond, 5*time.Second)
	loggedStandby := false
	for {
		r.hb.Beat()
		if ctx.Err() != nil {
			return nil
		}
		epoch, ok, err := r.lease.TryAcquire(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			r.setLoopErr(err)
			r.log.Warn("relay: lease unavailable; retrying", "err", err)
			sleep(ctx, bo.Next())
			continue
		}
		r.setLoopErr(nil)
		bo.Reset()
		if !ok {
			if !loggedStandby {
				r.log.Info("relay: standing by; another replica holds the lease", "holder", r.cfg.Holder)
				loggedStandby = true
			}
			sleep(ctx, standby)
			continue
		}
		loggedStandby = false
		r.leadWithLease(ctx, epoch)
	}
}

// leadWithLease publishes while the lease with epoch is held.
func (r *Relay) leadWithLease(ctx context.Context, epoch int64) {
	lctx, cancel := context.WithCancelCause(ctx)
	// The lease is renewed until lead returns, not only until ctx ends: a
	// graceful stop drains the batches in flight and writes the final
	// checkpoint first, and the lease must outlast that.
	kctx, kcancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { r.keepLease(kctx, cancel, epoch) })
	r.setLeader(true)
	r.log.Info("relay: leader", "epoch", epoch, "holder", r.cfg.Holder)
	err := r.lead(lctx, epoch)
	cause := context.Cause(lctx)
	kcancel()
	cancel(nil)
	wg.Wait()
	r.setLeader(false)
	switch {
	case ctx.Err() != nil && errors.Is(context.Cause(ctx), errKilled):
		// A test's kill -9: nothing written, nothing released.
		r.log.Info("relay: killed; the lease expires by itself", "epoch", epoch)
	case ctx.Err() != nil:
		rctx, rc := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer rc()
		if err := r.lease.Release(rctx, epoch); err != nil {
			r.log.Warn("relay: lease not released; a standby takes over when it expires", "err", err)
		} else {
			r.log.Info("relay: lease released", "epoch", epoch)
		}
	case errors.Is(err, ErrFenced) || errors.Is(cause, ErrFenced):
		r.m.fenced.Inc()
		r.log.Error("relay: fenced: a newer leader owns the checkpoint; stopped publishing", "epoch", epoch, "err", errors.Join(err, cause))
	default:
		r.log.Warn("relay: leadership ended", "epoch", epoch, "err", errors.Join(err, cause))
	}
}

// keepLease renews the lease every third of its TTL and cancels lctx when
// it is lost or cannot be renewed before it would expire.
func (r *Relay) keepLease(ctx context.Context, cancel context.CancelCauseFunc, epoch int64) {
	every := r.cfg.LeaderLease / 3
	deadline := time.Now().Add(r.cfg.LeaderLease)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		start := time.Now()
		rctx, rc := context.WithTimeout(ctx, every)
		ok, err := r.lease.Renew(rctx, epoch)
		rc()
		switch {
		case err == nil && ok:
			deadline = start.Add(r.cfg.LeaderLease)
		case err == nil:
			cancel(fmt.Errorf("%w: lease of epoch %d was taken over", ErrFenced, epoch))
			return
		case ctx.Err() != nil:
			return
		default:
			r.log.Warn("relay: lease renewal failed", "err", err)
			if time.Until(deadline) < every {
				cancel(fmt.Errorf("relay: lease could not be renewed before it expires: %w", err))
				return
			}
		}
	}
}

// lead is the leader's loop: claim the checkpoint, then cycle.
func (r *Relay) lead(ctx context.Context, epoch int64) error {
	if err := r.bootstrapTopics(ctx); err != nil {
		return err
	}
	ls, err := r.claim(ctx, epoch)
	if err != nil {
		return err
	}
	defer func() { r.finalSave(ctx, ls) }()
	defer r.hints.lead(ctx)()
	bo := newBackoff(100*time.Millisecond, 5*time.Second)
	poll := time.NewTimer(r.cfg.PollInterval)
	defer poll.Stop()
	ckpt := time.NewTimer(time.Hour)
	defer ckpt.Stop()
	// handle deals with a cycle's (or a checkpoint write's) error: nil to
	// go on, or the error that ends the leadership.
	handle := func(err error) (retry bool, fatal error) {
		switch {
		case err == nil:
			r.setLoopErr(nil)
			bo.Reset()
			return false, nil
		case ctx.Err() != nil:
			return false, context.Cause(ctx)
		case errors.Is(err, ErrFenced):
			return false, err
		case errors.Is(err, ErrCheckpointMoved):
			r.log.Warn("relay: the checkpoint was changed by an operator; continuing from it", "err", err)
			r.abandonSave(ls)
			nls, err := r.claim(ctx, epoch)
			if err != nil {
				return false, err
			}
			ls = nls
			return true, nil
		default:
			r.setLoopErr(err)
			r.log.Warn("relay: cycle failed; retrying (nothing is skipped)", "err", err)
			sleep(ctx, bo.Next())
			return true, nil
		}
	}
	for {
		r.hb.Beat()
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		// Every commit notified so far is covered by this cycle (its
		// hints are taken, the head is read, after this point; a
		// notification without a hint makes it read the head, hints.go):
		// the wake-ups they left would only start a cycle with nothing to
		// do.
		drainWake(r.wake)
		if f := r.hooks.beforeCycle; f != nil {
			f(ctx, r.shard)
		}
		more, err := r.cycle(ctx, ls)
		if retry, fatal := handle(err); fatal != nil {
			return fatal
		} else if retry || more {
			continue
		}
		resetTimer(poll, r.cfg.PollInterval)
	idle:
		// Caught up: the checkpoint becomes durable within
		// CheckpointInterval; a wake-up or the poll starts the next cycle.
		var saveDone <-chan struct{}
		var ckptC <-chan time.Time
		if op := ls.inflight; op != nil {
			saveDone = op.done
		} else if ls.dirty {
			resetTimer(ckpt, max(0, r.cfg.CheckpointInterval-time.Since(ls.lastSave)))
			ckptC = ckpt.C
		}
		select {
		case <-ctx.Done():
		case <-r.wake:
			r.linger(ctx)
		case <-poll.C:
		case <-ckptC:
			r.startSave(ctx, ls)
			goto idle
		case <-saveDone:
			if retry, fatal := handle(r.collectSave(ctx, ls)); fatal != nil {
				return fatal
			} else if !retry {
				goto idle
			}
		}
	}
}

// linger waits EVENT_PUBLISHER_WAKE_LINGER after a wake-up of the idle
// loop (docs/relay.md#wake-linger): the commits notified meanwhile are
// published by the cycle that follows, with one produce request and one
// acknowledgement, instead of a cycle each. Their segments' GETs start at
// the notifications (hints.go), so the linger overlaps them.
func (r *Relay) linger(ctx context.Context) {
	d := r.cfg.WakeLinger
	if d <= 0 {
		return
	}
	if r.lingerWait != nil {
		r.lingerWait(ctx, d)
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// drainWake takes a pending wake-up, if any.
func drainWake(w chan struct{}) {
	select {
	case <-w:
	default:
	}
}

// resetTimer stops t, drains it and starts it again with d.
func resetTimer(t *time.Timer, d time.Duration) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
	t.Reset(d)
}

// abandonSave waits for a background checkpoint write whose leader state
// is being dropped (the checkpoint is claimed again); its result no longer
// matters.
func (r *Relay) abandonSave(ls *leaderState) {
	ls.dropPrefetch()
	if op := ls.inflight; op != nil {
		<-op.done
		ls.inflight = nil
	}
}

// finalSave makes the progress of a leader that is stopping durable (a
// graceful stop or a released shard hands over without duplicates: the
// walk drained the batches in flight first, drainCtx). A background write
// the stop cancelled is written again. It does nothing when the
// leadership was lost (fenced, or the lease could not be renewed).
func (r *Relay) finalSave(ctx context.Context, ls *leaderState) {
	ls.dropPrefetch()
	if !errors.Is(context.Cause(ctx), context.Canceled) {
		r.abandonSave(ls)
		return
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := r.collectSave(sctx, ls)
	if err != nil && !errors.Is(err, ErrFenced) && !errors.Is(err, ErrCheckpointMoved) {
		// Cancelled with the leadership's context (collectSave marked
		// the state dirty): write it now.
		err = nil
	}
	if err == nil && ls.dirty {
		err = r.save(sctx, ls)
	}
	if err != nil {
		r.log.Warn("relay: final checkpoint write failed; the next leader re-publishes from the last durable one", "err", err)
	}
}

// bootstrapTopics creates the routing table's topics once per process.
func (r *Relay) bootstrapTopics(ctx context.Context) error {
	if r.cfg.SkipTopicBootstrap {
		return nil
	}
	var missing []string
	r.mu.Lock()
	for _, t := range r.router.Topics() {
		if !r.topicsCreated[t] {
			missing = append(missing, t)
		}
	}
	r.mu.Unlock()
	return r.ensureTopics(ctx, missing...)
}

// topicReady creates topic (named by metadata.kafka_topic) before its first
// record, once per process. A broker refusal that is the topic's own (an
// invalid name, a '.'/'_' collision: parkReason) is retried
// EVENT_PUBLISHER_PARK_AFTER_ATTEMPTS times, then returned as a
// *topicRefusedError (the caller parks the record) and remembered for
// topicRefusalTTL; any other failure is retried without limit.
func (r *Relay) topicReady(ctx context.Context, topic string) error {
	r.mu.Lock()
	ok := r.topicsCreated[topic]
	ref, refused := r.topicsRefused[topic]
	r.mu.Unlock()
	if ok || r.cfg.SkipTopicBootstrap {
		return nil
	}
	if refused && time.Now().Before(ref.until) {
		return &topicRefusedError{topic: topic, reason: ref.reason, attempts: ref.attempts, err: ref.err}
	}
	bo := newBackoff(200*time.Millisecond, 5*time.Second)
	attempts := 0
	for {
		tctx, cancel := context.WithTimeout(ctx, r.cfg.KafkaFlushTimeout)
		err := kafka.EnsureSpec(tctx, r.client, r.topicSpec(), topic)
		cancel()
		if err == nil {
			r.setKafkaErr(nil)
			r.mu.Lock()
			r.topicsCreated[topic] = true
			delete(r.topicsRefused, topic)
			r.mu.Unlock()
			r.log.Info("relay: topics ready", "topics", []string{topic})
			return nil
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if reason, ok := parkReason(ctx, err); ok {
			attempts++
			if attempts >= r.cfg.ParkAfterAttempts {
				r.mu.Lock()
				r.topicsRefused[topic] = topicRefusal{reason: reason, attempts: attempts, err: err, until: time.Now().Add(topicRefusalTTL)}
				r.mu.Unlock()
				r.log.Error("relay: the broker refuses to create a topic; its records are parked (see `sluice relay parked list`)",
					"topic", topic, "reason", reason, "attempts", attempts, "err", err)
				return &topicRefusedError{topic: topic, reason: reason, attempts: attempts, err: err}
			}
		} else {
			attempts = 0
			r.setKafkaErr(err)
		}
		r.log.Warn("relay: topic creation failed; retrying", "topic", topic, "attempt", attempts, "err", err)
		r.hb.Beat()
		sleep(ctx, bo.Next())
	}
}

// topicSpec is how the relay creates topics: the configured partitions and
// replication, and max.message.bytes = the size budget.
func (r *Relay) topicSpec() kafka.Spec {
	return kafka.TopicSpec(r.kafka)
}

func (r *Relay) ensureTopics(ctx context.Context, names ...string) error {
	if len(names) == 0 || r.cfg.SkipTopicBootstrap {
		return nil
	}
	bo := newBackoff(200*time.Millisecond, 5*time.Second)
	for {
		tctx, cancel := context.WithTimeout(ctx, r.cfg.KafkaFlushTimeout)
		err := kafka.EnsureSpec(tctx, r.client, r.topicSpec(), names...)
		cancel()
		if err == nil {
			r.setKafkaErr(nil)
			r.mu.Lock()
			for _, t := range names {
				r.topicsCreated[t] = true
			}
			r.mu.Unlock()
			r.log.Info("relay: topics ready", "topics", names)
			return nil
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		r.setKafkaErr(err)
		r.log.Warn("relay: topic bootstrap failed; retrying", "err", err)
		r.hb.Beat()
		sleep(ctx, bo.Next())
	}
}

// claim loads the checkpoint (or starts a new one) and writes it with this
// leader's epoch, so an older leader can no longer advance it.
func (r *Relay) claim(ctx context.Context, epoch int64) (*leaderState, error) {
	for attempt := 0; ; attempt++ {
		cp, etag, found, err := r.checkpointLoad(ctx)
		if err != nil {
			return nil, err
		}
		if !found {
			start, err := r.startPosition(ctx)
			if err != nil {
				return nil, err
			}
			cp = Checkpoint{Position: start}
			r.log.Info("relay: new checkpoint", "key", r.cps.Key(), "position", start)
		}
		if cp.RelayEpoch > epoch {
			return nil, fmt.Errorf("%w: checkpoint epoch %d, ours %d", ErrFenced, cp.RelayEpoch, epoch)
		}
		cp.RelayEpoch = epoch
		cp.Holder = r.cfg.Holder
		cp.UpdatedAt = time.Now().UTC()
		newTag, err := r.checkpointSave(ctx, cp, etag)
		if errors.Is(err, objstore.ErrPreconditionFailed) && attempt < 10 {
			continue
		}
		if err != nil {
			return nil, err
		}
		ls := newLeaderState(epoch, cp, newTag, r.cfg.DedupMaxEvents)
		// Positions parked by an earlier leader that crashed before its
		// checkpoint passed them: done, neither produced nor parked again.
		parked, err := r.parked.parkedAfter(ctx, r.cfg.Name, r.shard, cp.Position)
		if err != nil {
			return nil, err
		}
		for _, p := range parked {
			ls.markDone(p)
		}
		r.refreshParkedGauge(ctx, ls)
		r.noteProgress(-1, cp.Position)
		r.m.pendingGaps.Set(float64(len(cp.PendingGaps)))
		r.log.Info("relay: checkpoint claimed", "position", cp.Position, "epoch", epoch, "pending_gaps", len(cp.PendingGaps), "recent_ids", len(cp.RecentEventIDs))
		return ls, nil
	}
}

// startPosition is where a new checkpoint starts: the configured position,
// else the first position committed at or after the configured time, else
// the beginning (an empty checkpoint never skips history).
func (r *Relay) startPosition(ctx context.Context) (int64, error) {
	c := r.cfg
	switch {
	case c.StartPosition > 0:
		return c.StartPosition, nil
	case c.StartTimestamp != "":
		t, err := time.Parse(time.RFC3339Nano, c.StartTimestamp)
		if err != nil {
			return 0, fmt.Errorf("relay: EVENT_PUBLISHER_START_TIMESTAMP: %w", err)
		}
		return r.sl.PositionAt(ctx, t)
	}
	return 0, nil
}

// headAndNow returns the highest committed position and the database clock.
func (r *Relay) headAndNow(ctx context.Context) (head int64, now time.Time, err error) {
	h, err := r.sl.HeadWithClock(ctx)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("relay: %w", err)
	}
	return h.Position, h.Now, nil
}

// listen follows the store's commit stream and pokes the loop on commits,
// abandons and resyncs (the stream reconnects by itself; the poll covers
// what it misses). A commit's range starts its segment's fetch (hints); a
// notification that leaves no hint marks the hints missed first, so that
// the cycle taking its wake-up reads the head (hints.go).
func (r *Relay) listen(ctx context.Context) {
	for n := range r.store.Subscribe(ctx) {
		if r.sh != nil {
			r.sh.notify(n)
			continue
		}
		kind := "resync"
		switch n.Kind {
		case eventstore.Reserved:
			r.m.notes.WithLabelValues("reserved").Inc()
			continue
		case eventstore.Committed:
			kind = "committed"
			if !r.addHint(n.First, n.Last) {
				r.hints.missed.Store(true)
			}
		case eventstore.Abandoned:
			kind = "abandoned"
			r.hints.missed.Store(true)
		default:
			r.hints.missed.Store(true)
		}
		r.poke()
		r.m.notes.WithLabelValues(kind).Inc()
	}
}

// logMetrics writes the periodic metrics line.
func (r *Relay) logMetrics(ctx context.Context) {
	t := time.NewTicker(r.cfg.MetricsLogInterval)
	defer t.Stop()
	var last float64
	lastAt := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pub := sumVec(r.m.published)
		el := time.Since(lastAt).Seconds()
		r.mu.Lock()
		leader, head, ckpt := r.leader, r.head, r.ckpt
		r.mu.Unlock()
		r.log.Info("relay: metrics", "leader", leader, "head", head, "checkpoint", ckpt, "lag", max(head-ckpt, 0),
			"published_total", int64(pub), "published_per_s", int64((pub-last)/el),
			"pending_gaps", int64(value(r.m.pendingGaps)), "late_published_total", int64(value(r.m.late)),
			"held_events", int64(value(r.m.held)), "produce_errors_total", int64(value(r.m.produceErrs)))
		last, lastAt = pub, time.Now()
	}
}

// newBackoff is a capped exponential backoff from lo to hi
// (shared/backoff).
func newBackoff(lo, hi time.Duration) *backoff.Backoff {
	return backoff.New(backoff.Policy{Base: lo, Cap: hi})
}

// sleep waits d or until ctx is done (shared/backoff).
func sleep(ctx context.Context, d time.Duration) { _ = backoff.Sleep(ctx, d) }
