package eventstore

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/eventstore/objstore"
	"github.com/sluicehq/sluice/shared/envelope"
)

// Store is the event store. It is safe for concurrent use; Close stops its
// committer.
type Store struct {
	pool   *pgxpool.Pool
	bucket objstore.Bucket
	cfg    Config // defaults applied
	shards int    // the store's number of shards (cfg.Shards, checked against the index)
	layout layoutState
	log    *slog.Logger
	hooks  hooks
	// lineDecoders pools the line decoders of segment reads
	// (Store.lineDecoder).
	lineDecoders sync.Pool

	in        chan []*item
	groupDone chan *group
	reserved  chan struct{} // a group's reservation step is over
	quit      chan struct{}
	exited    chan struct{}

	mu     sync.RWMutex
	closed bool

	ctx    context.Context // groups run under it; cancelled after Close drained
	cancel context.CancelFunc

	stats stageStats
	m     *metrics

	// held are the shards this store holds when it is one server's part
	// of a store of several (EVENT_STORE_SHARD_MAP); nil: every shard.
	held []int
	// parts are the servers' stores of a store of several servers, and
	// partOf each shard's index in parts; nil on a store of one server
	// and on a part (docs/scale-out.md#shards-over-several-servers).
	parts  []*Store
	partOf []int
}

// openTimeout bounds New's first read of the store's layout.
const openTimeout = 5 * time.Second

// New returns a Store over deps.Pool (migrations applied) and deps.Bucket,
// with cfg's zero fields at their defaults, and starts its committer. It
// reads the store's number of shards from the index (recording
// cfg.Shards on a new index) and fails with a *ShardsMismatchError when
// cfg.Shards differs (docs/eventstore.md#shards).
func New(cfg Config, deps Deps, opts ...Option) (*Store, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	servers, err := cfg.ShardServers()
	if err != nil {
		return nil, fmt.Errorf("eventstore: EVENT_STORE_SHARD_MAP: %w", err)
	}
	for _, sv := range servers {
		if deps.ShardPools[sv.URL] == nil {
			return nil, fmt.Errorf("eventstore: New needs Deps.ShardPools for the server of %s (EVENT_STORE_SHARD_MAP)", sv.Name())
		}
	}
	if len(servers) == 1 {
		deps.Pool = deps.ShardPools[servers[0].URL] // one server holds every shard: no map in effect
	}
	if (deps.Pool == nil && len(servers) < 2) || deps.Bucket == nil {
		return nil, fmt.Errorf("eventstore: New needs Deps.Pool and Deps.Bucket")
	}
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	h := hooks{now: time.Now, gapNow: time.Now}
	for _, o := range opts {
		o(&h)
	}
	if len(servers) > 1 {
		return openServers(cfg, deps, h, servers)
	}
	return open(cfg, deps, h, nil, nil)
}

// open opens the store (or, with held set, the part of a store of several
// servers holding those shards, counting into m) on deps.Pool and starts
// its committer.
func open(cfg Config, deps Deps, h hooks, held []int, m *metrics) (*Store, error) {
	s := &Store{
		pool: deps.Pool, bucket: deps.Bucket, cfg: cfg, log: deps.Logger, hooks: h, held: held,
		in:        make(chan []*item, 64),
		groupDone: make(chan *group),
		reserved:  make(chan struct{}),
		quit:      make(chan struct{}),
		exited:    make(chan struct{}),
	}
	// The number of shards is fixed when the store is created: recorded in
	// the index by the first Store opened on it, refused when it differs.
	// Postgres down at start is an outage, not a refusal: the store starts,
	// checks the layout in the background, and answers what depends on it
	// as unavailable until then (docs/eventstore.md#shards).
	s.shards, s.m = cfg.Shards, m
	if m == nil {
		s.m = newMetrics(cfg.Shards)
	}
	s.layout.ready = make(chan struct{})
	s.ctx, s.cancel = context.WithCancel(context.Background())
	lctx, lcancel := context.WithTimeout(context.Background(), openTimeout)
	_, err := s.openLayout(lctx, cfg.Shards)
	lcancel()
	switch {
	case layoutRefused(err):
		s.cancel()
		return nil, err
	case err != nil && cfg.LayoutNoWait:
		s.cancel()
		p := pendingLayout(err)
		p.Once = true
		return nil, p
	case err != nil:
		p, _, _ := s.layout.setPending(err)
		s.log.Warn("eventstore: the store's layout is not readable yet; checking it in the background",
			"waiting_for", p.Waiting, "err", err, "server", s.serverName())
		go s.awaitLayout(cfg.Shards)
	default:
		close(s.layout.ready)
	}
	go s.run()
	return s, nil
}

// Close stops accepting appends, lets the gathered ones and the groups in
// flight finish, fails appends still waiting for another writer with
// ErrClosed, and stops the committer. It does not close the pool or bucket.
func (s *Store) Close() error {
	if s.parts != nil {
		return s.closeServers()
	}
	s.mu.Lock()
	already := s.closed
	s.closed = true
	s.mu.Unlock()
	if !already {
		close(s.quit)
	}
	<-s.exited
	s.cancel()
	return nil
}

// Result is the outcome of one envelope of an Append.
type Result struct {
	// Event is the stored event (sequence_number, position, line); valid
	// when Err is nil.
	Event Event
	// Duplicate: the event_id was already stored and Event is the stored
	// one (an idempotent no-op).
	Duplicate bool
	// Mismatch is set (with Duplicate) when warn mode returned a stored
	// event whose canonical form differs from the appended one.
	Mismatch *IdempotencyMismatchError
	// Err is this envelope's failure: *envelope.ValidationError,
	// *ConflictError, *IdempotencyMismatchError, *SlotError, or an
	// infrastructure error (Postgres, object storage) — then the outcome is
	// unknown and the caller retries with the same event_id.
	Err error
}

// Append stores envelopes (docs/eventstore.md#append-protocol-group-commit). Each envelope succeeds or fails on
// its own; results are in the order of envs. The error is non-nil only when
// the call as a whole did not complete (ctx done, store closed); envelopes
// may then still be stored, and a retry with the same event_ids is safe.
//
// Sequence numbers: with the postgres allocator (default) the store assigns
// them; a command must not carry one. A domain event carrying
// sequence_number k goes into slot k of its aggregate: slot k must hold a
// command (metadata.causation_id, when set, must be that command's
// event_id) and no other domain event. A domain event without one reserves
// its own slot. With the allocator off every envelope carries its
// sequence_number and only uniqueness per (aggregate, sequence, kind) is
// enforced. position must not be set.
func (s *Store) Append(ctx context.Context, envs ...envelope.Envelope) ([]Result, error) {
	results := make([]Result, len(envs))
	items := make([]*item, 0, len(envs))
	for i, e := range envs {
		it, err := s.newItem(ctx, e)
		if err != nil {
			results[i].Err = err
			continue
		}
		it.idx = i
		items = append(items, it)
	}
	if len(items) == 0 {
		s.m.countResults(results)
		return results, nil
	}
	return s.submit(ctx, items, results)
}

// submit hands items to the group commit and waits for each one's result,
// written into results at the item's index; the call fails with ErrClosed
// after Close, or with ctx's error (the items may still be committed).
func (s *Store) submit(ctx context.Context, items []*item, results []Result) ([]Result, error) {
	if s.parts != nil {
		return s.submitServers(ctx, items, results)
	}
	if _, err := s.submitWait(ctx, items, results); err != nil {
		return nil, err
	}
	s.m.countResults(results)
	return results, nil
}

// submitWait is submit on this store's committer, without counting the
// results (the store of several servers counts them once).
func (s *Store) submitWait(ctx context.Context, items []*item, results []Result) ([]Result, error) {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return nil, ErrClosed
	}
	if err := s.layoutChecked(); err != nil {
		s.mu.RUnlock()
		return nil, err
	}
	select {
	case s.in <- items:
		s.mu.RUnlock()
	case <-ctx.Done():
		s.mu.RUnlock()
		return nil, ctx.Err()
	}
	for _, it := range items {
		select {
		case <-it.done:
			results[it.idx] = it.res
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return results, nil
}

// AppendOne appends one envelope; the error is the envelope's own (see
// Result.Err) or the call's.
func (s *Store) AppendOne(ctx context.Context, e envelope.Envelope) (Result, error) {
	rs, err := s.Append(ctx, e)
	if err != nil {
		return Result{}, err
	}
	return rs[0], rs[0].Err
}
