package worker

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/shared/claim"
	"github.com/sluicehq/sluice/shared/kafka"
	"github.com/sluicehq/sluice/shared/observability"
	"github.com/sluicehq/sluice/shared/recordformat"
	"github.com/sluicehq/sluice/shared/tracing"
)

// Crash points the runtime hits (named for the worker given to WithCrasher).
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
	lease     claim.Lease
	outcome   claim.Outcome
	notBefore time.Time
	tries     int // local retries (backoff exponent)
	polledAt  time.Time
	// dead-letter data
	failure   *claim.Failure
	errText   string
	errClass  string
	attempts  int
	firstFail time.Time
	wait      *claim.Result // last WAIT result, for healing
	healFails int           // retryable Heal failures (bounded by MaxAttempts)
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
	// span is the record's span (tracing on), ended at its offset commit.
	span trace.Span
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
	cfg   Config // defaults applied (Config.withDefaults)
	deps  Deps   // defaults applied (Deps.withDefaults)
	hooks hooks
	cl    *kgo.Client
	m     *metrics
	hb    *observability.Heartbeat
	log   func(msg string, args ...any)
	// tracer is nil when tracing is off.
	tracer trace.Tracer

	// h is the handler under the recover middleware (guarded).
	h *guarded
	// dlqMax bounds a dead letter's size (Config.DLQMaxBytes, else the
	// producer's maximum batch size): a larger one is written in pointer
	// form.
	dlqMax int

	mu    sync.Mutex // guards parts (rebalance callbacks vs the loop)
	parts map[string]map[int32]*partState
	// partList is parts in allParts' order, nil when a partition was added
	// or forgotten since it was made. Guarded by mu.
	partList []*partState
	// selBusy and selBlocked are eachSelectable's key sets, reused from
	// one call to the next. Guarded by mu.
	selBusy, selBlocked map[string]struct{}
	pending             int
	paused              bool
	// opPaused is the operator's pause flag of the group as last read
	// (watchPause); flowControl stops fetching while it is set.
	opPaused atomic.Bool
	// quiesced: the operator pause has taken effect (see Quiesced); set
	// by the loop only.
	quiesced atomic.Bool
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
	// lingerEnd is when the round that waits for more records starts
	// (lingerUntil); zero when none waits. Only the loop touches it.
	lingerEnd time.Time
	// sem bounds the handler goroutines of all rounds together
	// (Config.Concurrency).
	sem       chan struct{}
	rebalance atomic.Bool // a rebalance waits for the loop to allow it
	allowedAt time.Time   // last AllowRebalance
	// lastCommit is when the last offset commit was sent; commitAt, when
	// set, is when a finished prefix that waits for CommitInterval may be
	// committed (commit). Guarded by mu.
	lastCommit, commitAt time.Time
}

// New validates cfg and deps, applies their defaults and creates the
// Kafka client (nothing is fetched before Run). opts are test hooks, and
// the crash points (WithCrasher).
func New(cfg Config, deps Deps, opts ...Option) (*Consumer, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if deps, err = deps.withDefaults(); err != nil {
		return nil, err
	}
	var h hooks
	for _, o := range opts {
		o(&h)
	}
	c := &Consumer{cfg: cfg, deps: deps, hooks: h, m: newMetrics(deps.Metrics), parts: map[string]map[int32]*partState{}, hb: observability.NewHeartbeat(time.Minute),
		wake: make(chan struct{}), sem: make(chan struct{}, cfg.Concurrency)}
	c.m.zero(cfg.HandlerName)
	c.log = deps.Logger.With("handler", cfg.HandlerName).Warn
	c.h = newGuarded(c, deps.Handler)
	c.tracer = tracing.Tracer(deps.TracerProvider)
	c.out.deps, c.out.checks = map[string]*depOutage{}, map[string]bool{}
	kopts := []kgo.Opt{
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topic),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.OnPartitionsRevoked(c.onRevoked),
		kgo.OnPartitionsLost(c.onLost),
		kgo.OnPartitionsCallbackBlocked(func(context.Context, *kgo.Client) { c.rebalance.Store(true) }),
		kgo.WithHooks(&kafkaRequests{vec: c.m.kafkaReqs, handler: cfg.HandlerName, byKey: map[int16]prometheus.Counter{}}),
	}
	if cfg.SessionTimeout > 0 {
		kopts = append(kopts, kgo.SessionTimeout(cfg.SessionTimeout))
	}
	kopts = append(kopts, h.kafkaOpts...) // last: they override the above
	if err := c.adoptBeforeJoin(); err != nil {
		return nil, err
	}
	cl, err := kafka.NewClient(cfg.Kafka, kopts...) // TLS, SASL, acks=all, the size budget
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	c.cl = cl
	c.dlqMax = cfg.DLQMaxBytes
	if mb, ok := cl.OptValue(kgo.ProducerBatchMaxBytes).(int32); ok && (c.dlqMax <= 0 || int(mb) < c.dlqMax) {
		c.dlqMax = int(mb)
	}
	if deps.Health != nil {
		deps.Health.AddReadiness(cfg.HandlerName+":registry", func(context.Context) error { return c.outageErr(DependencyRegistry) })
		deps.Health.AddLiveness(cfg.HandlerName+":loop", c.hb.Check)
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
// group, within Config.ShutdownTimeout. It returns nil after a clean drain.
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
		t := time.NewTimer(c.cfg.ShutdownTimeout)
		defer t.Stop()
		select {
		case <-t.C:
			cancelWork()
		case <-work.Done():
		}
	}()
	var runErr error
	c.allowedAt = time.Now()
	if c.deps.Pause != nil {
		c.readPause(ctx) // before the first fetch: a paused group fetches nothing
		c.flowControl()
		pctx, stop := context.WithCancel(ctx)
		defer stop()
		go c.watchPause(pctx)
	}
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
	if c.deps.Health != nil {
		// A stopped consumer is neither ready nor live: its checks go (a
		// process that replaces it registers the new one's).
		c.deps.Health.Remove(c.cfg.HandlerName + ":registry")
		c.deps.Health.Remove(c.cfg.HandlerName + ":loop")
	}
	c.endOutages()
	c.quiesced.Store(false)
	c.m.paused.DeleteLabelValues(c.cfg.HandlerName) // a stopped consumer reports no pause
	return runErr
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
		c.partList = nil
	}
	return ps
}

// allParts returns the partitions in a stable order (a slice the callers
// only read: it is kept until a partition is added or forgotten). Callers
// hold mu.
func (c *Consumer) allParts() []*partState {
	if c.partList != nil {
		return c.partList
	}
	out := []*partState{}
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
	c.partList = out
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
	// Either record format, detected per record (docs/kafka.md): both can
	// stand in one partition while a deployment switches.
	env, err := recordformat.Decode(r, c.cfg.Limits)
	if err != nil {
		it.parseErr = err
		it.key = "kafka-key:" + string(r.Key)
		it.st = stDLQ
		it.errText, it.errClass, it.attempts = "parse: "+err.Error(), ClassParse, 1
		it.firstFail = time.Now()
		return
	}
	it.view.Envelope = env
	it.key = c.deps.AggregateKey(env)
	if c.tracer != nil {
		c.startSpan(it)
	}
}

func (c *Consumer) hit(point string) {
	if c.hooks.crash != nil && c.hooks.crashWorker != "" {
		c.hooks.crash.Hit(c.hooks.crashWorker, point)
	}
}
