package consumer

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/registry"
	"github.com/sluicehq/sluice/shared/envelope"
	"github.com/sluicehq/sluice/shared/observability"
)

// Crash points the runtime hits (with Options.CrashWorker).
const (
	PointAfterClaim     = "after_claim"
	PointBeforeMarkDone = "before_mark_done"
	PointBeforeCommit   = "before_commit"
)

// state is where an unfinished record stands.
type state int

const (
	stClaim      state = iota // to be claimed
	stWait                    // claimed WAIT last time: does not block its aggregate
	stHandle                  // claimed (lease held), handler to run (again)
	stMarkDone                // handled: outcome to mark done with the lease
	stMarkFailed              // failed for good: DLQ acked, MarkFailed to record
	stDLQ                     // DLQ record to produce (then stMarkFailed, or done)
	stDone
)

// item is one polled record on its way through the runtime.
type item struct {
	rec       *kgo.Record
	view      Record
	parseErr  error
	key       string
	part      *partState
	st        state
	lease     registry.Lease
	outcome   registry.Outcome
	notBefore time.Time
	tries     int // local retries (backoff exponent)
	polledAt  time.Time
	// dead-letter data
	failure   *registry.Failure
	errText   string
	errClass  string
	attempts  int
	firstFail time.Time
	wait      *registry.ClaimResult // last WAIT result, for healing
	healFails int                   // retryable Heal failures (bounded by MaxAttempts)
	// park and unpark are the Hold that keeps the lease alive while the
	// claimed item waits out an outage (parkLease).
	park   context.Context
	unpark func()
	// dlqPointer is why the dead letter is written in pointer form ("":
	// the full form, unless it is too large).
	dlqPointer string
	// busy: the item belongs to the round in flight (its second half runs
	// in the background). Guarded by Consumer.mu; while set, only that
	// round touches the item's other fields.
	busy bool
}

// partState tracks the records of one partition in offset order.
type partState struct {
	topic     string
	partition int32
	queue     []*item // unfinished prefix and what follows, in offset order
	committed int64   // next offset to consume according to our last commit; -1 unknown
	hwm       int64
	// mayWait is set when a record of the partition was answered WAIT and
	// cleared by commit when none is waiting any more: finish looks for
	// waiting records to wake only then (the scan is O(queue)).
	mayWait atomic.Bool
}

// Consumer is one worker's consumer-group member. Create it with New, run it
// with Run.
type Consumer struct {
	o   Options
	cl  *kgo.Client
	m   *metrics
	hb  *observability.Heartbeat
	log func(msg string, args ...any)

	// h is the handler under the recover middleware (guarded).
	h *guarded
	// dlqMax bounds a dead letter's size (Options.DLQMaxBytes, else the
	// producer's maximum batch size): a larger one is written in pointer
	// form.
	dlqMax int

	mu      sync.Mutex // guards parts (rebalance callbacks vs the loop)
	parts   map[string]map[int32]*partState
	pending int
	paused  bool
	// out are the dependencies in outage (the registry's and the
	// handler's), see outage.go.
	out outages

	// The rounds in flight (see turn), oldest first: their second halves
	// run in the background while the loop polls, parses, claims and
	// launches the next rounds. Each channel is closed when its round
	// finished. Only the loop goroutine touches the slice.
	inflight []chan struct{}
	rounds   sync.WaitGroup // the rounds in flight, for the rebalance callbacks
	// roundMu is held by the loop from a round's selection to its launch,
	// so that a rebalance callback never runs between the two.
	roundMu sync.Mutex
	// wake is closed (and replaced, under mu) when a round finishes: a
	// broadcast that ends the poll of the turn that took it.
	wake chan struct{}
	// sem bounds the handler goroutines of all rounds together
	// (Options.Concurrency).
	sem       chan struct{}
	rebalance atomic.Bool // a rebalance waits for the loop to allow it
	allowedAt time.Time   // last AllowRebalance
}

// New validates opts and creates the Kafka client (nothing is fetched before
// Run).
func New(opts Options) (*Consumer, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Consumer{o: o, m: newMetrics(o.Metrics), parts: map[string]map[int32]*partState{}, hb: observability.NewHeartbeat(time.Minute),
		wake: make(chan struct{}), sem: make(chan struct{}, o.Concurrency)}
	c.m.zero(o.HandlerName)
	c.log = o.Logger.With("handler", o.HandlerName).Warn
	c.h = newGuarded(c, o.Handler)
	c.out.deps, c.out.checks = map[string]*depOutage{}, map[string]bool{}
	kopts := []kgo.Opt{
		kgo.SeedBrokers(o.Brokers...),
		kgo.ConsumerGroup(o.Group),
		kgo.ConsumeTopics(o.Topic),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.OnPartitionsRevoked(c.onRevoked),
		kgo.OnPartitionsLost(c.onLost),
		kgo.OnPartitionsCallbackBlocked(func(context.Context, *kgo.Client) { c.rebalance.Store(true) }),
		kgo.ProducerLinger(0),
		kgo.RequiredAcks(kgo.AllISRAcks()),
	}
	if o.SessionTimeout > 0 {
		kopts = append(kopts, kgo.SessionTimeout(o.SessionTimeout))
	}
	kopts = append(kopts, o.KafkaOpts...) // last: they override the above
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return nil, fmt.Errorf("consumer: kafka client: %w", err)
	}
	c.cl = cl
	c.dlqMax = o.DLQMaxBytes
	if mb, ok := cl.OptValue(kgo.ProducerBatchMaxBytes).(int32); ok && (c.dlqMax <= 0 || int(mb) < c.dlqMax) {
		c.dlqMax = int(mb)
	}
	if o.Health != nil {
		o.Health.AddReadiness(o.HandlerName+":registry", func(context.Context) error { return c.outageErr(DependencyRegistry) })
		o.Health.AddLiveness(o.HandlerName+":loop", c.hb.Check)
	}
	return c, nil
}

// Client returns the underlying franz-go client (tests, admin calls).
func (c *Consumer) Client() *kgo.Client { return c.cl }

// InOutage reports whether consumption is paused by a dependency outage:
// the registry's, or one the handler reported (OutageError).
func (c *Consumer) InOutage() bool { return c.out.n.Load() > 0 }

// OutageDependencies returns the dependencies whose outage pauses
// consumption now (sorted; empty when none).
func (c *Consumer) OutageDependencies() []string { return c.outDeps() }

// Run consumes until ctx ends, then drains: it stops fetching, finishes
// (or releases) in-flight claims, commits the done prefix and leaves the
// group, within Options.ShutdownTimeout. It returns nil after a clean drain.
func (c *Consumer) Run(ctx context.Context) error {
	// work outlives ctx by at most the shutdown timeout: in-flight records
	// finish after SIGTERM.
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	go func() {
		select {
		case <-ctx.Done():
		case <-work.Done():
			return
		}
		t := time.NewTimer(c.o.ShutdownTimeout)
		defer t.Stop()
		select {
		case <-t.C:
			cancelWork()
		case <-work.Done():
		}
	}()
	var runErr error
	c.allowedAt = time.Now()
	for ctx.Err() == nil {
		c.hb.Beat()
		if err := c.turn(ctx, work); err != nil {
			runErr = err
			break
		}
	}
	c.join()
	c.cl.AllowRebalance()
	// After the deadline work is cancelled, but the bookkeeping of the drain
	// (mark_done of handlers that did finish, releases, the final commit)
	// must still reach Postgres and Kafka: give it a short budget of its own.
	dctx := work
	if work.Err() != nil {
		var cancel context.CancelFunc
		dctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), drainGrace)
		defer cancel()
	}
	c.drain(dctx)
	cancelWork()
	c.cl.Close()
	if c.o.Health != nil {
		// A stopped consumer is neither ready nor live: its checks go (a
		// process that replaces it registers the new one's).
		c.o.Health.Remove(c.o.HandlerName + ":registry")
		c.o.Health.Remove(c.o.HandlerName + ":loop")
	}
	c.endOutages()
	return runErr
}

// DefaultRoundsInFlight is the default of Options.RoundsInFlight.
const DefaultRoundsInFlight = 4

// maxBlocked bounds how long the loop keeps rebalances blocked while it
// overlaps rounds (a waiting rebalance is also signalled by franz-go, see
// OnPartitionsCallbackBlocked; this is the backstop).
const maxBlocked = 2 * time.Second

// turn is one poll and one round of processing, with rebalances blocked
// (BlockRebalanceOnPoll). Rounds overlap: a round's first half (select,
// claim) runs here, its second half (handler, dead letters, mark_done) in
// the background while the next turns poll, parse, claim and launch the
// next rounds, up to Options.RoundsInFlight at once. A record that arrives
// while rounds are in flight so starts at the next turn instead of waiting
// for them. The records of a round in flight are busy: no later round
// selects them or any record of their aggregates, so per-aggregate order is
// kept. Commits happen only here and cover only the contiguous done prefix,
// which ends at the first record of a round in flight. Before rebalances
// are allowed every round in flight is joined and committed, so a
// rebalance never sees in-flight work.
func (c *Consumer) turn(ctx, work context.Context) error {
	wait, wake := c.pollWait()
	pctx, cancel := context.WithTimeout(ctx, wait)
	if len(c.inflight) > 0 {
		// Poll until records arrive or a round in flight finishes.
		go func() {
			select {
			case <-wake:
				cancel()
			case <-pctx.Done():
			}
		}()
	}
	fetches := c.cl.PollRecords(pctx, c.o.MaxPollRecords)
	cancel()
	if fetches.IsClientClosed() {
		return errors.New("consumer: kafka client closed")
	}
	fetches.EachError(func(t string, p int32, err error) {
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			c.log("fetch error", "topic", t, "partition", p, "err", err)
		}
	})
	now := time.Now()
	type polled struct {
		p   kgo.FetchTopicPartition
		its []*item
	}
	var ps []polled
	var all []*item
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		its := make([]*item, len(p.Records))
		for i, r := range p.Records {
			its[i] = &item{rec: r, polledAt: now}
		}
		ps = append(ps, polled{p, its})
		all = append(all, its...)
	})
	c.parseAll(all)
	c.mu.Lock()
	for _, pp := range ps {
		part := c.part(pp.p.Topic, pp.p.Partition)
		part.hwm = pp.p.HighWatermark
		for _, it := range pp.its {
			it.part = part
		}
		part.queue = append(part.queue, pp.its...)
		c.pending += len(pp.its)
	}
	pending := c.pending
	c.mu.Unlock()
	c.o.Logger.Debug("poll", "records", fetches.NumRecords(), "pending", pending, "wait", wait)
	// A free slot before claiming: leases are not held until the round is
	// launched.
	c.reap()
	for len(c.inflight) >= c.o.RoundsInFlight {
		<-c.inflight[0]
		c.reap()
	}
	if ctx.Err() == nil { // after SIGTERM nothing new is claimed: the drain finishes what is held
		c.roundMu.Lock()
		if next := c.roundStart(work); next != nil {
			c.launch(work, next)
		}
		c.roundMu.Unlock()
	}
	c.reap()
	c.commit(work, nil)
	if len(c.inflight) == 0 || c.rebalance.Load() || time.Since(c.allowedAt) > maxBlocked || ctx.Err() != nil {
		c.join()
		c.commit(work, nil)
		c.rebalance.Store(false)
		c.allowedAt = time.Now()
		c.cl.AllowRebalance()
	}
	c.flowControl()
	return nil
}

// reap forgets the rounds in flight that finished.
func (c *Consumer) reap() {
	live := c.inflight[:0]
	for _, done := range c.inflight {
		select {
		case <-done:
		default:
			live = append(live, done)
		}
	}
	clear(c.inflight[len(live):])
	c.inflight = live
}

// join waits for every round in flight.
func (c *Consumer) join() {
	for _, done := range c.inflight {
		<-done
	}
	clear(c.inflight)
	c.inflight = c.inflight[:0]
}

// pollWait is how long a poll may block: until the earliest due retry of
// an aggregate that no round in flight holds (those wait for the round's
// wake-up, which it returns too).
func (c *Consumer) pollWait() (time.Duration, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	wait := time.Second
	now := time.Now()
	c.eachSelectable(func(it *item) bool {
		wait = min(wait, it.notBefore.Sub(now))
		return true
	})
	if until := c.outageUntil().Sub(now); until > wait {
		wait = min(until, time.Second)
	}
	if wait < 5*time.Millisecond {
		wait = 5 * time.Millisecond
	}
	return wait, c.wake
}

// busyKeys returns the aggregates of the rounds in flight. Callers hold mu.
func (c *Consumer) busyKeys() map[string]bool {
	blocked := map[string]bool{}
	for _, m := range c.parts {
		for _, ps := range m {
			for _, it := range ps.queue {
				if it.busy {
					blocked[it.key] = true
				}
			}
		}
	}
	return blocked
}

func (c *Consumer) part(topic string, p int32) *partState {
	m := c.parts[topic]
	if m == nil {
		m = map[int32]*partState{}
		c.parts[topic] = m
	}
	ps := m[p]
	if ps == nil {
		ps = &partState{topic: topic, partition: p, committed: -1}
		m[p] = ps
	}
	return ps
}

// allParts returns the partitions in a stable order. Callers hold mu.
func (c *Consumer) allParts() []*partState {
	var out []*partState
	for _, m := range c.parts {
		for _, ps := range m {
			out = append(out, ps)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].topic != out[j].topic {
			return out[i].topic < out[j].topic
		}
		return out[i].partition < out[j].partition
	})
	return out
}

// parseChunk is the least number of records a parsing goroutine takes.
const parseChunk = 64

// parseAll parses the records of items on all cores: envelope parsing and
// validation is the runtime's main CPU cost per record.
func (c *Consumer) parseAll(items []*item) {
	workers := min(runtime.GOMAXPROCS(0), (len(items)+parseChunk-1)/parseChunk)
	if workers <= 1 {
		for _, it := range items {
			c.parse(it)
		}
		return
	}
	var wg sync.WaitGroup
	per := (len(items) + workers - 1) / workers
	for lo := 0; lo < len(items); lo += per {
		chunk := items[lo:min(lo+per, len(items))]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, it := range chunk {
				c.parse(it)
			}
		}()
	}
	wg.Wait()
}

func (c *Consumer) parse(it *item) {
	r := it.rec
	it.view = Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value, Headers: r.Headers, Timestamp: r.Timestamp}
	env, err := envelope.Parse(r.Value, c.o.Limits)
	if err != nil {
		it.parseErr = err
		it.key = "kafka-key:" + string(r.Key)
		it.st = stDLQ
		it.errText, it.errClass, it.attempts = "parse: "+err.Error(), ClassParse, 1
		it.firstFail = time.Now()
		return
	}
	it.view.Envelope = env
	it.key = c.o.AggregateKey(env)
}

// backoff is min(cap, base·2^n) scaled by a random factor in [0.5, 1).
func backoff(base, limit time.Duration, n int) time.Duration {
	d := limit
	if n < 30 {
		if b := base << n; b > 0 && b < limit {
			d = b
		}
	}
	return time.Duration(float64(d) * (0.5 + rand.Float64()/2))
}

func (c *Consumer) retryLater(it *item, reason string, d time.Duration) {
	it.notBefore = time.Now().Add(d)
	it.tries++
	c.m.retries.WithLabelValues(c.o.HandlerName, reason).Inc()
}

// select picks the runnable items of this round: per aggregate the records
// in offset order up to and including the first one that is not in WAIT
// (a waiting record does not block its successors, which may be its
// predecessors in sequence); an item not yet due blocks its aggregate unless
// it is waiting.
func (c *Consumer) selectRunnable(now time.Time) []*item {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*item
	c.eachSelectable(func(it *item) bool {
		if !now.Before(it.notBefore) {
			out = append(out, it)
		}
		return len(out) < c.o.MaxPollRecords
	})
	return out
}

// eachSelectable calls fn, in partition and offset order, for every record
// a round may select once it is due: not done, not of an aggregate a round
// in flight holds, and not behind a record of its aggregate that is not
// waiting (a WAIT does not block its successors, which may be its missing
// predecessors). fn returns false to stop. Callers hold mu.
func (c *Consumer) eachSelectable(fn func(it *item) bool) {
	blocked := c.busyKeys()
	for _, ps := range c.allParts() {
		for _, it := range ps.queue {
			if blocked[it.key] || it.st == stDone {
				continue
			}
			if it.st != stWait {
				blocked[it.key] = true
			}
			if !fn(it) {
				return
			}
		}
	}
}

// roundWork is a round between its two halves: the items it selected, by
// what is left to do for them.
type roundWork struct {
	dlq, handles, marks, fails []*item
}

// roundStart is the first half of a round: it selects the runnable records,
// dead-letters parse errors and claims in one batch. It returns what the
// second half (roundFinish) does, or nil when nothing is left this round.
func (c *Consumer) roundStart(ctx context.Context) *roundWork {
	now := time.Now()
	items := c.selectRunnable(now)
	if len(items) == 0 {
		return nil
	}
	registryOK := !now.Before(c.outageUntil())
	w := &roundWork{}
	var claims []*item
	for _, it := range items {
		switch it.st {
		case stDLQ:
			w.dlq = append(w.dlq, it)
		case stClaim, stWait:
			claims = append(claims, it)
		case stHandle:
			w.handles = append(w.handles, it)
		case stMarkDone:
			w.marks = append(w.marks, it)
		case stMarkFailed:
			w.fails = append(w.fails, it)
		}
	}
	c.produceDLQ(ctx, w.dlq)
	if !registryOK {
		// Outage: only Kafka-side work (DLQ of parse errors) may go on.
		return nil
	}
	if out, until := c.handlerOutage(); out {
		// A dependency of the handler is out: its calls wait for the next
		// try; then the claims already held probe it (new claims only when
		// none is held, so an outage does not claim the whole backlog).
		if now.Before(until) {
			w.handles, claims = nil, nil
		} else if len(w.handles) > 0 {
			claims = nil
		}
		if len(w.handles)+len(claims)+len(w.marks)+len(w.fails) == 0 {
			return nil
		}
	}
	if len(claims) > 0 {
		claimed, heal, outage := c.claim(ctx, claims)
		if outage {
			return nil
		}
		w.handles = append(w.handles, claimed...)
		w.handles = append(w.handles, heal...)
	}
	// after_claim: the claim is recorded, nothing else has happened.
	if len(w.handles) > 0 {
		c.hit(PointAfterClaim)
	}
	return w
}

// launch runs the second half of round w in the background; the items it
// works on are busy until it finished (those the claim finished or put off
// are not: the commit may pass the finished ones at once).
func (c *Consumer) launch(ctx context.Context, w *roundWork) {
	touched := slices.Concat(w.dlq, w.handles, w.marks, w.fails)
	c.mu.Lock()
	for _, it := range touched {
		it.busy = true
	}
	c.mu.Unlock()
	done := make(chan struct{})
	c.inflight = append(c.inflight, done)
	c.rounds.Add(1)
	go func() {
		defer c.rounds.Done()
		c.roundFinish(ctx, w)
		c.mu.Lock()
		for _, it := range touched {
			it.busy = false
		}
		close(c.wake)
		c.wake = make(chan struct{})
		c.mu.Unlock()
		close(done)
	}()
}

// roundFinish is the second half of a round: the handlers, the dead
// letters of failed records, MarkFailed and one MarkDoneBatch.
func (c *Consumer) roundFinish(ctx context.Context, w *roundWork) {
	handles, marks, fails := w.handles, w.marks, w.fails
	if c.h.batch != nil {
		c.handleBatch(ctx, handles)
	} else {
		c.handle(ctx, handles)
	}
	var dead []*item
	for _, it := range handles {
		switch it.st {
		case stMarkDone:
			marks = append(marks, it)
		case stDLQ:
			dead = append(dead, it)
		}
	}
	c.produceDLQ(ctx, dead)
	for _, it := range append(w.dlq, dead...) {
		if it.st == stMarkFailed && !contains(fails, it) {
			fails = append(fails, it)
		}
	}
	c.markFailed(ctx, fails)
	if len(marks) > 0 {
		c.hit(PointBeforeMarkDone)
		c.markDone(ctx, marks)
	}
}

func contains(items []*item, x *item) bool {
	for _, it := range items {
		if it == x {
			return true
		}
	}
	return false
}

func (c *Consumer) hit(point string) {
	if c.o.Crash != nil && c.o.CrashWorker != "" {
		c.o.Crash.Hit(c.o.CrashWorker, point)
	}
}

// claim claims items in one batch and sorts them by result; it returns the
// claimed items and the waiting items due for healing.
func (c *Consumer) claim(ctx context.Context, items []*item) (claimed, heal []*item, outage bool) {
	reqs := make([]registry.ClaimRequest, len(items))
	for i, it := range items {
		e := it.view.Envelope
		reqs[i] = registry.ClaimRequest{Handler: c.o.HandlerName, EventID: e.EventID, AggregateID: it.key, Seq: e.SequenceNumber, Policy: c.o.Policy}
	}
	start := time.Now()
	res, err := c.o.Registry.ClaimBatch(ctx, reqs)
	c.m.stage.WithLabelValues(c.o.HandlerName, "claim").Observe(time.Since(start).Seconds())
	if err != nil {
		if isOutage(ctx, err) {
			c.enterOutage(DependencyRegistry, err)
			return nil, nil, true
		}
		var re *registry.RequestError
		if errors.As(err, &re) && re.Index >= 0 && re.Index < len(items) {
			// One bad request fails the batch: dead-letter it, retry the rest.
			it := items[re.Index]
			it.st, it.errText, it.errClass, it.attempts, it.firstFail = stDLQ, "registry: "+err.Error(), ClassPermanent, 1, time.Now()
			c.m.retries.WithLabelValues(c.o.HandlerName, "batch_invalid").Inc()
			return nil, nil, false
		}
		c.log("claim failed", "err", err)
		for _, it := range items {
			c.retryLater(it, "claim_error", backoff(c.o.BackoffBase, c.o.BackoffCap, it.tries))
		}
		return nil, nil, false
	}
	c.leaveOutage(DependencyRegistry)
	for i, it := range items {
		r := res[i]
		switch r.Kind {
		case registry.Claimed:
			it.st, it.lease, it.tries, it.wait = stHandle, r.Lease, 0, nil
			it.view.Attempt = r.Lease.Attempt
			claimed = append(claimed, it)
		case registry.DuplicateDone:
			c.finish(it, "duplicate")
		case registry.Stale:
			c.finish(it, "stale")
		case registry.Dead:
			// The DLQ record was acknowledged before the row became dead.
			c.finish(it, "dead")
		case registry.InProgress:
			it.st = stClaim
			d := backoff(c.o.BackoffBase, c.o.BackoffCap, it.tries)
			if r.RetryIn > 0 && r.RetryIn < d {
				d = r.RetryIn
			}
			c.retryLater(it, "in_progress", d)
		case registry.RetryLater:
			it.st = stClaim
			c.retryLater(it, "retry_later", max(r.RetryIn, time.Millisecond))
		case registry.Wait:
			it.st = stWait
			it.part.mayWait.Store(true)
			w := r
			it.wait = &w
			if r.HealDue {
				if c.h.healer != nil {
					heal = append(heal, it)
					continue
				}
			}
			c.retryLater(it, "wait", backoff(c.o.BackoffBase, c.o.BackoffCap, it.tries))
		}
	}
	if len(claimed) > 0 {
		return claimed, heal, false
	}
	return nil, heal, false
}

// handle runs the handler for claimed items (and heals for waiting ones):
// one goroutine per aggregate, at most Concurrency at once, each running
// its aggregate's items in offset order.
func (c *Consumer) handle(ctx context.Context, items []*item) {
	if len(items) == 0 {
		return
	}
	groups := map[string][]*item{}
	var order []string
	for _, it := range items {
		if _, ok := groups[it.key]; !ok {
			order = append(order, it.key)
		}
		groups[it.key] = append(groups[it.key], it)
	}
	sem := c.sem // shared by the rounds in flight
	var wg sync.WaitGroup
	for _, k := range order {
		g := groups[k]
		sort.SliceStable(g, func(i, j int) bool { return g[i].rec.Offset < g[j].rec.Offset })
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			for _, it := range g {
				if it.st == stWait {
					c.heal(ctx, it)
					continue
				}
				c.handleOne(ctx, it)
			}
		}()
	}
	wg.Wait()
}

// errBatchAborted cancels a batch whose handler must stop because the hold
// of one of its leases ended (lease lost, registry unreachable).
var errBatchAborted = errors.New("consumer: batch aborted: a lease of the batch was lost")

// handleBatch is handle for a BatchHandler: heals of waiting items run as in
// handle (first: a waiting item precedes its aggregate's claimed one), then
// the claimed items go to one HandleBatch call in offset order per
// partition, each under its own Hold, and every answer is settled as
// handleOne settles a single one. When a hold ends early the batch context
// is cancelled; items whose own lease is still fine and that did not
// finish are released and claimed again.
func (c *Consumer) handleBatch(ctx context.Context, items []*item) {
	var waits, run []*item
	for _, it := range items {
		switch {
		case it.st == stWait:
			waits = append(waits, it)
		case c.unparkLease(it):
			c.leaseLostParked(it)
		default:
			run = append(run, it)
		}
	}
	c.handle(ctx, waits)
	if len(run) == 0 {
		return
	}
	sort.SliceStable(run, func(i, j int) bool {
		a, b := run[i].rec, run[j].rec
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		if a.Partition != b.Partition {
			return a.Partition < b.Partition
		}
		return a.Offset < b.Offset
	})
	start := time.Now()
	bctx, abort := context.WithCancelCause(ctx)
	defer abort(nil)
	hctxs := make([]context.Context, len(run))
	stops := make([]func(), len(run))
	recs := make([]*Record, len(run))
	for i, it := range run {
		hctx, stop := c.o.Registry.Hold(bctx, it.lease)
		unwatch := context.AfterFunc(hctx, func() { abort(errBatchAborted) })
		hctxs[i], recs[i] = hctx, &it.view
		stops[i] = func() { unwatch(); stop() }
	}
	res := c.h.HandleBatch(bctx, recs)
	aborted := bctx.Err() != nil
	// Read the causes before stopping the holds (stop cancels hctx too).
	causes := make([]error, len(run))
	for i := range run {
		causes[i] = context.Cause(hctxs[i])
	}
	for _, stop := range stops {
		stop()
	}
	c.m.stage.WithLabelValues(c.o.HandlerName, "handle").Observe(time.Since(start).Seconds())
	if len(res) != len(run) {
		err := fmt.Errorf("consumer: HandleBatch returned %d results for %d records", len(res), len(run))
		c.log("batch handler", "err", err)
		res = make([]BatchResult, len(run))
		for i := range res {
			res[i].Err = err
		}
	}
	for i, it := range run {
		r := res[i]
		if r.Err != nil && aborted && ctx.Err() == nil && errors.Is(causes[i], errBatchAborted) {
			// Another lease of the batch ended: this one is still ours, but
			// the handler stopped early. Hand it back and claim it again.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			_ = c.o.Registry.Release(rctx, it.lease)
			cancel()
			it.st = stClaim
			c.retryLater(it, "batch_aborted", backoff(c.o.BackoffBase, c.o.BackoffCap, it.tries))
			continue
		}
		c.settle(ctx, causes[i], it, r.Outcome, r.Err)
	}
}

// heal runs the Healer for a waiting item whose heal is due. A Heal that
// fails on an outage pauses like a handler call (nothing counted); a
// permanent failure, or MaxAttempts retryable ones (*RetryableError,
// panics), dead-letters the waiting record with the reason instead of
// retrying it forever; an unclassified failure (such as a predecessor that
// another worker still holds) is retried with backoff.
func (c *Consumer) heal(ctx context.Context, it *item) {
	err := c.h.Heal(ctx, &it.view, *it.wait)
	if err == nil {
		c.leaveHandlerOutages()
		it.notBefore, it.healFails = time.Time{}, 0
		return
	}
	switch {
	case ctx.Err() != nil:
		c.retryLater(it, "wait", backoff(c.o.BackoffBase, c.o.BackoffCap, it.tries))
		return
	case isOutage(ctx, err):
		c.enterOutage(DependencyRegistry, err)
		c.retryLater(it, "outage", backoff(c.o.BackoffBase, c.o.OutageBackoffCap, it.tries))
		return
	}
	if dep, ok := outageOf(ctx, err); ok {
		it.notBefore = c.enterOutage(dep, err)
		it.tries++
		return
	}
	c.leaveHandlerOutages()
	class := Classify(err)
	var re *RetryableError
	var pe *PanicError
	counted := class == ClassPermanent || errors.As(err, &re) || errors.As(err, &pe)
	if counted {
		it.healFails++
		if it.firstFail.IsZero() {
			it.firstFail = time.Now()
		}
	}
	if class == ClassPermanent || (counted && it.healFails >= c.o.MaxAttempts) {
		// Dead-letter the waiting record (it has no registry row: its
		// claim answered WAIT); the offset moves on and the DLQ record
		// says why the gap could not be healed.
		c.log("heal failed for good: dead-lettering the waiting record", "event_id", it.view.Envelope.EventID, "err", err)
		it.st, it.failure, it.wait = stDLQ, nil, nil
		it.errText, it.errClass, it.attempts = "heal: "+err.Error(), class, max(it.healFails, 1)
		return
	}
	c.log("heal failed", "event_id", it.view.Envelope.EventID, "err", err)
	c.retryLater(it, "wait", backoff(c.o.BackoffBase, c.o.BackoffCap, it.tries))
}

// leaseLostParked moves on an item whose lease was lost while it waited out
// an outage: whoever holds it now finishes it.
func (c *Consumer) leaseLostParked(it *item) {
	it.st = stClaim
	c.retryLater(it, "lease_lost", backoff(c.o.BackoffBase, c.o.BackoffCap, it.tries))
}

func (c *Consumer) handleOne(ctx context.Context, it *item) {
	if c.unparkLease(it) {
		c.leaseLostParked(it)
		return
	}
	start := time.Now()
	hctx, stop := c.o.Registry.Hold(ctx, it.lease)
	out, err := c.h.Handle(hctx, &it.view)
	stop()
	c.m.stage.WithLabelValues(c.o.HandlerName, "handle").Observe(time.Since(start).Seconds())
	c.settle(ctx, context.Cause(hctx), it, out, err)
}

// settle moves a handled item on according to the handler's answer: to
// mark_done (success, conflict), to a later claim (retryable failure, lease
// lost, shutdown) or to the DLQ (permanent or exhausted failure). cause is
// the cancellation cause of the context the handler ran with (it tells a
// lost lease or a registry outage).
func (c *Consumer) settle(ctx context.Context, cause error, it *item, out registry.Outcome, err error) {
	if err == nil {
		c.leaveHandlerOutages()
		it.st, it.outcome = stMarkDone, out
		return
	}
	switch {
	case isLeaseLost(cause, err):
		it.st = stClaim
		c.retryLater(it, "lease_lost", backoff(c.o.BackoffBase, c.o.BackoffCap, it.tries))
		return
	case errors.Is(err, registry.ErrUnavailable) || errors.Is(cause, registry.ErrUnavailable):
		c.enterOutage(DependencyRegistry, err) // keep the lease: run again when Postgres is back
		c.parkLease(ctx, it)
		c.retryLater(it, "outage", backoff(c.o.BackoffBase, c.o.OutageBackoffCap, it.tries))
		return
	case ctx.Err() != nil:
		// Shutdown ran out of time: hand the claim back.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		_ = c.o.Registry.Release(rctx, it.lease)
		cancel()
		it.st = stClaim
		return
	}
	if dep, ok := outageOf(ctx, err); ok {
		// A dependency of the handler is out: not the record's fault. No
		// attempt is spent (no MarkFailed, no dead letter); the lease is
		// kept alive and the same claim runs again after the outage's
		// backoff, which has no cap on total time.
		c.parkLease(ctx, it)
		it.notBefore = c.enterOutage(dep, err)
		it.tries++
		c.o.Logger.Debug("dependency outage, will retry", "handler", c.o.HandlerName, "dependency", dep,
			"event_id", it.view.Envelope.EventID, "retry_at", it.notBefore, "err", err)
		return
	}
	// The dependencies answered (not an outage): the handler's outage, if
	// any, is over, whatever the record's own fate.
	c.leaveHandlerOutages()
	class := Classify(err)
	if class == ClassConflict {
		var ce *ConflictError
		errors.As(err, &ce)
		it.st, it.outcome = stMarkDone, registry.Conflict(ce.Reason)
		return
	}
	f := registry.Failure{Err: err, Retryable: class == ClassRetryable, MaxAttempts: c.o.MaxAttempts}
	if f.Retryable && it.lease.Attempt < c.o.MaxAttempts {
		fr, ferr := c.o.Registry.MarkFailed(ctx, it.lease, f)
		if ferr != nil {
			if isOutage(ctx, ferr) {
				c.enterOutage(DependencyRegistry, ferr)
				c.retryLater(it, "outage", backoff(c.o.BackoffBase, c.o.OutageBackoffCap, it.tries))
				return
			}
			it.st = stClaim // lease lost: whoever holds it now finishes it
			c.retryLater(it, "lease_lost", backoff(c.o.BackoffBase, c.o.BackoffCap, it.tries))
			return
		}
		c.o.Logger.Info("attempt failed, will retry", "handler", c.o.HandlerName, "event_id", it.view.Envelope.EventID,
			"attempt", fr.Attempt, "retry_in", fr.RetryIn, "err", err)
		it.st = stClaim
		c.retryLater(it, "failed", max(fr.RetryIn, time.Millisecond))
		return
	}
	// Dead: the DLQ record is produced and acknowledged first, then the row
	// becomes dead, then the offset moves (a crash in between re-runs the
	// attempt rather than losing the dead letter).
	it.failure = &f
	it.st, it.errText, it.errClass, it.attempts = stDLQ, err.Error(), class, it.lease.Attempt
	if row, gerr := c.o.Registry.GetRow(ctx, c.o.HandlerName, it.view.Envelope.EventID); gerr == nil && !row.FirstFailedAt.IsZero() {
		it.firstFail = row.FirstFailedAt
	} else {
		it.firstFail = time.Now()
	}
}

// produceDLQ produces the dead letters of items in one batch and waits for
// the acknowledgements.
func (c *Consumer) produceDLQ(ctx context.Context, items []*item) {
	var recs []*kgo.Record
	var its []*item
	for _, it := range items {
		if it.st != stDLQ {
			continue
		}
		d := deadLetter{topic: c.o.DLQTopic, handler: c.o.HandlerName, rec: it.rec, errText: it.errText, class: it.errClass,
			attempts: it.attempts, first: it.firstFail, failed: time.Now()}
		if it.parseErr == nil {
			d.eventID, d.position = it.view.Envelope.EventID, it.view.Envelope.Position
		}
		r, ptr, err := d.record(c.dlqMax, it.dlqPointer)
		if err != nil {
			c.log("dlq record", "err", err)
			continue
		}
		it.dlqPointer = ptr
		recs = append(recs, r)
		its = append(its, it)
	}
	if len(recs) == 0 {
		return
	}
	start := time.Now()
	res := c.cl.ProduceSync(ctx, recs...)
	c.m.stage.WithLabelValues(c.o.HandlerName, "dlq").Observe(time.Since(start).Seconds())
	for i, pr := range res {
		it := its[i]
		if pr.Err != nil && it.dlqPointer == "" && (errors.Is(pr.Err, kerr.MessageTooLarge) || errors.Is(pr.Err, kerr.RecordListTooLarge)) {
			// Permanent for this form: never retry it; write the pointer
			// form at once.
			c.log("dlq record too large for the broker; writing it in pointer form", "offset", it.rec.Offset, "err", pr.Err)
			it.dlqPointer = truncTooLarge
			c.retryLater(it, "dlq_too_large", 0)
			continue
		}
		if pr.Err != nil {
			c.log("dlq produce failed; will retry", "offset", it.rec.Offset, "err", pr.Err)
			c.retryLater(it, "dlq_produce", backoff(c.o.BackoffBase, c.o.BackoffCap, it.tries))
			continue
		}
		c.m.dlq.WithLabelValues(c.o.HandlerName, it.errClass).Inc()
		if reason := it.dlqPointer; reason != "" {
			c.m.dlqPtr.WithLabelValues(c.o.HandlerName, reason).Inc()
			c.log("dead letter written in pointer form (original left out; read it at its offset)", "topic", it.rec.Topic,
				"partition", it.rec.Partition, "offset", it.rec.Offset, "original_size", len(it.rec.Value), "reason", reason)
		}
		c.o.Logger.Error("record dead-lettered", "handler", c.o.HandlerName, "topic", it.rec.Topic, "partition", it.rec.Partition,
			"offset", it.rec.Offset, "error_class", it.errClass, "err", it.errText)
		if it.failure != nil {
			it.st = stMarkFailed
			continue
		}
		if it.parseErr != nil {
			c.finish(it, "parse_error")
		} else {
			c.finish(it, "dead")
		}
	}
}

// markFailed records the final failure of dead-lettered items.
func (c *Consumer) markFailed(ctx context.Context, items []*item) {
	for _, it := range items {
		if it.st != stMarkFailed {
			continue
		}
		_, err := c.o.Registry.MarkFailed(ctx, it.lease, *it.failure)
		switch {
		case err == nil:
			c.finish(it, "dead")
		case isOutage(ctx, err):
			c.enterOutage(DependencyRegistry, err)
			c.retryLater(it, "outage", backoff(c.o.BackoffBase, c.o.OutageBackoffCap, it.tries))
			return
		case errors.Is(err, registry.ErrLeaseLost):
			// Another owner holds it now (its own attempt decides); the DLQ
			// record exists — acknowledge by claiming again.
			it.st, it.failure = stClaim, nil
			c.retryLater(it, "lease_lost", backoff(c.o.BackoffBase, c.o.BackoffCap, it.tries))
		default:
			c.log("mark failed", "err", err)
			c.retryLater(it, "mark_failed", backoff(c.o.BackoffBase, c.o.BackoffCap, it.tries))
		}
	}
}

// markDone records the outcomes of handled items in one batch.
func (c *Consumer) markDone(ctx context.Context, items []*item) {
	done := make([]registry.Done, len(items))
	for i, it := range items {
		done[i] = registry.Done{Lease: it.lease, Outcome: it.outcome}
	}
	start := time.Now()
	errs, err := c.o.Registry.MarkDoneBatch(ctx, done)
	c.m.stage.WithLabelValues(c.o.HandlerName, "mark_done").Observe(time.Since(start).Seconds())
	if err != nil {
		if isOutage(ctx, err) {
			c.enterOutage(DependencyRegistry, err)
		} else {
			c.log("mark done failed", "err", err)
		}
		for _, it := range items {
			c.retryLater(it, "outage", backoff(c.o.BackoffBase, c.o.OutageBackoffCap, it.tries))
		}
		return
	}
	c.leaveOutage(DependencyRegistry)
	for i, it := range items {
		if errs[i] != nil {
			it.st = stClaim // lease lost: claim again (DUPLICATE_DONE if the other owner finished it)
			c.retryLater(it, "lease_lost", backoff(c.o.BackoffBase, c.o.BackoffCap, it.tries))
			continue
		}
		c.finish(it, string(it.outcome.Result))
	}
}

// finish marks an item done, wakes waiting records of its aggregate, and
// counts it.
func (c *Consumer) finish(it *item, outcome string) {
	it.st = stDone
	c.m.records.WithLabelValues(c.o.HandlerName, outcome).Inc()
	c.m.stage.WithLabelValues(c.o.HandlerName, "end_to_end").Observe(time.Since(it.polledAt).Seconds())
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending--
	if !it.part.mayWait.Load() {
		return
	}
	for _, o := range it.part.queue {
		if o.key == it.key && o.st == stWait { // key first: other aggregates may belong to another round
			o.notBefore, o.tries = time.Time{}, 0
		}
	}
}

// commit commits, per partition, the offset after the highest contiguous
// finished record; only partitions in only (all when nil).
func (c *Consumer) commit(ctx context.Context, only map[string][]int32) {
	c.mu.Lock()
	offsets := map[string]map[int32]kgo.EpochOffset{}
	type adv struct {
		ps   *partState
		n    int
		next int64
	}
	var advs []adv
	for _, ps := range c.allParts() {
		if only != nil && !hasPartition(only, ps.topic, ps.partition) {
			continue
		}
		// A busy record's state belongs to its round in flight (written
		// without mu): the prefix ends there.
		n := 0
		for n < len(ps.queue) && !ps.queue[n].busy && ps.queue[n].st == stDone {
			n++
		}
		if n == 0 {
			continue
		}
		last := ps.queue[n-1].rec
		if offsets[ps.topic] == nil {
			offsets[ps.topic] = map[int32]kgo.EpochOffset{}
		}
		offsets[ps.topic][ps.partition] = kgo.EpochOffset{Epoch: last.LeaderEpoch, Offset: last.Offset + 1}
		advs = append(advs, adv{ps, n, last.Offset + 1})
	}
	c.mu.Unlock()
	if len(advs) == 0 {
		return
	}
	c.hit(PointBeforeCommit)
	start := time.Now()
	var cerr error
	c.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			cerr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if e := kerrFor(p.ErrorCode); e != nil && cerr == nil {
					cerr = e
				}
			}
		}
	})
	c.m.stage.WithLabelValues(c.o.HandlerName, "commit").Observe(time.Since(start).Seconds())
	if cerr != nil {
		c.log("offset commit failed; will retry", "err", cerr)
		return
	}
	c.m.commits.WithLabelValues(c.o.HandlerName).Inc()
	c.mu.Lock()
	for _, a := range advs {
		a.ps.queue = a.ps.queue[a.n:]
		a.ps.committed = a.next
		if a.ps.mayWait.Load() {
			waiting := false
			for _, it := range a.ps.queue {
				if it.busy || it.st == stWait { // a busy record may still answer WAIT
					waiting = true
					break
				}
			}
			a.ps.mayWait.Store(waiting)
		}
		if a.ps.hwm > 0 {
			c.m.lag.WithLabelValues(c.o.HandlerName, a.ps.topic, strconv.Itoa(int(a.ps.partition))).Set(float64(max(a.ps.hwm-a.next, 0)))
		}
	}
	c.mu.Unlock()
}

func kerrFor(code int16) error {
	if code == 0 {
		return nil
	}
	return fmt.Errorf("offset commit: kafka error code %d", code)
}

func hasPartition(m map[string][]int32, topic string, p int32) bool {
	for _, q := range m[topic] {
		if q == p {
			return true
		}
	}
	return false
}

// flowControl pauses fetching while too much is unfinished or the registry
// is unreachable, and resumes it afterwards.
func (c *Consumer) flowControl() {
	c.mu.Lock()
	idle := c.pending == 0
	c.mu.Unlock()
	if idle {
		// Nothing waits for a dependency of the handler any more (the
		// records it held were revoked): no outage to report; the next
		// record finds out again.
		c.leaveHandlerOutages()
	}
	c.mu.Lock()
	pause := c.pending >= c.o.MaxPending || c.InOutage()
	was := c.paused
	c.paused = pause
	c.mu.Unlock()
	if pause && !was {
		c.cl.PauseFetchTopics(c.o.Topic)
	} else if !pause && was {
		c.cl.ResumeFetchTopics(c.o.Topic)
	}
}

// onRevoked hands back the claims held on the revoked partitions (see
// handBack), commits their done prefix and forgets their records (the next
// owner starts at the committed offset and claims at once: no lease of
// ours is left for it to wait out). With BlockRebalanceOnPoll it never runs
// while a round is in flight.
func (c *Consumer) onRevoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	c.waitRounds() // none in flight but for a corner of franz-go's polling; see onLost
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drainGrace)
	defer cancel()
	c.handBack(hctx, revoked)
	c.commit(ctx, revoked)
	c.forget(revoked)
}

// onLost is onRevoked without the commit (the partitions are no longer
// ours to commit): the registry claims are handed back all the same.
func (c *Consumer) onLost(ctx context.Context, _ *kgo.Client, lost map[string][]int32) {
	// The loop joins every round before it allows a rebalance, but a poll
	// that returns nothing may not hold off rebalances (franz-go), and a
	// round of due retries can start after it: wait for the rounds, which
	// never wait for these callbacks.
	c.waitRounds()
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drainGrace)
	defer cancel()
	c.handBack(hctx, lost)
	c.forget(lost)
}

// waitRounds waits until no round is being started or in flight.
func (c *Consumer) waitRounds() {
	c.roundMu.Lock()
	defer c.roundMu.Unlock()
	c.rounds.Wait()
}

func (c *Consumer) forget(tps map[string][]int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for t, ps := range tps {
		for _, p := range ps {
			if st := c.parts[t][p]; st != nil {
				for _, it := range st.queue {
					if it.st != stDone {
						c.pending--
					}
				}
				delete(c.parts[t], p)
				c.m.lag.DeleteLabelValues(c.o.HandlerName, t, strconv.Itoa(int(p)))
			}
		}
	}
}

// drainGrace bounds the drain's bookkeeping when SHUTDOWN_TIMEOUT has
// already run out.
const drainGrace = 5 * time.Second

// drain finishes what can be finished after the Run context ended (see
// handBack) and makes the final commit of the done prefix.
func (c *Consumer) drain(ctx context.Context) {
	c.handBack(ctx, nil)
	c.commit(ctx, nil)
}

// handBack settles the registry claims held, outside any round, on the
// partitions in only (all when nil): outcomes still to be marked are marked
// done; dead letters already acknowledged are marked failed, so that the
// next owner does not run the record again and write a second dead letter;
// every other claim (held, or parked in an outage) is released without
// counting an attempt, so that the next owner claims it at once instead of
// waiting out the lease. Callers make sure no round is in flight.
func (c *Consumer) handBack(ctx context.Context, only map[string][]int32) {
	c.mu.Lock()
	var marks, fails, held []*item
	for _, ps := range c.allParts() {
		if only != nil && !hasPartition(only, ps.topic, ps.partition) {
			continue
		}
		for _, it := range ps.queue {
			c.unparkLease(it)
			switch it.st {
			case stMarkDone:
				marks = append(marks, it)
			case stMarkFailed:
				fails = append(fails, it)
			case stHandle:
				held = append(held, it)
			}
		}
	}
	c.mu.Unlock()
	if len(marks) > 0 {
		c.markDone(ctx, marks)
	}
	if len(fails) > 0 {
		c.markFailed(ctx, fails)
	}
	for _, it := range slices.Concat(held, marks, fails) {
		switch it.st {
		case stHandle, stMarkDone, stMarkFailed: // not settled above
			_ = c.o.Registry.Release(ctx, it.lease)
			it.st, it.lease, it.failure = stClaim, registry.Lease{}, nil
		}
	}
}
