package eventstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/shared/envelope"
)

// A store spread over several Postgres servers (EVENT_STORE_SHARD_MAP,
// docs/scale-out.md#shards-over-several-servers) is a Store whose parts
// are one Store per server, each over its own pool and holding its
// shards (Store.held) with its own committer, layout check and
// notifications. The outer Store routes: an append or a read of an
// aggregate to the server of its shard, a shard's readers (ShardLog) to
// its server, and what spans the log (Log, LogTail, Heads, Subscribe,
// Repair, Reindex, the aggregate listings) to every server, merged. A
// group commit is one server's: a group holds the envelopes of that
// server's shards only, so it writes one segment and runs one
// reservation transaction on one server. A server that does not answer
// holds up only its shards.

// openServers opens a store over several servers: one part per server.
// A part whose server does not answer opens anyway and checks its layout
// in the background (as a store of one server does); a part whose server
// refuses the map (*ShardMapMismatchError, *ShardsMismatchError) fails New.
func openServers(cfg Config, deps Deps, h hooks, servers []ShardServer) (*Store, error) {
	s := &Store{
		bucket: deps.Bucket, cfg: cfg, log: deps.Logger, hooks: h, shards: cfg.Shards,
		m: newMetrics(cfg.Shards), partOf: make([]int, cfg.Shards),
	}
	s.layout.ready = make(chan struct{})
	close(s.layout.ready) // each part checks its own
	s.ctx, s.cancel = context.WithCancel(context.Background())
	for i, sv := range servers {
		pd := deps
		pd.Pool, pd.ShardPools = deps.ShardPools[sv.URL], nil
		pd.Logger = deps.Logger.With("eventstore_server", sv.Name())
		p, err := open(cfg, pd, h, sv.Shards, s.m) // one set of collectors for the store
		if err != nil {
			_ = s.closeServers()
			return nil, err
		}
		s.parts = append(s.parts, p)
		for _, sh := range sv.Shards {
			s.partOf[sh] = i
		}
	}
	return s, nil
}

// closeServers closes every part.
func (s *Store) closeServers() error {
	for _, p := range s.parts {
		_ = p.Close()
	}
	s.cancel()
	return nil
}

// servers are the stores of the servers that hold the log: the parts, or
// the store itself on one server.
func (s *Store) servers() []*Store {
	if s.parts == nil {
		return []*Store{s}
	}
	return s.parts
}

// serverIndex is the index in servers() of the server holding shard.
func (s *Store) serverIndex(shard int) int {
	if s.parts == nil || shard < 0 || shard >= len(s.partOf) {
		return 0
	}
	return s.partOf[shard]
}

// serverOf is the store of the server holding shard (the store itself on
// one server, and for a shard out of range, which its readers refuse).
func (s *Store) serverOf(shard int) *Store {
	if s.parts == nil || shard < 0 || shard >= len(s.partOf) {
		return s
	}
	return s.parts[s.partOf[shard]]
}

// serverOfAggregate is the store of the server holding an aggregate (its
// id normalised as the store keeps it).
func (s *Store) serverOfAggregate(aggregateType, aggregateID string) (*Store, error) {
	if s.parts == nil {
		return s, nil
	}
	id, err := envelope.NormalizeAggregateID(aggregateID)
	if err != nil {
		return nil, err
	}
	return s.serverOf(ShardOf(aggregateType, id, s.shards)), nil
}

// ServerError is an error of one Postgres server of a store spread over
// several: it names the server by its shards (never by its URL), and
// wraps the server's error (a connection error is an outage, as on one
// server).
type ServerError struct {
	// Server names the server: "shards 2-3".
	Server string
	Err    error
}

func (e *ServerError) Error() string {
	return fmt.Sprintf("%v (the event store's Postgres server of %s, EVENT_STORE_SHARD_MAP)", e.Err, e.Server)
}

func (e *ServerError) Unwrap() error { return e.Err }

// serverErr wraps err in a *ServerError on a part of a store of several
// servers (what, when set, prefixes it as "eventstore: what: ").
func (s *Store) serverErr(what string, err error) error {
	if err == nil {
		return nil
	}
	if what != "" {
		err = fmt.Errorf("eventstore: %s: %w", what, err)
	}
	if s.held == nil {
		return err
	}
	var se *ServerError
	if errors.As(err, &se) {
		return err
	}
	return &ServerError{Server: s.serverName(), Err: err}
}

// submitServers hands each item to the committer of its shard's server
// and waits for them all. Each envelope stands alone (Append), and an
// atomic batch is one aggregate's, hence one server's: no transaction
// spans two servers. A server that cannot take its items (its layout not
// checked yet: it has not answered since the store opened) fails those
// items only; the call fails only when ctx ends or the store is closed.
func (s *Store) submitServers(ctx context.Context, items []*item, results []Result) ([]Result, error) {
	per := make([][]*item, len(s.parts))
	for _, it := range items {
		i := s.serverIndex(it.shard)
		per[i] = append(per[i], it)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(s.parts))
	for i, its := range per {
		if len(its) == 0 {
			continue
		}
		wg.Go(func() {
			if _, err := s.parts[i].submitWait(ctx, its, results); err != nil {
				errs[i] = err
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		switch {
		case err == nil:
		case ctx.Err() != nil || errors.Is(err, ErrClosed):
			return nil, err
		default:
			for _, it := range per[i] {
				results[it.idx] = Result{Err: err}
			}
		}
	}
	for i, its := range per {
		for _, it := range its {
			if r := results[it.idx]; r.Err != nil {
				results[it.idx].Err = s.parts[i].serverResultErr(r.Err)
			}
		}
	}
	s.m.countResults(results)
	return results, nil
}

// serverResultErr names the server in an envelope's Postgres error; the
// envelope's own refusals (validation, conflict, slot, idempotency) and
// the object store's outage stay as they are.
func (s *Store) serverResultErr(err error) error {
	var ve *envelope.ValidationError
	var ce *ConflictError
	var se *SlotError
	var me *IdempotencyMismatchError
	var be *BatchAbortedError
	var ue *UnavailableError
	if errors.As(err, &ve) || errors.As(err, &ce) || errors.As(err, &se) || errors.As(err, &me) || errors.As(err, &be) ||
		errors.As(err, &ue) || errors.Is(err, ErrClosed) {
		return err
	}
	return s.serverErr("", err)
}

// subscribeServers forwards every server's notifications into one
// stream, closed when ctx ends (when every server's stream is closed).
func (s *Store) subscribeServers(ctx context.Context) <-chan Notification {
	out := make(chan Notification)
	var wg sync.WaitGroup
	for _, p := range s.parts {
		in := p.Subscribe(ctx)
		wg.Go(func() {
			for n := range in {
				select {
				case out <- n:
				case <-ctx.Done():
					return
				}
			}
		})
	}
	go func() {
		wg.Wait()
		close(out)
	}()
	return out
}

// headsServers is Heads over every server, by shard.
func (s *Store) headsServers(ctx context.Context) ([]ShardHead, error) {
	var out []ShardHead
	for _, p := range s.parts {
		hs, err := p.Heads(ctx)
		if err != nil {
			return nil, p.serverErr("", err)
		}
		out = append(out, hs...)
	}
	slices.SortFunc(out, func(a, b ShardHead) int { return cmp.Compare(a.Shard, b.Shard) })
	return out, nil
}

// repairServers is Repair on every server, summed; it repairs every
// server it can and returns the others' errors.
func (s *Store) repairServers(ctx context.Context, olderThan time.Duration) (RepairReport, error) {
	var rep RepairReport
	var errs []error
	for _, p := range s.parts {
		r, err := p.Repair(ctx, olderThan)
		rep.Blocks += r.Blocks
		rep.Committed += r.Committed
		rep.Abandoned += r.Abandoned
		rep.InFlight += r.InFlight
		if err != nil {
			errs = append(errs, p.serverErr("", err))
		}
	}
	return rep, errors.Join(errs...)
}

// reindexServers is ReindexWithProgress on every server in turn: each
// rebuilds its shards' rows from the segments its groups wrote (a
// segment holds one server's shards; its key names its lowest shard).
func (s *Store) reindexServers(ctx context.Context, progress func(ReindexProgress)) (ReindexReport, error) {
	rep := ReindexReport{NextPositions: make([]int64, s.shards)}
	var done ReindexProgress
	for _, p := range s.parts {
		var step func(ReindexProgress)
		if progress != nil {
			base := done
			step = func(pr ReindexProgress) {
				progress(ReindexProgress{Segments: base.Segments + pr.Segments, Lines: base.Lines + pr.Lines})
			}
		}
		r, err := p.ReindexWithProgress(ctx, step)
		if err != nil {
			return rep, p.serverErr("", err)
		}
		rep.Segments += r.Segments
		rep.Events += r.Events
		rep.Duplicates += r.Duplicates
		rep.Aggregates += r.Aggregates
		for _, sh := range p.held {
			rep.NextPositions[sh] = r.NextPositions[sh]
		}
		done.Segments += r.Segments
		done.Lines += r.Events + r.Duplicates
	}
	rep.NextPosition = rep.NextPositions[0]
	return rep, nil
}

// byEventIDServers looks the event up on every server. An event_id is
// unique per server only (docs/scale-out.md#event-ids-across-servers):
// when two servers hold it, the first server's event is returned and the
// duplicate is logged as an error.
func (s *Store) byEventIDServers(ctx context.Context, eventID string) (Event, error) {
	var found *Event
	var errs []error
	for _, p := range s.parts {
		ev, err := p.ByEventID(ctx, eventID)
		switch {
		case errors.Is(err, ErrNotFound):
		case err != nil:
			errs = append(errs, p.serverErr("", err))
		case found == nil:
			found = &ev
		default:
			s.log.Error("eventstore: one event_id is stored on two servers of the shard map (an event_id reused for aggregates of different servers)",
				"event_id", eventID, "first", found.Envelope.AggregateType+"/"+found.Envelope.AggregateID,
				"second", ev.Envelope.AggregateType+"/"+ev.Envelope.AggregateID)
		}
	}
	if found != nil {
		return *found, nil
	}
	if len(errs) > 0 {
		return Event{}, errors.Join(errs...)
	}
	return Event{}, fmt.Errorf("%w: event %s", ErrNotFound, eventID)
}

// streamsServers is Streams with the ids split by server.
func (s *Store) streamsServers(ctx context.Context, aggregateType string, ids []string, kind envelope.Kind) ([][]Event, error) {
	out := make([][]Event, len(ids))
	per := make([][]int, len(s.parts))
	for i, id := range ids {
		n, err := envelope.NormalizeAggregateID(id)
		if err != nil {
			return nil, err
		}
		k := s.serverIndex(ShardOf(aggregateType, n, s.shards))
		per[k] = append(per[k], i)
	}
	for k, at := range per {
		if len(at) == 0 {
			continue
		}
		sub := make([]string, len(at))
		for j, i := range at {
			sub[j] = ids[i]
		}
		got, err := s.parts[k].Streams(ctx, aggregateType, sub, kind)
		if err != nil {
			return nil, s.parts[k].serverErr("", err)
		}
		for j, i := range at {
			out[i] = got[j]
		}
	}
	return out, nil
}

// aggregatesServers is Aggregates over every server: each server's page,
// merged in id order, cut to the limit (an aggregate is on one server).
func (s *Store) aggregatesServers(ctx context.Context, q AggregateQuery) ([]AggregateInfo, error) {
	var out []AggregateInfo
	for _, p := range s.parts {
		page, err := p.Aggregates(ctx, q)
		if err != nil {
			return nil, p.serverErr("", err)
		}
		out = append(out, page...)
	}
	slices.SortFunc(out, func(a, b AggregateInfo) int { return cmp.Compare(a.ID, b.ID) })
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[:q.Limit]
	} else if q.Limit <= 0 && len(out) > 500 {
		out = out[:500]
	}
	return out, nil
}

// countServers sums f over every server.
func (s *Store) countServers(f func(p *Store) (int64, error)) (int64, error) {
	var n int64
	for _, p := range s.parts {
		k, err := f(p)
		if err != nil {
			return 0, p.serverErr("", err)
		}
		n += k
	}
	return n, nil
}

// countByPartServers is CountAggregatesByPart over every server, summed.
func (s *Store) countByPartServers(ctx context.Context, aggType, sep string, kind envelope.Kind) (map[string]int64, error) {
	out := map[string]int64{}
	for _, p := range s.parts {
		m, err := p.CountAggregatesByPart(ctx, aggType, sep, kind)
		if err != nil {
			return nil, p.serverErr("", err)
		}
		for k, v := range m {
			out[k] += v
		}
	}
	return out, nil
}

// estimateServers is AggregatesEstimate over every server: the sum of the
// analyzed ones, negative when none was analyzed.
func (s *Store) estimateServers(ctx context.Context) (float64, error) {
	sum, analyzed := 0.0, false
	for _, p := range s.parts {
		n, err := p.AggregatesEstimate(ctx)
		if err != nil {
			return 0, p.serverErr("", err)
		}
		if n >= 0 {
			sum, analyzed = sum+n, true
		}
	}
	if !analyzed {
		return -1, nil
	}
	return sum, nil
}

// sampleServers is SampleAggregates over every server: up to n from each,
// shuffled together, n kept.
func (s *Store) sampleServers(ctx context.Context, aggType string, kind envelope.Kind, n int) ([]string, error) {
	var out []string
	for _, p := range s.parts {
		ids, err := p.SampleAggregates(ctx, aggType, kind, n)
		if err != nil {
			return nil, p.serverErr("", err)
		}
		out = append(out, ids...)
	}
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out[:min(len(out), n)], nil
}

// planReindexServers is PlanReindex on every server: the segments are
// the bucket's (the same for every server), the index rows and writers
// summed over the servers.
func (s *Store) planReindexServers(ctx context.Context, quiet time.Duration) (ReindexPlan, error) {
	var plan ReindexPlan
	var live error
	for i, p := range s.parts {
		pp, err := p.PlanReindex(ctx, quiet)
		if err != nil && !errors.Is(err, ErrWriterLive) {
			return plan, p.serverErr("", err)
		}
		if err != nil {
			live = err
		}
		if i == 0 {
			plan.Segments, plan.Positions, plan.Bytes = pp.Segments, pp.Positions, pp.Bytes
		}
		if p.holds(0) {
			plan.NextPosition = pp.NextPosition
		}
		plan.IndexRows += pp.IndexRows
		plan.Writers = append(plan.Writers, pp.Writers...)
	}
	return plan, live
}

// AppendReady reports whether the store can take appends: nil when at
// least one of its servers answers (on one server: when it answers). A
// store over several servers with some of them down takes the appends of
// the others' shards, so it stays ready; the appends of the shards it
// cannot reach fail with a *ServerError naming the server
// (docs/operations.md#a-postgres-server-holding-some-shards-is-down).
// When no server answers it returns every server's error.
func (s *Store) AppendReady(ctx context.Context) error {
	var errs []error
	for _, p := range s.servers() {
		_, err := p.Heads(ctx)
		if err == nil {
			return nil
		}
		if s.parts != nil {
			err = p.serverErr("", err)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
